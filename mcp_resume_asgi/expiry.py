"""Moved to `mcp_resume_asgi.engine.cancellation` (issue 21): this path re-exports it until the old
paths are retired."""

from mcp_resume_asgi.engine.cancellation import *  # noqa: F403
from mcp_resume_asgi.engine.cancellation import (
    CANCEL_GRACE_S,
    cancel_app,
    check,
    closed_by_client,
    expire,
    forget,
)

__all__ = [
    "CANCEL_GRACE_S",
    "cancel_app",
    "check",
    "closed_by_client",
    "expire",
    "forget",
]
