"""Moved to `http/middleware.py` (issue 21); re-exported here until the old paths go."""

from __future__ import annotations

from typing import Any

from mcp_resume_asgi.http.middleware import DEFAULT_MAX_BODY_BYTES, ResumeMiddleware

__all__ = ["DEFAULT_MAX_BODY_BYTES", "ResumeMiddleware"]


def __getattr__(name: str) -> Any:
    """`resumable` moved to `wrap.py` (it imports this module); still importable from here."""
    if name == "resumable":
        from mcp_resume_asgi.wrap import resumable

        return resumable
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
