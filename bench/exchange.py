"""One HTTP exchange with an ASGI app in process: a POST to `/mcp`, its answer collected.

The in-process benchmarks drive the app with plain ASGI calls (no server, no
sockets). The client side of such a call is always the same: the body on the first
`receive`, `http.disconnect` once the answer is complete (what a server tells an app
whose response is done), and the answer's status, headers and body gathered from
`send`. How the call is run - awaited, as a task, left running - is the caller's.
"""

from __future__ import annotations

import asyncio
from typing import Any


def post_scope(headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


class Exchange:
    """The client side of one call: pass `receive` and `send` to the app."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.done = asyncio.Event()
        """Set once the answer is complete."""
        self.status = 0
        self.headers: dict[bytes, bytes] = {}
        self.chunks: list[bytes] = []
        self._sent = False

    @property
    def payload(self) -> bytes:
        return b"".join(self.chunks)

    async def receive(self) -> dict[str, Any]:
        if not self._sent:
            self._sent = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        await self.done.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers.update(message.get("headers", []))
        elif message["type"] == "http.response.body":
            self.chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                self.done.set()
