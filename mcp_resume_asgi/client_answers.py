"""Moved to `http/client_answers.py` (issue 21); re-exported here until the old paths go."""

from __future__ import annotations

from mcp_resume_asgi.http.client_answers import ClientAnswers

__all__ = ["ClientAnswers"]
