"""Moved to `mcp_resume_asgi.wire.headers` (issue 21): this path re-exports it until the old
paths are retired."""

from mcp_resume_asgi.wire.headers import *  # noqa: F403
from mcp_resume_asgi.wire.headers import (
    SENTINEL_HEAD,
    SENTINEL_TAIL,
    X_MCP_HEADER,
    decode_header_value,
    encode_header_value,
    param_headers,
)

__all__ = [
    "SENTINEL_HEAD",
    "SENTINEL_TAIL",
    "X_MCP_HEADER",
    "decode_header_value",
    "encode_header_value",
    "param_headers",
]
