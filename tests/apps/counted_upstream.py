"""A stock Python MCP server to run as its own process behind `mcp-resume proxy`: the low-level
app of tests/apps/lowlevel_app.py, unwrapped, with one outer layer that counts the `tools/call`
POSTs reaching it by tool name and answers `GET /__stats__` with those counts (as the
TypeScript server of tests/ts_server does), so a test can tell how often a tool ran."""

from __future__ import annotations

import json
from collections import Counter

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tests.apps.lowlevel_app import create_app as create_lowlevel_app


class CountedCalls:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.runs: Counter[str] = Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] == "/__stats__":
            body = json.dumps(
                {"echo": self.runs["echo"], "slow_progress": self.runs["slow_progress"]}
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        if scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            parsed = json.loads(body)
        except (ValueError, RecursionError):  # (the server's own answer to such a body is its business)
            parsed = None
        if isinstance(parsed, dict) and parsed.get("method") == "tools/call":
            name = (parsed.get("params") or {}).get("name")
            if isinstance(name, str):
                self.runs[name] += 1
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def create_app(*, json_response: bool = False) -> ASGIApp:
    return CountedCalls(create_lowlevel_app(json_response=json_response))
