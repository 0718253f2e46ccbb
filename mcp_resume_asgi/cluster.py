"""Moved to `mcp_resume_asgi.engine.cluster` (issue 21): this path re-exports it until the old
paths are retired."""

from mcp_resume_asgi.engine.cluster import *  # noqa: F403
from mcp_resume_asgi.engine.cluster import (
    WARN_EVERY_S,
    Node,
)

# Names defined elsewhere that were importable from here too.
from mcp_resume_asgi.store.health import (
    OutageLog as OutageLog,
)
from mcp_resume_asgi.store.health import (
    describe_error as describe_error,
)
from mcp_resume_asgi.wire.scope_keys import (
    RELAYED_FROM as RELAYED_FROM,
)

__all__ = [
    "WARN_EVERY_S",
    "Node",
]
