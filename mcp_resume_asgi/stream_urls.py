"""Moved: a resumed GET, stream URLs included, is `http/resume.py` (issue 21); re-exported
here until the old paths go."""

from __future__ import annotations

from mcp_resume_asgi.http.resume import MAX_ANSWERS, Resumes

__all__ = ["MAX_ANSWERS", "Resumes"]
