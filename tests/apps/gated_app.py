"""A raw app whose tools/call answers wait for the test: to hold a request mid-answer.

`GatedApp()` answers a tools/call as an SSE stream: one progress event (none when its
arguments say `"quiet": true`, `n` when they say `"steps": n`), then - once the test sets `go` - its result ("ok"). Any other
request gets an empty JSON result at once. Its events say how far it got.
"""

from __future__ import annotations

import anyio
from starlette.types import Receive, Scope, Send

from mcp_resume_asgi.wire import jsonrpc as p
from tests.support.asgi import answer_lifespan, sse_event

__all__ = ["GatedApp"]


class GatedApp:
    """Answers a tools/call with a progress event, waits for `go`, then its result."""

    def __init__(self) -> None:
        self.go = anyio.Event()
        self.progressed = anyio.Event()
        """Its progress event was sent."""
        self.answered = anyio.Event()
        """Its `send` of the result returned: the result is recorded and was delivered."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        request = p.loads_wire((await receive()).get("body", b""))
        assert isinstance(request, dict)
        if request.get("method") != "tools/call":
            answer = p.dumps({"jsonrpc": "2.0", "id": request.get("id"), "result": {}})
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": answer})
            return
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        arguments = request.get("params", {}).get("arguments", {})
        steps = 0 if arguments.get("quiet") else int(arguments.get("steps", 1))
        for step in range(1, steps + 1):
            progress = {
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": 1, "progress": step},
            }
            await send({"type": "http.response.body", "body": sse_event(progress), "more_body": True})
        if steps:
            self.progressed.set()
        await self.go.wait()
        answer = {
            "jsonrpc": "2.0",
            "id": request["id"],
            "result": {"content": [{"type": "text", "text": "ok"}], "isError": False},
        }
        await send({"type": "http.response.body", "body": sse_event(answer), "more_body": True})
        self.answered.set()
        await send({"type": "http.response.body", "body": b"", "more_body": False})
