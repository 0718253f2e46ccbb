"""2026-07-28 requests treated as that revision says, under uvicorn (issue 13).

That revision removed resumable streams: no priming event, no `Last-Event-ID`, and
"closing the SSE response stream MUST be treated by the server as cancellation of
that request". A client that declares `RESUMABLE_STREAMS_EXTENSION` on a request
keeps what 2025-11-25 gives; work that outlives its connection (a task:
`Delivery.survives_close`) keeps today's resume window.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from starlette.types import Receive, Scope, Send

from mcp_resume_asgi import RESUMABLE_STREAMS_EXTENSION, MemoryStore, Policy, Store, resumable
from mcp_resume_asgi.engine.port import Delivery, RequestContext, ServeOptions
from mcp_resume_asgi.features.seam import FeatureMiddleware
from tests.apps.probe_app import PROBE, create_app
from tests.support.counting import Counting
from tests.support.raw import RawSession, Reply
from tests.support.server import serve, serve_in_loop
from tests.support.stores import redis_prefix, redis_url, require_redis
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

VERSION = "2026-07-28"
#: At-will closes and a short idle timeout switched on: a 2026-07-28 stream must get neither.
CLOSING = Policy(retry_ms=20, max_connection_s=0.2, idle_disconnect_s=0.15, max_wait_s=60.0)


@contextlib.asynccontextmanager
async def wrapped(
    policy: Policy, store_kind: str = "memory", *, outer: Any = None
) -> AsyncIterator[tuple[httpx.AsyncClient, Store]]:
    """The probe app behind the middleware (and `outer`, a feature layer class), served by uvicorn."""
    if store_kind == "memory":
        store: Store = MemoryStore()
        app: Any = resumable(create_app(), policy=policy, store=store)
        if outer is not None:
            app = outer(app)
        async with serve(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=10) as client:
            yield client, store
        return
    require_redis()
    from mcp_resume_asgi.store import RedisStore

    redis_store = RedisStore(redis_url(), prefix=redis_prefix("test-2026"))
    app = resumable(create_app(), policy=policy, store=redis_store, secret="tests-2026-shared-secret")
    try:
        async with (
            serve_in_loop(app) as info,
            httpx.AsyncClient(base_url=info.base_url, timeout=10) as client,
        ):
            yield client, redis_store
    finally:
        await redis_store.clear()
        await redis_store.aclose()


def call(
    request_id: int, name: str, arguments: dict[str, Any], *, opt_in: bool = False, progress: bool = False
) -> dict[str, Any]:
    """A 2026-07-28 `tools/call`: no session, the client's capabilities in `_meta`."""
    capabilities: dict[str, Any] = {"extensions": {RESUMABLE_STREAMS_EXTENSION: {}}} if opt_in else {}
    meta: dict[str, Any] = {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    }
    if progress:
        meta["progressToken"] = f"p{request_id}"
    params = {"name": name, "arguments": arguments, "_meta": meta}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def headers_for(s: RawSession, name: str, **extra: str) -> dict[str, str]:
    return s.headers(mcp_method="tools/call", mcp_name=name, **extra)


async def streams_left(store: Store, within: float = 3.0) -> int:
    """How many stream records the store holds once they had `within` seconds to go."""
    with anyio.move_on_after(scaled(within)):
        while (await store.usage()).streams:
            await anyio.sleep(0.05)
    return (await store.usage()).streams


async def cancelled_within(tag: str, seconds: float) -> float | None:
    """Seconds until the probe app saw `tag` cancelled, None if it did not within `seconds` (scaled)."""
    started = time.monotonic()
    with anyio.move_on_after(scaled(seconds)):
        while tag not in PROBE.cancelled:
            await anyio.sleep(0.02)
        return time.monotonic() - started
    return None


