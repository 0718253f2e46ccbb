"""Merged into `mcp_resume_asgi.engine.hosted` (issue 21: one `HostedStream`, no mixins); the
answer mode it exported is `core.answer_mode`'s. This path re-exports it until the old paths
are retired."""

from mcp_resume_asgi.core.answer_mode import Mode

__all__ = ["Mode"]
