"""Moved to `mcp_resume_asgi.engine.relayed_caller` (issue 21): this path re-exports it until the old
paths are retired."""

from mcp_resume_asgi.engine.relayed_caller import *  # noqa: F403
from mcp_resume_asgi.engine.relayed_caller import (
    MAX_SCOPES,
    MAX_TEXT_CHARS,
    WARN_EVERY_S,
    CallerGuard,
    RelayedCaller,
    RelayedUser,
    describe,
    principal_with_relays,
    seat,
    user_from_json,
    user_to_json,
)

# Names defined elsewhere that were importable from here too.
from mcp_resume_asgi.wire.scope_keys import (
    RELAYED_CALLER as RELAYED_CALLER,
)

__all__ = [
    "MAX_SCOPES",
    "MAX_TEXT_CHARS",
    "WARN_EVERY_S",
    "CallerGuard",
    "RelayedCaller",
    "RelayedUser",
    "describe",
    "principal_with_relays",
    "seat",
    "user_from_json",
    "user_to_json",
]