@pytest.mark.parametrize("store_kind", ["memory", "redis"])
async def test_a_2026_stream_has_no_priming_no_ids_no_link_no_at_will_close_and_is_not_kept(
    store_kind: str,
) -> None:
    async with wrapped(CLOSING, store_kind) as (client, store):
        s = RawSession(client, version=VERSION)
        body = call(1, "progress", {"steps": 6, "seconds": 1.2}, progress=True)
        reply = await s.exchange("POST", "/mcp", body, headers=headers_for(s, "progress"))
        assert reply.status == 200 and reply.headers["content-type"].startswith("text/event-stream")
        assert reply.closed_by_server
        assert reply.link is None and "link" not in reply.headers
        assert all(e.data for e in reply.events), "a priming event (or a bare retry:) was sent"
        assert [e.id for e in reply.events] == [None] * len(reply.events), "event ids were sent"
        assert all(e.retry is None for e in reply.events)
        messages = reply.messages()
        assert [m["params"]["progress"] for m in messages[:-1]] == [1, 2, 3, 4, 5, 6]
        assert messages[-1]["id"] == 1 and messages[-1]["result"]["content"][0]["text"] == "done 6"
        assert await streams_left(store) == 0, "the record of a finished 2026-07-28 stream was kept"


async def close_after_start(s: RawSession, body: dict[str, Any], tag: str) -> None:
    """POST `body`, read its answer until the app's tool started (and a little more), then close."""

    async def post() -> None:
        async with s.open("POST", "/mcp", body, headers_for(s, "sleep")) as (response, reader):
            assert response.status_code == 200
            async for _ in reader:
                pass

    async with anyio.create_task_group() as tg:
        tg.start_soon(post)
        with anyio.fail_after(scaled(5)):
            while tag not in PROBE.started:
                await anyio.sleep(0.02)
        await anyio.sleep(0.2)  # (the notification reaches the client)
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("store_kind", ["memory", "redis"])
@pytest.mark.parametrize("answer", ["sse-open", "not-yet"])
async def test_closing_a_2026_stream_cancels_the_tool_at_once_and_frees_it(
    store_kind: str, answer: str, caplog: pytest.LogCaptureFixture
) -> None:
    PROBE.clear()
    caplog.set_level(logging.WARNING, logger="mcp_resume_asgi")
    async with wrapped(CLOSING, store_kind) as (client, store):
        s = RawSession(client, version=VERSION)
        tag = f"close-{store_kind}-{answer}"
        # notify: the app opens its SSE answer at once; else it answers JSON when done.
        body = call(2, "sleep", {"seconds": 30, "tag": tag, "notify": answer == "sse-open"}, progress=True)
        await close_after_start(s, body, tag)
        # The client closed its stream: that is its cancellation (max_wait_s is 60 s).
        took = await cancelled_within(tag, 1.0)
        assert took is not None, f"the tool was not cancelled: {PROBE}"
        assert tag not in PROBE.finished
        assert await streams_left(store) == 0, "the stream of a cancelled request was kept"
    noisy = [
        r for r in caplog.records if r.name.startswith("mcp_resume_asgi") and r.levelno >= logging.WARNING
    ]
    assert not noisy, [r.getMessage() for r in noisy]


