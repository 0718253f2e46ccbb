"""Moved to `http/retried_posts.py` (issue 21); re-exported here until the old paths go."""

from __future__ import annotations

from mcp_resume_asgi.http.retried_posts import RetryAnswer, answer_retry, opened_record

__all__ = ["RetryAnswer", "answer_retry", "opened_record"]
