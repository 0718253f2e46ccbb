"""Moved: body reading is `http/bodies.py`, header readers `wire/headers.py`, replies
`wire/replies.py` (issue 21); re-exported here until the old paths go."""

from __future__ import annotations

from mcp_resume_asgi.http.bodies import (
    BodyTooLarge,
    ClientGone,
    read_body,
    read_body_or_refuse,
    replay_receive,
)
from mcp_resume_asgi.wire.headers import (
    Headers,
    accept_header,
    acceptable,
    accepts_sse,
    header,
    header_count,
    is_json,
    media_ranges,
    media_types,
)
from mcp_resume_asgi.wire.replies import UNAVAILABLE_HEADER, send_bytes, send_json, send_jsonrpc_error

__all__ = [
    "UNAVAILABLE_HEADER",
    "BodyTooLarge",
    "ClientGone",
    "Headers",
    "accept_header",
    "acceptable",
    "accepts_sse",
    "header",
    "header_count",
    "is_json",
    "media_ranges",
    "media_types",
    "read_body",
    "read_body_or_refuse",
    "replay_receive",
    "send_bytes",
    "send_json",
    "send_jsonrpc_error",
]