async def test_a_2026_client_that_opts_in_keeps_resumable_streams() -> None:
    PROBE.clear()
    policy = Policy(retry_ms=20, max_connection_s=0.3, max_wait_s=5.0)
    async with wrapped(policy) as (client, _):
        s = RawSession(client, version=VERSION)
        body = call(3, "progress", {"steps": 10, "seconds": 1.5}, opt_in=True, progress=True)
        first = await s.exchange("POST", "/mcp", body, headers=headers_for(s, "progress"))
        assert first.link is not None
        assert first.events[0].data == "" and first.events[0].id, "no priming event"
        assert first.closed_by_server and first.events[-1].retry == 20, "not closed at will"
        replies: list[Reply] = [first]
        with anyio.fail_after(scaled(10)):
            while not any("result" in m for m in replies[-1].messages()):
                await anyio.sleep(0.02)
                last_id = next(r.last_id for r in reversed(replies) if r.last_id)
                replies.append(await s.exchange("GET", "/mcp", headers=s.headers(last_event_id=last_id)))
        messages = [m for r in replies for m in r.messages()]
        assert [m["params"]["progress"] for m in messages[:-1]] == list(range(1, 11))
        assert messages[-1]["result"]["content"][0]["text"] == "done 10"
        assert len(replies) >= 3

        # A client that opted in and leaves has not cancelled: it may come back.
        tag = "opted-in-leaves"
        body = call(4, "sleep", {"seconds": 1.0, "tag": tag, "notify": True}, opt_in=True, progress=True)
        left = await s.exchange("POST", "/mcp", body, headers=headers_for(s, "sleep"), stop_after=1)
        assert left.events[0].data == "" and left.last_id
        with anyio.fail_after(scaled(5)):
            while tag not in PROBE.finished:
                await anyio.sleep(0.05)
        assert tag not in PROBE.cancelled
        rest = await s.exchange("GET", "/mcp", headers=s.headers(last_event_id=left.last_id))
        assert rest.messages()[-1]["result"]["content"][0]["text"] == f"slept {tag}"


class TaskLike(FeatureMiddleware):
    """A test-only feature layer whose requests' work outlives their connection (as a task's does)."""

    async def intercept(self, ctx: RequestContext, receive: Receive, send: Send) -> bool:
        if ctx.method != "tools/call":
            return False
        await ctx.host(receive, send, ServeOptions(delivery=Delivery(survives_close=True)))
        return True


async def test_a_close_detaches_work_that_survives_it_and_its_resume_window_still_expires() -> None:
    PROBE.clear()
    policy = CLOSING.replace(max_wait_s=3.0)  # well after the check that it is still running
    async with wrapped(policy, outer=TaskLike) as (client, store):
        s = RawSession(client, version=VERSION)
        tag = "survives"
        body = call(5, "sleep", {"seconds": 30, "tag": tag, "notify": True}, progress=True)
        await close_after_start(s, body, tag)
        await anyio.sleep(0.8)
        assert tag not in PROBE.cancelled, "a close cancelled work that survives it"
        assert (await store.usage()).streams == 1
        took = await cancelled_within(tag, 5.0)
        assert took is not None, "nobody came back, yet the resume window did not expire"
        assert await streams_left(store) == 0


async def test_the_stock_client_in_auto_mode_is_neither_primed_nor_cut_and_cancels_by_closing() -> None:
    from mcp.client import Client

    PROBE.clear()
    versions: list[str] = []

    async def seen(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            versions.append(dict(scope["headers"]).get(b"mcp-protocol-version", b"").decode())
        await counting(scope, receive, send)

    counting = Counting(resumable(create_app(), policy=CLOSING))
    async with serve(seen) as info, Client(info.mcp_url) as mcp:
        progress: list[float] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append(value)

        result = await mcp.call_tool("progress", {"steps": 8, "seconds": 1.2}, progress_callback=on_progress)
        assert result.content[0].text == "done 8"  # type: ignore[union-attr]
        assert progress == [1, 2, 3, 4, 5, 6, 7, 8]
        assert VERSION in versions
        assert counting.counts["GET resume"] == 0 and counting.counts["GET link"] == 0

        tag = "stock-cancel"
        async with anyio.create_task_group() as tg:  # the call, abandoned once the tool runs
            tg.start_soon(mcp.call_tool, "sleep", {"seconds": 30, "tag": tag})
            with anyio.fail_after(scaled(10)):
                while tag not in PROBE.started:
                    await anyio.sleep(0.02)
            tg.cancel_scope.cancel()
        took = await cancelled_within(tag, 2.0)
        assert took is not None, "the stock client's abandoned call kept running"
