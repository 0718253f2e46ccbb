"""Moved to `mcp_resume_asgi.engine.sessions` (issue 21): this path re-exports it until the old
paths are retired."""

from mcp_resume_asgi.engine.sessions import *  # noqa: F403
from mcp_resume_asgi.engine.sessions import (
    Sessions,
)

# Names defined elsewhere that were importable from here too.
from mcp_resume_asgi.wire.scope_keys import (
    DECLARED_CAPABILITIES as DECLARED_CAPABILITIES,
)

__all__ = [
    "Sessions",
]
