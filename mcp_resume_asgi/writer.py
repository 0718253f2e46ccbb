"""Moved to `mcp_resume_asgi.engine.delivery` (issue 21): this path re-exports it until the old
paths are retired."""

from mcp_resume_asgi.engine.delivery import *  # noqa: F403
from mcp_resume_asgi.engine.delivery import (
    READ_BATCH,
    WATCH_CHECK_S,
    Writer,
    finish_answer,
    note_detached,
)

# Names defined elsewhere that were importable from here too.
from mcp_resume_asgi.wire.sse import (
    frame_events as frame_events,
)

__all__ = [
    "READ_BATCH",
    "WATCH_CHECK_S",
    "Writer",
    "finish_answer",
    "note_detached",
]
