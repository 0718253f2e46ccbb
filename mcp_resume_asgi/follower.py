"""Moved to `mcp_resume_asgi.engine.follower` (issue 21): this path re-exports it until the old
paths are retired."""

from mcp_resume_asgi.engine.follower import *  # noqa: F403
from mcp_resume_asgi.engine.follower import (
    follow,
)

__all__ = [
    "follow",
]
