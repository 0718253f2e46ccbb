"""Moved to `mcp_resume_asgi.engine.scheduler` (issue 21): this path re-exports it until the old
paths are retired."""

from mcp_resume_asgi.engine.scheduler import *  # noqa: F403
from mcp_resume_asgi.engine.scheduler import (
    Scheduler,
    Timer,
    spawn,
)

__all__ = [
    "Scheduler",
    "Timer",
    "spawn",
]
