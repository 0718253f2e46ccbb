"""Moved to `mcp_resume_asgi.engine.recorder` (issue 21): this path re-exports it until the old
paths are retired."""

from mcp_resume_asgi.engine.recorder import *  # noqa: F403
from mcp_resume_asgi.engine.recorder import (
    LOST_TEXT,
    WRITE_BEHIND_BYTES,
    WRITE_BEHIND_FRAMES,
    Recorder,
)

__all__ = [
    "LOST_TEXT",
    "WRITE_BEHIND_BYTES",
    "WRITE_BEHIND_FRAMES",
    "Recorder",
]
