"""A 2025-era server: the stock `mcp` 1.x `FastMCP` (which knows no `server/discover`), wrapped.

Imported only in the mcp 1.x venv of tests/test_mcp1_client.py (the main venv has mcp 2.x,
whose `FastMCP` is gone), by the child servers of tests/test_e2e_client_modern.py and
tests/test_rest_mcp1.py (`create_rest_app`: the REST face, the sessions the app opens counted).

Note: no ``from __future__ import annotations`` here, so that ``FastMCP`` sees the real
annotations of the tool functions.
"""

import json

import anyio
from mcp.server.fastmcp import FastMCP
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_resume_asgi import Policy, resumable


async def echo(text: str) -> str:
    """Return the given text at once."""
    return text


async def slow(seconds: float) -> str:
    """Sleep `seconds`, then say so."""
    await anyio.sleep(seconds)
    return f"slept {seconds}"


def create_app() -> ASGIApp:
    server = FastMCP("mcp1-app", log_level="WARNING", stateless_http=False)
    server.add_tool(echo)
    server.add_tool(slow)
    policy = Policy(retry_ms=20, task_after_s=0.3, task_ttl_s=60, task_poll_interval_ms=50)
    return resumable(server.streamable_http_app(), policy=policy, tasks=True)


class SessionCount:
    """Between the middleware and the app: counts the POSTs that reach the app, by JSON-RPC
    method, and those without an `Mcp-Session-Id` (mcp 1.x opens a session - a transport and a
    server task, kept - for every one of them, even one it then refuses with 400).
    ``GET /__sessions__`` answers the counts (``{"initialize": n, "sessionless": {method: n}}``)."""

    PATH = "/__sessions__"

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.initialize = 0
        self.sessionless: dict[str, int] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = bytearray()

        async def counted() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
                if not message.get("more_body", False):
                    self._count(scope, bytes(body))
            return message

        await self.app(scope, counted, send)

    def _count(self, scope: Scope, body: bytes) -> None:
        try:
            method = str(json.loads(body).get("method"))
        except (ValueError, AttributeError):
            method = "?"
        if method == "initialize":
            self.initialize += 1
        elif not any(k == b"mcp-session-id" for k, _ in scope["headers"]):
            self.sessionless[method] = self.sessionless.get(method, 0) + 1

    async def report(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = json.dumps({"initialize": self.initialize, "sessionless": self.sessionless}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})


def create_rest_app() -> ASGIApp:
    """The same server with the REST face (`rest=True`), a `SessionCount` in front of the app."""
    server = FastMCP("mcp1-app", log_level="WARNING", stateless_http=False)
    server.add_tool(echo)
    server.add_tool(slow)
    counter = SessionCount(server.streamable_http_app())
    wrapped = resumable(counter, policy=Policy(retry_ms=20, task_ttl_s=60), rest=True)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == SessionCount.PATH:
            await counter.report(scope, receive, send)
        else:
            await wrapped(scope, receive, send)

    return app
