"""The client helper cancels what it gives up: `notifications/cancelled` for an opted-in request.

On 2026-07-28 the transport declares the resumable-streams extension on every request,
which makes a close only detach on the server; so a request given up before its response
(its caller cancelled) gets a notice (`client/cancel_notices.py`). Units on plain data, then
end to end against the stock `MCPServer` (tests/apps/tasks_app.py, whose slow tool records
its cancellation) wrapped with `resumable(...)` under uvicorn, memory and Redis: through
`ResumableSession` at 2026-07-28, cancelled while its POST's answer is still held by the
server and after it opened, and through the stock `mcp` client over `sdk_http_client()`.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import httpx
import pytest
from starlette.types import ASGIApp

from mcp_resume_asgi import MemoryStore, Policy, resumable
from mcp_resume_asgi.client import (
    RESUMABLE_STREAMS_EXTENSION,
    ResumableSession,
    ResumableTransport,
    sdk_http_client,
)
from mcp_resume_asgi.client.cancel_notices import (
    METHOD,
    CancelNotice,
    notice_body,
    notice_headers,
)
from tests.apps.tasks_app import SEEN, create_app
from tests.support.server import serve, serve_in_loop
from tests.support.stores import redis_prefix, redis_url, require_redis
from tests.support.timing import scaled

MODERN = "2026-07-28"
CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
VERSION_META = "io.modelcontextprotocol/protocolVersion"
POLICY = Policy(retry_ms=20, max_wait_s=60)


def request_message(extensions: dict[str, Any] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {VERSION_META: MODERN, "progressToken": "p1"}
    if extensions is not None:
        meta[CAPABILITIES] = {"elicitation": {}, "extensions": extensions}
    return {"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": {"name": "slow", "_meta": meta}}


# ----------------------------------------------------------------------------- units


def test_the_notice_names_the_request_and_carries_its_capabilities() -> None:
    body = notice_body(request_message({RESUMABLE_STREAMS_EXTENSION: {}, "other/ext": {}}), "stop")
    assert body is not None
    assert json.loads(body) == {
        "jsonrpc": "2.0",
        "method": METHOD,
        "params": {
            "requestId": 12,
            "reason": "stop",
            "_meta": {
                CAPABILITIES: {
                    "elicitation": {},
                    "extensions": {RESUMABLE_STREAMS_EXTENSION: {}, "other/ext": {}},
                },
                VERSION_META: MODERN,
            },
        },
    }


@pytest.mark.parametrize("extensions", [None, {}, {"other/ext": {}}])
def test_no_notice_is_owed_for_a_request_whose_close_cancels_it(extensions: dict[str, Any] | None) -> None:
    assert notice_body(request_message(extensions)) is None
    assert notice_body({"jsonrpc": "2.0", "id": 1, "method": "ping"}) is None
    assert notice_body({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"_meta": []}}) is None


def test_the_notice_keeps_the_requests_credentials_and_key_but_not_its_routing() -> None:
    headers = notice_headers(
        [
            (b"authorization", b"Bearer t"),
            (b"idempotency-key", b"k1"),
            (b"mcp-protocol-version", MODERN.encode()),
            (b"mcp-method", b"tools/call"),
            (b"mcp-name", b"slow"),
            (b"content-length", b"99"),
            (b"content-type", b"application/json"),
            (b"accept", b"text/event-stream"),
            (b"last-event-id", b"e1"),
        ]
    )
    assert headers == [
        (b"authorization", b"Bearer t"),
        (b"idempotency-key", b"k1"),
        (b"mcp-protocol-version", MODERN.encode()),
        (b"content-type", b"application/json"),
        (b"accept", b"application/json, text/event-stream"),
        (b"mcp-method", METHOD.encode()),
    ]


def test_only_a_2026_request_declaring_the_extension_owes_one() -> None:
    inner = httpx.AsyncHTTPTransport()
    message = request_message({RESUMABLE_STREAMS_EXTENSION: {}})
    for version, owed in ((MODERN, True), ("2027-01-01", True), ("2025-11-25", False), (None, False)):
        headers = {"mcp-protocol-version": version} if version else {}
        request = httpx.Request("POST", "http://x/mcp", headers=headers)
        assert (CancelNotice.owed_for(inner, request, message) is not None) is owed, version


# ----------------------------------------------------------------------------- end to end


def wrapped_app() -> ASGIApp:
    """Built in the server's own thread and loop (by import string), so a test may run on trio."""
    return resumable(create_app(), policy=POLICY, store=MemoryStore())


