"""A raw ASGI MCP app, wrapped, that shows where the app's request runs (tests/test_engine_owned_tasks.py).

The tool app answers `tools/call` with an SSE stream of its own making: `ctx` answers
with the value of a context variable set by an ASGI layer outside `ResumeMiddleware`;
`wait` sends one progress event, then waits until the test releases it (`POST /release`)
and answers "released"; `boom` raises before it answers. The outer layer (`Outer`) sets that context variable from the
`x-tag` header and notes when each POST's ASGI call returned; `GET /probe` reports what
both layers saw, for a server in a child process (granian), whose state the test cannot read.
"""

from __future__ import annotations

import json
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_resume_asgi import Policy, ResumeMiddleware
from mcp_resume_asgi.store.base import Store

TAG: ContextVar[str | None] = ContextVar("detach_app_tag", default=None)


@dataclass
class State:
    """What the two layers saw, by the request's `x-tag`."""

    returned: list[str] = field(default_factory=list)
    """Tags of POSTs whose ASGI call (through the middleware) returned."""
    running: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    running_at_shutdown: list[str] | None = None
    """The tools still running when the app's lifespan heard `lifespan.shutdown`."""
    released: bool = False
    _release: anyio.Event | None = None

    def release(self) -> None:
        self.released = True
        if self._release is not None:
            self._release.set()

    async def wait_released(self) -> None:
        if not self.released:
            if self._release is None:
                self._release = anyio.Event()
            await self._release.wait()

    def report(self) -> dict[str, Any]:
        return {
            "returned": self.returned,
            "running": self.running,
            "finished": self.finished,
            "cancelled": self.cancelled,
        }


def _event(message: dict[str, Any]) -> bytes:
    return b"event: message\ndata: " + json.dumps(message).encode() + b"\n\n"


def _result(request_id: Any, text: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": text}]}}


class ToolApp:
    """The MCP app: two tools, each answered as an SSE stream."""

    def __init__(self, state: State) -> None:
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    self.state.running_at_shutdown = list(self.state.running)
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        request = json.loads(body)
        request_id = request.get("id")
        if request.get("method") != "tools/call":  # (a ping: the middleware asks whether to admit a resume)
            answer = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": {}}).encode()
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": answer})
            return
        name = request["params"]["name"]
        tag = str(request["params"].get("arguments", {}).get("tag", name))
        if name == "boom":
            raise RuntimeError("the tool failed before answering")
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        if name == "ctx":
            await self._end(send, _result(request_id, str(TAG.get())))
            return
        progress = {"jsonrpc": "2.0", "method": "notifications/progress"}
        progress["params"] = {"progressToken": f"p{request_id}", "progress": 1}
        await send({"type": "http.response.body", "body": _event(progress), "more_body": True})
        self.state.running.append(tag)
        try:
            await self.state.wait_released()
        except anyio.get_cancelled_exc_class():
            self.state.cancelled.append(tag)
            raise
        finally:
            self.state.running.remove(tag)
        self.state.finished.append(tag)
        await self._end(send, _result(request_id, "released"))

    @staticmethod
    async def _end(send: Send, message: dict[str, Any]) -> None:
        await send({"type": "http.response.body", "body": _event(message), "more_body": False})


class Outer:
    """An ASGI layer outside the middleware: sets `TAG`, notes returned calls, serves the probe."""

    def __init__(self, app: ASGIApp, state: State) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in ("/probe", "/release"):
            if scope["path"] == "/release":
                self.state.release()
            body = json.dumps(self.state.report()).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        tag = None
        if scope["type"] == "http":
            tag = dict(scope["headers"]).get(b"x-tag", b"").decode() or None
        token = TAG.set(tag)
        try:
            await self.app(scope, receive, send)
        finally:
            TAG.reset(token)
            if tag is not None and scope["method"] == "POST":
                self.state.returned.append(tag)


def create_app(
    *,
    drain_s: float = 30.0,
    policy: dict[str, Any] | None = None,
    store: Store | None = None,
    state: State | None = None,
) -> Outer:
    state = state if state is not None else State()
    middleware = ResumeMiddleware(
        ToolApp(state), policy=Policy(**(policy or {})), store=store, drain_s=drain_s
    )
    return Outer(middleware, state)
