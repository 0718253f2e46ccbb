"""A plain (non-task) request whose app goes on while Redis is down: nothing it said is lost.

The client of a 2025-11-25 call drops its connection after a few progress events; Redis is
SIGKILLed; the tool sends the rest of its progress and its result while Redis is down (the
store refuses every write); Redis comes back. What the store refused was held by the stream
(`held_writes.py`) and written by the engine's recovery waiter (`store_recovery.py`), so the
client resuming with `Last-Event-ID` gets exactly the events it missed, in order, and the
result. (It used to get nothing: the answer was dropped and the stream stayed `running`.)

With Redis in memory only, the restart forgets the stream: the client resuming once the tool
returned gets an error saying the store lost it, not a stream that never ends. With a stream
limit smaller than what was said during the outage, the oldest events are dropped as the store
would have dropped them, and the client is told of the gap.

Node processes on a Redis of their own (`own_redis` of tests/support/redis_server.py), the
low-level test app's `slow_progress` tool, raw HTTP (`RawSession`). The last test runs in process
on a memory store made to fail on demand (the write path of a store without write-behind): two
streams held at once, one waiter for both, logged once with the cause and once when written.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest

from mcp_resume_asgi import Policy, ResumeMiddleware
from tests.apps.probe_app import create_app as create_probe_app
from tests.support.cluster import cluster, port_of, prefix
from tests.support.down_store import DownStore
from tests.support.raw import RawSession, Reply
from tests.support.redis_server import RedisServer, own_redis
from tests.support.server import HOST, serve
from tests.support.stores import require_redis
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60), pytest.mark.slow]

__all__ = ["prefix"]  # the fixture, used by name

SECONDS = 2.0
STEPS = 20
SEEN_BEFORE_THE_OUTAGE = 3
"""Progress events the client reads before it drops its connection and Redis is killed."""


@dataclass
class Dropped:
    session: RawSession
    request_id: int
    last_id: str
    progress: list[float]


async def call_then_drop(session: RawSession) -> Dropped:
    """Initialize, call `slow_progress` and drop the connection after a few progress events."""
    await session.initialize()
    body = session.tool_call("slow_progress", {"seconds": SECONDS, "steps": STEPS}, progress=True)
    progress: list[float] = []
    last_id = None
    async with session.open("POST", session.path, body) as (response, reader):
        assert response.status_code == 200 and "text/event-stream" in response.headers["content-type"]
        async for event in reader:
            last_id = event.id or last_id
            message = event.message
            if message is not None and message.get("method") == "notifications/progress":
                progress.append(message["params"]["progress"])
                if len(progress) == SEEN_BEFORE_THE_OUTAGE:
                    break
    assert last_id is not None and progress == [1.0, 2.0, 3.0], (last_id, progress)
    return Dropped(session, body["id"], last_id, progress)


async def resume(dropped: Dropped, within_s: float = 15.0) -> Reply:
    """GET with `Last-Event-ID` until the node serves it again (503 while the store is skipped)."""
    session = dropped.session
    replies: list[int] = []
    with anyio.fail_after(scaled(within_s)):
        while True:
            reply = await session.exchange(
                "GET", session.path, headers=session.headers(last_event_id=dropped.last_id)
            )
            replies.append(reply.status)
            if reply.status != 503:
                assert reply.status == 200, (replies, reply.raw[:300])
                return reply
            await anyio.sleep(0.2)


@contextlib.asynccontextmanager
async def node_and_client(
    prefix: str, redis_server: RedisServer, policy: dict[str, Any] | None = None
) -> AsyncIterator[RawSession]:
    async with (
        cluster(1, prefix, policy={"retry_ms": 50, **(policy or {})}, redis_url=redis_server.url) as (a,),
        httpx.AsyncClient(base_url=f"http://{HOST}:{port_of(a)}", timeout=10) as client,
    ):
        yield RawSession(client)


async def outage_while_the_tool_finishes(redis_server: RedisServer, *, down_s: float) -> None:
    """SIGKILL Redis now; start it again `down_s` later (the tool has `SECONDS` to go)."""
    redis_server.kill()
    await anyio.sleep(down_s)
    await anyio.to_thread.run_sync(redis_server.start)


def progress_and_answer(reply: Reply, request_id: int) -> tuple[list[float], list[dict[str, Any]]]:
    messages = [m for m in reply.messages() if isinstance(m, dict)]
    progress = [m["params"]["progress"] for m in messages if m.get("method") == "notifications/progress"]
    answers = [m for m in messages if m.get("id") == request_id]
    return progress, answers


async def test_what_the_tool_said_while_redis_was_down_reaches_the_resuming_client(prefix: str) -> None:
    require_redis()
    with own_redis(durable=True) as redis_server:
        async with node_and_client(prefix, redis_server) as session:
            dropped = await call_then_drop(session)
            down_at = time.monotonic()
            await outage_while_the_tool_finishes(redis_server, down_s=SECONDS + 0.5)
            reply = await resume(dropped)
    progress, answers = progress_and_answer(reply, dropped.request_id)
    print(f"\nresumed {time.monotonic() - down_at:.1f}s after Redis died: {len(progress)} progress events")
    assert progress == [float(i) for i in range(SEEN_BEFORE_THE_OUTAGE + 1, STEPS + 1)], progress
    [answer] = answers
    assert answer["result"]["content"][0]["text"] == f"done {STEPS}", answer


async def test_redis_restarted_without_persistence_the_resuming_client_is_told_the_store_lost_it(
    prefix: str,
) -> None:
    require_redis()
    with own_redis(durable=False) as redis_server:
        async with node_and_client(prefix, redis_server) as session:
            dropped = await call_then_drop(session)
            await outage_while_the_tool_finishes(redis_server, down_s=0.3)
            await anyio.sleep(SECONDS)  # the tool returns meanwhile, into a store that forgot its stream
            reply = await resume(dropped)
    _progress, answers = progress_and_answer(reply, dropped.request_id)
    [answer] = answers
    assert "store lost this request's stream" in answer["error"]["message"], answer


async def test_more_than_the_stream_keeps_said_during_the_outage_is_a_gap_the_client_is_told_of(
    prefix: str,
) -> None:
    require_redis()
    with own_redis(durable=True) as redis_server:
        async with node_and_client(prefix, redis_server, {"max_events_per_stream": 5}) as session:
            dropped = await call_then_drop(session)
            await outage_while_the_tool_finishes(redis_server, down_s=SECONDS + 0.5)
            reply = await resume(dropped)
    progress, answers = progress_and_answer(reply, dropped.request_id)
    assert progress == [], progress
    [answer] = answers
    assert "were dropped" in answer["error"]["message"], answer


# ----------------------------------------------------------------------------- in process
FailingStore = DownStore  # every operation refused while `down`


async def test_two_streams_held_through_an_outage_one_waiter_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="mcp_resume_asgi")
    store = FailingStore()
    app = ResumeMiddleware(create_probe_app(), policy=Policy(retry_ms=20), store=store)
    recovery = app.engine.recovery
    async with serve(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=10) as client:
        calls: list[Dropped] = []

        async def one_call() -> None:
            session = RawSession(client)
            await session.initialize()
            body = session.tool_call("progress", {"steps": 10, "seconds": 1.0}, progress=True)
            last_id = None
            async with session.open("POST", session.path, body) as (_, reader):
                async for event in reader:
                    last_id = event.id or last_id
                    if event.message is not None and event.message.get("method") == "notifications/progress":
                        break
            assert last_id is not None
            calls.append(Dropped(session, body["id"], last_id, [1.0]))

        async with anyio.create_task_group() as tg:
            tg.start_soon(one_call)
            tg.start_soon(one_call)
        store.down = True
        await anyio.sleep(1.2)  # both tools return into a store that refuses everything
        assert recovery.running and len(recovery.waiting) == 2, recovery.waiting
        store.down = False
        with anyio.fail_after(scaled(5)):
            while recovery.running:
                await anyio.sleep(0.05)
        assert not recovery.waiting
        replies = [await resume(call) for call in calls]
    for call, reply in zip(calls, replies, strict=True):
        progress, answers = progress_and_answer(reply, call.request_id)
        assert progress == [float(i) for i in range(2, 11)], progress
        [answer] = answers
        assert answer["result"]["content"][0]["text"] == "done 10", answer
    records = [r for r in caplog.records if r.name == "mcp_resume_asgi.engine.store_recovery"]
    held = [r for r in records if r.levelno == logging.WARNING]
    assert len(held) == 1 and "ConnectionError: Error 111" in held[0].getMessage(), held
    [back] = [r for r in records if r.levelno == logging.INFO]
    assert "wrote what 2 stream(s) held" in back.getMessage(), back.getMessage()
