"""Moved to `mcp_resume_asgi.wire.sse` (issue 21): this path re-exports it until the old
paths are retired."""

from mcp_resume_asgi.wire.sse import *  # noqa: F403
from mcp_resume_asgi.wire.sse import (
    KEEPALIVE,
    SSEError,
    SSEEvent,
    SSEParser,
    encode_payload,
    priming_frame,
    retry_frame,
    single_event_frame,
)

__all__ = [
    "KEEPALIVE",
    "SSEError",
    "SSEEvent",
    "SSEParser",
    "encode_payload",
    "priming_frame",
    "retry_frame",
    "single_event_frame",
]
