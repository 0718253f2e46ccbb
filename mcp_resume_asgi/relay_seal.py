"""Moved to `mcp_resume_asgi.wire.relay_seal` (issue 21): this path re-exports it until the old
paths are retired."""

from mcp_resume_asgi.wire.relay_seal import *  # noqa: F403
from mcp_resume_asgi.wire.relay_seal import (
    MAX_AGE_S,
    MAX_REMEMBERED,
    SEAL_PURPOSE,
    RelayRequest,
    RelaySeal,
)

__all__ = [
    "MAX_AGE_S",
    "MAX_REMEMBERED",
    "SEAL_PURPOSE",
    "RelayRequest",
    "RelaySeal",
]
