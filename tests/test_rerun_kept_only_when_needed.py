"""A running call's request (its bearer token, its cookie) is written to the store only where a
re-run can happen, with only the headers a re-run needs, and deleted when its loss is found and
it is not run again.

On a real uvicorn in the test's loop with the Redis store, a tool on a `rerun_on_loss` route
whose app holds its answer until the test lets it go: while it runs, the store holds its request
for a stateless 2025-11-25 call (credentials, session, revision, body type; no proxy's or
client's other headers), and nothing for a call of a 2025 session the store does not keep (it
lives in one node's memory: no other node can take it over) nor for a plain 2026-07-28 call (closing it cancels it: nobody can follow it).
Then, on a node that finds a call's owner lost and refuses its stored request, the request is
gone from Redis at once (not left for its TTL).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from starlette.types import Receive, Scope, Send

from mcp_resume_asgi import Policy, resumable
from mcp_resume_asgi.engine import rerun
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import StreamKind, StreamMeta
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.tokens import TokenSigner
from tests.support.server import serve_in_loop
from tests.support.stores import redis_prefix, redis_url, require_redis
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

SECRET = "rerun-kept-tests-shared-secret"
TOKEN = "Bearer s3cr3t-token"
COOKIE = "sid=c00kie"


class HeldApp:
    """A tool whose answer waits for `release` (one progress event first)."""

    def __init__(self) -> None:
        self.release = anyio.Event()
        self.started = anyio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        request = json.loads((await receive())["body"])
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        progress = {
            "jsonrpc": "2.0",
            "method": "notifications/message",
            "params": {"level": "info", "data": 1},
        }
        await send({"type": "http.response.body", "body": _event(progress), "more_body": True})
        self.started.set()
        await self.release.wait()
        answer = {"jsonrpc": "2.0", "id": request["id"], "result": {"content": []}}
        await send({"type": "http.response.body", "body": _event(answer), "more_body": False})


def _event(message: dict[str, Any]) -> bytes:
    return b"event: message\ndata: " + p.dumps(message) + b"\n\n"


@contextlib.asynccontextmanager
async def node() -> AsyncIterator[tuple[str, HeldApp, Any, Any]]:
    """A served node on the suite's Redis: its URL, its app, its store, a raw Redis client."""
    require_redis()
    import redis.asyncio as aioredis

    from mcp_resume_asgi.store import RedisStore

    held = HeldApp()
    store = RedisStore(redis_url(), prefix=redis_prefix("test-rerun-kept"))
    app = resumable(held, policy=Policy(rerun_on_loss=True, retry_ms=20), store=store, secret=SECRET)
    raw = aioredis.Redis.from_url(redis_url())
    try:
        async with serve_in_loop(app) as info:
            yield info.base_url, held, store, raw
    finally:
        held.release.set()
        await raw.aclose()
        await store.clear()
        await store.aclose()


async def stored_requests(raw: Any, store: Any) -> list[tuple[str, bytes]]:
    """The stored requests under the store's prefix, as Redis holds them: (stream, value)."""
    found = [key async for key in raw.scan_iter(match=f"*{store.prefix}*rerun-request:*")]
    return [(key.decode().rsplit("rerun-request:", 1)[1], await raw.get(key)) for key in found]


async def stream_records(raw: Any, store: Any) -> int:
    return len(
        [
            key
            async for key in raw.scan_iter(match=f"*{store.prefix}*")
            if await raw.type(key) == b"hash" and await raw.hexists(key, "owner")
        ]
    )


def call_headers(version: str, session: str | None = None) -> dict[str, str]:
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": version,
        "authorization": TOKEN,
        "cookie": COOKIE,
        "x-forwarded-for": "203.0.113.7",
        "user-agent": "a-client/1.0",
        "mcp-method": "tools/call",
        "mcp-name": "held",
    }
    if session is not None:
        headers["mcp-session-id"] = session
    return headers


async def while_running(version: str, session: str | None = None) -> tuple[list[tuple[str, bytes]], int]:
    """What the store holds while one call of `version` runs: its stored requests, its records."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "held", "arguments": {}}}
    async with node() as (url, held, store, raw), httpx.AsyncClient(base_url=url, timeout=10) as client:
        async with client.stream(
            "POST", "/mcp", json=body, headers=call_headers(version, session)
        ) as response:
            assert response.status_code == 200
            with anyio.fail_after(scaled(10)):
                await held.started.wait()
                while not await stream_records(raw, store):
                    await anyio.sleep(0.02)
            kept, records = await stored_requests(raw, store), await stream_records(raw, store)
            held.release.set()
            await response.aread()
        return kept, records


async def test_a_stateless_2025_call_keeps_only_the_headers_a_rerun_needs() -> None:
    kept, _ = await while_running("2025-11-25")
    assert len(kept) == 1
    stream_id, value = kept[0]
    assert b"203.0.113.7" not in value and b"a-client/1.0" not in value, "no header a re-run does not need"
    opened = rerun.open_sealed(TokenSigner(SECRET), stream_id, value.decode())
    assert isinstance(opened, rerun.StoredRequest)
    assert all(rerun.kept(k) for k, _ in opened.headers)
    assert dict(opened.headers)[b"mcp-protocol-version"] == b"2025-11-25"
    assert dict(opened.headers)[b"authorization"] == TOKEN.encode()
    assert dict(opened.headers)[b"cookie"] == COOKIE.encode()


async def test_a_call_of_a_2025_session_keeps_nothing() -> None:
    kept, records = await while_running("2025-11-25", session="a-session")
    assert records >= 1, "the call's record is there"
    assert kept == [], "its session is not kept: it cannot be run again, its token is not kept"


async def test_a_plain_2026_call_keeps_nothing() -> None:
    kept, records = await while_running("2026-07-28")
    assert records >= 1, "the call's record is there"
    assert kept == [], "nobody can follow it: it cannot be run again, its token is not kept"


async def test_a_lost_calls_request_is_deleted_when_it_is_not_run_again() -> None:
    """A node finds a call's owner lost; its stored request does not open (sealed with another
    secret): the call is not run again, and its request is gone from the store at once."""
    require_redis()
    from mcp_resume_asgi.http.middleware import ResumeMiddleware
    from mcp_resume_asgi.store import RedisStore

    ran: list[Scope] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        ran.append(scope)

    store = RedisStore(redis_url(), prefix=redis_prefix("test-rerun-kept"))
    middleware = ResumeMiddleware(app, policy=Policy(rerun_on_loss=True), store=store, secret=SECRET)
    meta = StreamMeta(
        stream_id="s-lost",
        kind=StreamKind.REQUEST,
        session_id=None,
        principal=None,
        protocol_version="2025-11-25",
        path="/mcp",
        request_id=7,
        method="tools/call",
        owner="a-dead-node",
    )
    stored = rerun.StoredRequest(
        "POST",
        "/mcp",
        b"",
        "http",
        [(b"authorization", TOKEN.encode())],
        b"{}",
        {"principal": None},
        stream=rerun.bound(None, None, 7, "tools/call", -1),
    )
    try:
        await store.create_stream(meta, ttl_s=60)
        assert await rerun.save(store, TokenSigner("another-nodes-secret!"), "s-lost", stored, 60)
        assert await store.get_key(keys.rerun_request("s-lost")) is not None
        assert not await middleware.engine.rerun(meta.copy())
        assert await store.get_key(keys.rerun_request("s-lost")) is None, "deleted when the loss is found"
        assert ran == []
    finally:
        await store.clear()
        await store.aclose()
