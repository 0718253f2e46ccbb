"""Small ASGI pieces for the test apps that wrap a real app to force an interleaving."""

from __future__ import annotations

from starlette.types import Message, Receive


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
