"""Benchmarks for mcp-resume-asgi: run `python -m bench` from the repository root (see bench/README.md)."""
