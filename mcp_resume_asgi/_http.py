"""Small ASGI helpers shared by the layers: reading bounded bodies, writing errors."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from starlette.types import Message, Receive, Scope, Send

from mcp_resume_asgi import protocol as p

Headers = list[tuple[bytes, bytes]]
#: On an answer served while the store is down: it works, but cannot be resumed.
UNAVAILABLE_HEADER = (b"mcp-resume", b"unavailable")


#: RFC 9110 qvalue: 0 to 1 with at most three decimals.
_QVALUE = re.compile(r"0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?")


class BodyTooLarge(Exception):
    pass


class ClientGone(Exception):
    pass


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of a request header (names are lower-case in ASGI)."""
    for key, value in scope["headers"]:
        if key == name:
            try:
                return str(value.decode("latin-1"))
            except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
                return None
    return None


def header_count(scope: Scope, name: bytes) -> int:
    return sum(1 for key, _ in scope["headers"] if key == name)


def media_ranges(value: str | None) -> list[tuple[str, float]]:
    """The media ranges of an `Accept` (or `Content-Type`) value, lower-cased, with their
    weight (RFC 9110 section 12.5.1: `q=0` means "not acceptable"). A weight that is no
    valid qvalue counts as absent (1), as servers that ignore weights would read it."""
    ranges: list[tuple[str, float]] = []
    for part in (value or "").split(","):
        name, *params = part.split(";")
        name = name.strip().lower()
        if not name:
            continue
        weight = 1.0
        for param in params:
            key, _, raw = param.partition("=")
            if key.strip().lower() == "q" and _QVALUE.fullmatch(raw.strip()):
                weight = float(raw.strip())
        ranges.append((name, weight))
    return ranges


def media_types(value: str | None) -> set[str]:
    """The media types (or ranges) a header value names, those weighted `q=0` left out."""
    return {name for name, weight in media_ranges(value) if weight > 0}


def acceptable(accept: str | None, media_type: str) -> bool:
    """Whether an `Accept` value accepts `media_type`: the most specific range naming it
    decides (`text/event-stream;q=0, */*` refuses SSE; `text/*;q=0, text/event-stream`
    accepts it), and a weight of 0 refuses."""
    kind = media_type.split("/", 1)[0] + "/*"
    best: tuple[int, float] | None = None
    for name, weight in media_ranges(accept):
        rank = 3 if name == media_type else 2 if name == kind else 1 if name == "*/*" else 0
        if rank and (best is None or rank > best[0]):
            best = (rank, weight)
    return best is not None and best[1] > 0


def accept_header(scope: Scope) -> str | None:
    """Every `Accept` line of the request, as one list (a list header may be split in lines)."""
    values = [value.decode("latin-1") for key, value in scope["headers"] if key == b"accept"]
    return ", ".join(values) if values else None


def accepts_sse(scope: Scope) -> bool:
    return acceptable(accept_header(scope), "text/event-stream")


def is_json(scope: Scope) -> bool:
    return "application/json" in media_types(header(scope, b"content-type"))


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole request body, refusing more than `limit` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge()
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def read_body_or_refuse(receive: Receive, send: Send, limit: int) -> bytes | None:
    """The request body, or None once a 413 was sent (or the client left)."""
    try:
        return await read_body(receive, limit)
    except BodyTooLarge:
        await send_jsonrpc_error(send, 413, p.INVALID_REQUEST, f"request body exceeds {limit} bytes")
    except ClientGone:
        pass
    return None


def replay_receive(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands the app the body already read, then defers to the real one."""
    sent = False

    async def _receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return _receive


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
