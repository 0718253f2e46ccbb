"""A `path=` that misses the MCP endpoint is said once, instead of turning everything off silently.

Issue 11: `path="/wrong"`, or a `Mount("/tools", ...)` inside an app wrapped with the
default path, made every request pass through untouched, with nothing in the log.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount
from starlette.types import Message, Receive, Scope, Send

from mcp_resume_asgi import ResumeMiddleware, resumable
from tests.apps.mcpserver_app import create_server
from tests.support.mcp_client import result_text, stock_session
from tests.support.server import serve

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

DETECTOR = "mcp_resume_asgi.http.misconfig"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}


@pytest.fixture(autouse=True)
def capture_warnings(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=DETECTOR)


def warnings_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == DETECTOR and r.levelno == logging.WARNING]


async def three_sessions(url: str) -> None:
    """Three stock clients: initialize and a tool call each, answered by the app."""
    for i in range(3):
        async with stock_session(url) as session:
            assert result_text(await session.call_tool("echo", {"text": f"hi {i}"})) == f"hi {i}"


@pytest.mark.slow
async def test_a_wrong_path_is_warned_once_and_the_app_still_answers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = resumable(create_server().streamable_http_app(host="127.0.0.1"), path="/wrong")
    async with serve(app) as info:
        await three_sessions(info.mcp_url)
    [warning] = warnings_logged(caplog)
    assert "path '/mcp'" in warning and "configured: '/wrong'" in warning and "path='/mcp'" in warning


@pytest.mark.slow
async def test_a_mount_under_an_app_wrapped_with_the_default_path_is_warned_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = create_server()
    app = Starlette(
        routes=[Mount("/tools", app=server.streamable_http_app(host="127.0.0.1"))],
        middleware=[Middleware(ResumeMiddleware)],
        lifespan=lambda app: server.session_manager.run(),
    )
    async with serve(app) as info:
        await three_sessions(f"{info.base_url}/tools/mcp")
    [warning] = warnings_logged(caplog)
    assert "path '/tools/mcp'" in warning and "configured: '/mcp'" in warning and "root_path" in warning


@pytest.mark.slow
async def test_the_right_path_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    server = create_server()
    mounted = Starlette(
        routes=[Mount("/tools", app=resumable(server.streamable_http_app(host="127.0.0.1")))],
        lifespan=lambda app: server.session_manager.run(),
    )
    async with serve(resumable(create_server().streamable_http_app(host="127.0.0.1"))) as info:
        await three_sessions(info.mcp_url)
    async with serve(mounted) as info:
        await three_sessions(f"{info.base_url}/tools/mcp")  # the mounted app wrapped: root_path applies
    assert warnings_logged(caplog) == []


class Recorder:
    """An ASGI app that records every message it receives, then answers 200."""

    def __init__(self) -> None:
        self.received: list[Message] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            self.received.append(message)
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def post(app: Any, path: str, chunks: list[bytes], content_type: bytes = b"application/json") -> None:
    pending = [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
        for i, chunk in enumerate(chunks)
    ]

    async def receive() -> Message:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        pass

    await app(post_scope(path, content_type), receive, send)


def post_scope(path: str, content_type: bytes) -> Scope:
    return {
        "type": "http",
        "method": "POST",
        "path": path,
        "root_path": "",
        "headers": [(b"content-type", content_type)],
    }


async def test_the_app_gets_every_body_chunk_unchanged_and_peeking_stops_after_the_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    body = json.dumps(INITIALIZE, indent=1).encode()  # `"method": "initialize"`, with a space
    chunks = [body[:7], body[7:30], body[30:31], body[31:]]
    recorder = Recorder()
    app = ResumeMiddleware(recorder, path="/elsewhere")
    await post(app, "/mcp", [b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'])
    await post(app, "/mcp", [b"not json at all"], content_type=b"text/plain")
    assert warnings_logged(caplog) == [], "only an initialize request is MCP traffic for sure"
    async with anyio.create_task_group() as tg:  # concurrent initializes: still one warning
        for _ in range(3):
            tg.start_soon(post, app, "/mcp", chunks)
    assert len(warnings_logged(caplog)) == 1
    initialize_bodies = recorder.received[2:]
    assert [m["body"] for m in initialize_bodies] == chunks * 3
    assert [m["more_body"] for m in initialize_bodies] == [True, True, True, False] * 3
    seen_receive: list[Receive] = []

    async def capture(scope: Scope, receive: Receive, send: Send) -> None:
        seen_receive.append(receive)
        await recorder(scope, receive, send)

    async def receive() -> Message:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Message) -> None:
        pass

    app.app = capture
    await app(post_scope("/mcp", b"application/json"), receive, send)
    assert seen_receive == [receive], "after the warning the app gets `receive` itself: no peeking"
