"""Reading a request's body in bounds, and handing it on to the app once read.

The front reads a POST's body before deciding who answers it (the engine, a feature layer,
the app as sent); `replay_receive` gives the app that same body, as if unread.
"""

from __future__ import annotations

from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.asgi import Message, Receive, Send
from mcp_resume_asgi.wire.replies import send_jsonrpc_error

__all__ = ["BodyTooLarge", "ClientGone", "read_body", "read_body_or_refuse", "replay_receive"]


class BodyTooLarge(Exception):
    """The body is longer than the bound it was read with."""


class ClientGone(Exception):
    """The client left before its body was read."""


async def read_body(receive: Receive, limit: int, first: Message | None = None) -> bytes:
    """The whole request body, refusing more than `limit` bytes (`first`: its first message,
    if read already)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        if first is None:
            message = await receive()
        else:
            message, first = first, None
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
    """The request body, or None once a 413 was sent (or the client left). A body in one
    message, as most are, is taken from it here (no coroutine of `read_body`'s)."""
    message = await receive()
    try:
        if message["type"] == "http.request" and not message.get("more_body", False):
            body: bytes = message.get("body", b"")
            if len(body) > limit:
                raise BodyTooLarge()
            return body
        return await read_body(receive, limit, message)
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
