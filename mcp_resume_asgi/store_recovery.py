"""Moved to `mcp_resume_asgi.engine.store_recovery` (issue 21): this path re-exports it until the old
paths are retired."""

from mcp_resume_asgi.engine.store_recovery import *  # noqa: F403
from mcp_resume_asgi.engine.store_recovery import (
    FIRST_RETRY_S,
    StoreRecovery,
)

__all__ = [
    "FIRST_RETRY_S",
    "StoreRecovery",
]
