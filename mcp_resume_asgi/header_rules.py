"""Moved to `mcp_resume_asgi.wire.header_rules` (issue 21): this path re-exports it until the old
paths are retired."""

from mcp_resume_asgi.wire.header_rules import *  # noqa: F403
from mcp_resume_asgi.wire.header_rules import (
    HANDSHAKE_VERSIONS,
    HEADER_MISMATCH,
    SINGLE_EXCHANGE_VERSIONS,
    UNSUPPORTED_PROTOCOL_VERSION,
    Era,
    HeaderRefusal,
    era_of,
    refusal,
)

__all__ = [
    "HANDSHAKE_VERSIONS",
    "HEADER_MISMATCH",
    "SINGLE_EXCHANGE_VERSIONS",
    "UNSUPPORTED_PROTOCOL_VERSION",
    "Era",
    "HeaderRefusal",
    "era_of",
    "refusal",
]
