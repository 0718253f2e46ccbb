"""Moved to `mcp_resume_asgi.engine.hosted` (issue 21): this path re-exports it until the old
paths are retired."""

from mcp_resume_asgi.engine.hosted import *  # noqa: F403
from mcp_resume_asgi.engine.hosted import (
    STATUS_HOLD_S,
    HostedStream,
)

__all__ = [
    "STATUS_HOLD_S",
    "HostedStream",
]
