"""Small ASGI pieces for the test apps that wrap a real app to force an interleaving."""

from __future__ import annotations

from typing import Any

from starlette.types import Message, Receive, Send

from mcp_resume_asgi.wire import jsonrpc as p


def replaying(first: Message, receive: Receive) -> Receive:
    """`receive` that gives `first` (a message a wrapper read ahead, to look at the request
    body) once more before going on with `receive`."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return first
        return await receive()

    return replay


async def answer_lifespan(receive: Receive, send: Send) -> None:
    """A raw test app's ASGI lifespan: startup and shutdown, each acknowledged at once."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def sse_event(message: dict[str, Any]) -> bytes:
    """One JSON-RPC message as an SSE `message` event (no id: the middleware gives it one)."""
    return b"event: message\ndata: " + p.dumps(message) + b"\n\n"
