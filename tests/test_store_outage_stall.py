"""A Redis that stalls (slow, not refusing), and what a request writes as it ends (issue 20 item 3).

A stall is not an outage: a command the client gave up on (`socket_timeout`) may still run
once Redis wakes. Before, the client sent it again (redis-py retries timeouts unless told
otherwise): a second `add_key` found its own value and reported the key taken, and a second
`append` was refused ("SEQ event seqs must grow: 5 after 5"), which dropped what the app had
sent meanwhile - its result among it - so a REST call through a 6 s stall stayed `running`,
or ended `failed`, and its recorder ran on after its request ("ReferenceError" from
`Recorder._write_behind`). Now a timed-out command is not sent again (the caller is told the
store is unavailable, and holds what it wrote: `held_writes.py`), and `append` is idempotent:
what landed late is not recorded twice (the store contract: `tests/test_store_contract.py`).

Each stall here is of a `redis-server` of the test's own on a free loopback port (never the
shared one), stopped with SIGSTOP and continued with SIGCONT. The last test needs no stall: a
request whose app ends its stream without an answer records an error saying so as it ends;
that write (write-behind on Redis) is held, and the request must not end before it lands.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from starlette.types import Receive, Scope, Send

from mcp_resume_asgi import Policy, resumable
from mcp_resume_asgi.engine.engine import Engine
from mcp_resume_asgi.store import RedisStore
from mcp_resume_asgi.wire import jsonrpc as p
from tests.apps.rest_app import RUNS, create_app
from tests.support.asgi import answer_lifespan
from tests.support.pausing_store import PausingStore
from tests.support.raw import RawSession
from tests.support.redis_server import RedisServer, own_redis
from tests.support.server import serve_in_loop
from tests.support.stores import redis_prefix, redis_url, require_redis
from tests.support.timing import scaled

# Real Redis stalls of seconds: slow (`-m "not slow"` is the unit and in-process tests).
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90), pytest.mark.slow]


@contextlib.contextmanager
def stalled(server: RedisServer) -> Iterator[None]:
    """Redis stops answering (SIGSTOP: connections are accepted, commands wait) until the block ends."""
    assert server.proc is not None
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)


async def test_a_command_redis_ran_late_is_not_sent_again() -> None:
    with own_redis() as server:
        store = RedisStore(server.url + "?socket_timeout=2", prefix="stall:")
        try:
            await store.set_key("warm", "1", 60)  # a connection in the pool
            outcome: list[Any] = []

            async def claim() -> None:
                try:
                    outcome.append(await store.add_key("claim", "mine", 60))
                except Exception as exc:
                    outcome.append(exc)

            async with anyio.create_task_group() as tg:
                # Redis wakes after the client's timeout (2 s), before a second try's would end (4 s).
                with stalled(server):
                    tg.start_soon(claim)
                    await anyio.sleep(3)
            with anyio.fail_after(scaled(10)):
                while await store.get_key("claim") is None:
                    await anyio.sleep(0.05)
            assert await store.get_key("claim") == "mine", "Redis ran it late: a stall, not a loss"
            # Before, the client sent it again once Redis woke, and reported its own claim as another's.
            answer = outcome[0]
            assert isinstance(answer, BaseException) and store.is_unavailable_error(answer), answer
        finally:
            await store.aclose()


async def test_a_rest_call_through_a_6_s_redis_stall_keeps_its_result(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 20 item 3: the tool reports progress through the stall and finishes; the call
    ends `success` with its result, its tool ran once, and nothing was dropped on the way."""
    tag = f"stall-{uuid.uuid4().hex[:8]}"
    url = f"/mcp/tools/slow/calls/{tag}"
    caplog.set_level(logging.WARNING, logger="mcp_resume_asgi")
    with own_redis() as server:
        # Redis wakes between the client's first timeout (4 s) and what used to be its retry's (8 s).
        store = RedisStore(server.url + "?socket_timeout=4", prefix="stall:")
        policy = Policy(task_poll_interval_ms=100, task_ttl_s=120)
        app = resumable(create_app(), policy=policy, store=store, secret="stall-tests-secret", rest=True)
        try:
            async with (
                serve_in_loop(app) as info,
                httpx.AsyncClient(base_url=info.base_url, timeout=30) as client,
            ):
                body = {"steps": 8, "tag": tag, "step_s": 0.5}
                put = await client.put(url, json=body, headers={"idempotency-key": tag})
                assert put.status_code == 201 and put.json()["status"] == "running", put.text
                with stalled(server):
                    await anyio.sleep(6)
                state = await until_settled(client, url)
        finally:
            await store.aclose()
    assert state["status"] == "success", state
    assert state["result"]["content"][0]["text"] == f"done {tag}"
    assert RUNS[tag] == 1
    dropped = [
        r.getMessage()
        for r in caplog.records
        if "SEQ" in r.getMessage()
        or (r.exc_info is not None and r.exc_info[0] in (ValueError, ReferenceError))
        or "could not be written" in r.getMessage()
    ]
    assert dropped == [], dropped


