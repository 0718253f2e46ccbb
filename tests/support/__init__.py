"""Test support: running ASGI apps under uvicorn, a cutting TCP proxy, stock-client helpers."""
