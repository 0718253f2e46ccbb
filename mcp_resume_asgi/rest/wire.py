"""Moved to `mcp_resume_asgi.rest.mcp_client` (issue 21: "the REST face's MCP client"; `rest.wire`
beside the `wire/` package misled): this path re-exports it until the old paths are retired."""

from mcp_resume_asgi.rest.mcp_client import (
    CLIENT_CAPABILITIES,
    CLIENT_INFO,
    LEGACY,
    MAX_ANSWER_BYTES,
    MAX_REQUEST_BYTES,
    MODERN,
    SERVER_INFO_META,
    Answer,
    AnswerReader,
    Wire,
    server_info_of,
)
from mcp_resume_asgi.wire.scope_keys import REST_SCOPE_KEY

__all__ = [
    "CLIENT_CAPABILITIES",
    "CLIENT_INFO",
    "LEGACY",
    "MAX_ANSWER_BYTES",
    "MAX_REQUEST_BYTES",
    "MODERN",
    "REST_SCOPE_KEY",
    "SERVER_INFO_META",
    "Answer",
    "AnswerReader",
    "Wire",
    "server_info_of",
]
