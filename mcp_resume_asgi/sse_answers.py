"""Moved to `mcp_resume_asgi.engine.delivery` (issue 21; `frame_events` is `wire.sse`'s): this
path re-exports them until the old paths are retired."""

from mcp_resume_asgi.engine.delivery import finish_answer, note_detached
from mcp_resume_asgi.wire.sse import frame_events

__all__ = ["finish_answer", "frame_events", "note_detached"]