async def until_settled(client: httpx.AsyncClient, url: str) -> dict[str, Any]:
    """GET the call until it is over (a 503 while the store catches up is retried)."""
    with anyio.fail_after(scaled(30)):
        while True:
            got = await client.get(url)
            if got.status_code == 200 and got.json()["status"] in ("success", "failed", "canceled"):
                state: dict[str, Any] = got.json()
                return state
            assert got.status_code in (200, 503), got.text
            await anyio.sleep(0.2)


# ----------------------------------------------------------------------------- a request's end
NO_ANSWER = "the server ended the stream without a response"


async def progress_then_no_answer(scope: Scope, receive: Receive, send: Send) -> None:
    """An app that answers a request with one progress event and ends its stream without a
    response (as an app that failed half way would)."""
    if scope["type"] == "lifespan":
        await answer_lifespan(receive, send)
        return
    request = p.loads_wire((await receive()).get("body", b""))
    assert isinstance(request, dict)
    if request.get("method") == "ping":  # (admission probes)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send(
            {
                "type": "http.response.body",
                "body": p.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {}}),
            }
        )
        return
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
    )
    progress = {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": 1, "progress": 1},
    }
    event = b"event: message\ndata: " + p.dumps(progress) + b"\n\n"
    await send({"type": "http.response.body", "body": event, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def test_what_a_request_records_as_it_ends_is_written_before_it_ends() -> None:
    require_redis()
    real = RedisStore(redis_url(), prefix=redis_prefix("test-stall-end"))
    store = PausingStore(real)
    app = resumable(progress_then_no_answer, store=store, secret="stall-tests-secret")
    engine = engine_of(app)
    held = store.hold_append(matches=lambda payloads: NO_ANSWER in payloads)
    replies: list[Any] = []
    try:
        async with (
            serve_in_loop(app) as info,
            httpx.AsyncClient(base_url=info.base_url, timeout=20) as client,
        ):
            session = RawSession(client)
            body = {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "tools/call",
                "params": {"name": "any", "arguments": {}},
            }
            async with anyio.create_task_group() as tg:

                async def call() -> None:
                    replies.append(await session.exchange("POST", "/mcp", body))

                tg.start_soon(call)
                try:
                    await held.reached()  # the error saying so is on its way to the store
                    assert held.held_key is not None
                    await until_concluded_or_waiting(engine, held.held_key)
                finally:
                    held.release()
    finally:
        await real.clear()
        await real.aclose()
    reply = replies[0]
    assert reply.status == 200
    answers = [m for m in reply.messages() if m.get("id") == 7]
    assert len(answers) == 1 and answers[0]["error"]["message"] == NO_ANSWER, reply.messages()


def engine_of(app: Any) -> Engine:
    layer = app
    while not isinstance(getattr(layer, "engine", None), Engine):
        layer = layer.app
    engine: Engine = layer.engine
    return engine


async def until_concluded_or_waiting(engine: Engine, stream_id: str) -> None:
    """Until the request ended without the write held (the race lost), or waits for it (its
    recorder's `flush`, which made `_written`: nobody waited for it before the fix)."""
    hosted = engine.live.get(stream_id)
    assert hosted is not None
    with anyio.fail_after(scaled(15)):
        while stream_id in engine.live and getattr(hosted.recorder, "_written", None) is None:
            await anyio.sleep(0.02)
