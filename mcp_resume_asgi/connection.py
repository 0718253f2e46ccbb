"""Moved to `mcp_resume_asgi.engine.connection` (issue 21): this path re-exports it until the old
paths are retired."""

from mcp_resume_asgi.engine.connection import *  # noqa: F403
from mcp_resume_asgi.engine.connection import (
    Connection,
    Delivery,
    Flag,
    Interruptible,
)

__all__ = [
    "Connection",
    "Delivery",
    "Flag",
    "Interruptible",
]
