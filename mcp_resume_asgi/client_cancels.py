"""Moved to `http/client_cancels.py` (issue 21); re-exported here until the old paths go."""

from __future__ import annotations

from mcp_resume_asgi.http.client_cancels import ClientCancels

__all__ = ["ClientCancels"]