@contextlib.asynccontextmanager
async def wrapped(store_kind: str) -> AsyncIterator[str]:
    if store_kind == "memory":
        async with serve(f"{__name__}:wrapped_app") as info:
            yield info.mcp_url
        return
    require_redis()
    from mcp_resume_asgi.store import RedisStore

    redis_store = RedisStore(redis_url(), prefix=redis_prefix("test-client-cancel"))
    app = resumable(create_app(), policy=POLICY, store=redis_store, secret="client-cancel-tests-secret")
    try:
        async with serve_in_loop(app) as info:
            yield info.mcp_url
    finally:
        await redis_store.clear()
        await redis_store.aclose()


async def cancelled_within(tag: str, seconds: float) -> float | None:
    started = time.monotonic()
    with anyio.move_on_after(scaled(seconds)):
        while tag not in SEEN.cancelled:
            await anyio.sleep(0.02)
        return time.monotonic() - started
    return None


async def give_up(
    call_tool: Callable[..., Awaitable[Any]], tool: str, arguments: dict[str, Any], after_s: float
) -> None:
    """Call `tool` and give the call up (cancel it) once it ran `after_s` and the app started it."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(call_tool, tool, arguments)
        await anyio.sleep(after_s)
        with anyio.fail_after(scaled(10)):
            while arguments["tag"] not in SEEN.started:
                await anyio.sleep(0.02)
        tg.cancel_scope.cancel()


@pytest.mark.anyio
@pytest.mark.parametrize("store_kind", ["memory", "redis"])
@pytest.mark.parametrize("gives_up_after", [0.5, 1.6], ids=["answer-held", "answer-open"])
@pytest.mark.slow
async def test_a_resumable_session_cancelling_a_plain_call_stops_the_tool(
    store_kind: str, gives_up_after: float
) -> None:
    """0.5 s: the server still holds the POST's answer (its Idempotency-Key: up to 1 s for the app's
    status); 1.6 s: the answer, an SSE stream, is open. Either way the close alone would only detach."""
    tag = f"session-{store_kind}-{gives_up_after}"
    async with wrapped(store_kind) as url, ResumableSession(url, protocol_version=MODERN) as session:
        assert session.protocol_version == MODERN
        await give_up(session.call_tool, "slow", {"seconds": 30, "tag": tag}, after_s=gives_up_after)
        took = await cancelled_within(tag, 1.0)
        assert took is not None, "the caller's cancel left the tool running"
        # The session goes on: the next call is answered.
        result = await session.call_tool("echo", {"text": "still here"})
        assert result["content"][0]["text"] == "still here"
    assert tag not in SEEN.finished


class Recording(httpx.AsyncBaseTransport):
    """The inner transport, noting the JSON-RPC method of every POST (the helper's own among them)."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.methods: list[str | None] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            self.methods.append(json.loads(await request.aread()).get("method"))
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
@pytest.mark.slow
async def test_a_call_that_ends_sends_no_notice_and_one_given_up_sends_one(anyio_backend: str) -> None:
    recording = Recording()
    tag = f"once-{anyio_backend}"
    async with (
        wrapped("memory") as url,
        httpx.AsyncClient(transport=ResumableTransport(recording)) as client,
        ResumableSession(url, http_client=client, protocol_version=MODERN) as session,
    ):
        result = await session.call_tool("slow", {"seconds": 0.2, "tag": "finishes"})
        assert result["content"][0]["text"] == "slept finishes"
        assert METHOD not in recording.methods
        await give_up(session.call_tool, "slow", {"seconds": 30, "tag": tag}, after_s=1.6)
        assert await cancelled_within(tag, 1.0) is not None
    assert recording.methods.count(METHOD) == 1, recording.methods


@pytest.mark.anyio
@pytest.mark.slow
async def test_the_stock_sdk_client_over_the_helper_cancels_by_notice_too() -> None:
    """The transport under the SDK declares the extension too, so it owes the SDK's cancels."""
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    tag = "sdk-cancel"
    async with (
        wrapped("memory") as url,
        sdk_http_client() as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        await give_up(client.call_tool, "slow", {"seconds": 30, "tag": tag}, after_s=1.6)
        assert await cancelled_within(tag, 1.0) is not None, "the SDK's cancel left the tool running"
