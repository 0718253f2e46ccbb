"""Moved to `http/misconfig.py` (issue 21); re-exported here until the old paths go."""

from __future__ import annotations

from mcp_resume_asgi.http.misconfig import PEEK_LIMIT, WrongPathDetector, check_asgi_app

__all__ = ["PEEK_LIMIT", "WrongPathDetector", "check_asgi_app"]
