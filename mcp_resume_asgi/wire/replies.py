"""A whole reply in ASGI messages: a status, headers and one body, sent through the caller's `send`.

The middleware and its layers answer many requests themselves (errors, task results,
202s); each such answer is two ASGI messages with the same framing rules, written here
once. Nothing is read and nothing is awaited but the given `send`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from mcp_resume_asgi.wire.asgi import Send
from mcp_resume_asgi.wire.headers import Headers

__all__ = ["UNAVAILABLE_HEADER", "send_bytes", "send_json", "send_jsonrpc_error"]

#: On an answer served while the store is down: it works, but cannot be resumed.
UNAVAILABLE_HEADER = (b"mcp-resume", b"unavailable")


async def send_bytes(
    send: Send,
    status: int,
    body: bytes = b"",
    headers: Iterable[tuple[bytes, bytes]] = (),
    content_type: bytes | None = None,
) -> None:
    raw: Headers = list(headers)
    if content_type is not None:
        raw.append((b"content-type", content_type))
    if status not in (204, 304):
        raw.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body if status not in (204, 304) else b""})


async def send_json(
    send: Send, status: int, payload: Any, headers: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    body = json.dumps(payload, separators=(",", ":")).encode()
    await send_bytes(send, status, body, headers, content_type=b"application/json")


async def send_jsonrpc_error(
    send: Send,
    status: int,
    code: int,
    message: str,
    request_id: Any = None,
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    await send_json(
        send,
        status,
        {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}},
        headers,
    )
