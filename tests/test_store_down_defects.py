"""What a node does while its store is down, where it used to fail (three defects).

1. Redis dies while a request is finishing: what the app sent after it died is held in
   memory (`held_writes.py`), so the first connection is owed events the store cannot give.
   Serving them (`Writer.finish_first` -> `pump` -> `_drain` -> `store.read`) raised out of
   the request's task ("the app's request task failed") and the first connection's answer
   was never ended (uvicorn: "ASGI callable returned without completing response"). Now the
   answer ends cleanly, with `retry:`, and the client resumes once the store is back.

2. While the store is down, a POST with an `Idempotency-Key` went to the app as any other
   (served without resumability): its key was never claimed, so a retry - on another node,
   or once the store is back - ran the call a second time. Now it is a 503 with `Retry-After`
   and a JSON-RPC error (its client retries); a POST without a key is still served.

3. A node served requests before its cluster link (`Node.run`: heartbeat, inbox) was up: the
   lifespan's startup completed at once. Now it completes once the node runs, waiting up to
   `node_timeout_s`, then goes on with a warning (Redis down at startup).

Each test runs a `redis-server` of its own (`own_redis`), killed by the test.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from typing import Any

import anyio
import httpx
import pytest

from mcp_resume_asgi import Policy, resumable
from mcp_resume_asgi.engine.cluster import Node
from mcp_resume_asgi.store import RedisStore
from mcp_resume_asgi.wire import jsonrpc as p
from tests.apps.gated_app import GatedApp
from tests.apps.mcpserver_app import create_app
from tests.support.raw import RawSession
from tests.support.redis_server import own_redis
from tests.support.server import serve, serve_in_loop
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60), pytest.mark.slow]

SECRET = "store-down-defects-secret"


CALL = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "any", "arguments": {}}}


async def test_redis_dying_while_a_request_finishes_ends_its_answer_cleanly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    app = GatedApp()
    with own_redis(durable=True) as server:
        store = RedisStore(server.url, prefix="finish-down:")
        wrapped = resumable(app, policy=Policy(retry_ms=500), store=store, secret=SECRET)
        try:
            async with (
                serve_in_loop(wrapped) as info,
                httpx.AsyncClient(base_url=info.base_url, timeout=scaled(20)) as client,
            ):
                session = RawSession(client)
                events: list[Any] = []
                broken: list[BaseException] = []
                with anyio.fail_after(scaled(20)):
                    async with session.open("POST", "/mcp", CALL) as (response, reader):
                        assert response.status_code == 200
                        try:
                            async for got in reader:
                                events.append(got)
                                if got.data and not app.go.is_set():
                                    server.kill()  # Redis dies; the app's answer is held in memory
                                    app.go.set()
                        except httpx.HTTPError as exc:  # (the answer was never ended)
                            broken.append(exc)
                # Redis is back: what was held is written, and the client resumes from its last event.
                server.start()
                last_id = [e.id for e in events if e.id][-1]
                with anyio.fail_after(scaled(20)):
                    while True:
                        resumed = await session.exchange(
                            "GET", "/mcp", headers=session.headers(last_event_id=last_id)
                        )
                        answers = [m for m in resumed.messages() if m.get("id") == CALL["id"]]
                        if answers:
                            break
                        assert resumed.status in (200, 204, 503), (resumed.status, resumed.raw)
                        await anyio.sleep(0.2)
        finally:
            await store.aclose()
    assert broken == [], (broken, events)
    # The answer ended cleanly: the progress event, then `retry:` (the client resumes later).
    assert [e.message.get("method") for e in events if e.data] == ["notifications/progress"], events
    assert events[-1].retry == 500 and not events[-1].data, events
    failures = [
        r.getMessage()
        for r in caplog.records
        if "request task failed" in r.getMessage() or "ASGI callable" in r.getMessage()
    ]
    assert failures == [], failures
    assert answers[0]["result"]["content"][0]["text"] == "ok", answers


async def test_a_post_with_an_idempotency_key_is_a_503_while_the_store_is_down() -> None:
    with own_redis() as server:
        store = RedisStore(server.url, prefix="key-down:")
        app = resumable(create_app(), policy=Policy(retry_ms=20), store=store, secret=SECRET)
        try:
            async with serve(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=15) as client:
                session = RawSession(client)
                await session.initialize()
                server.kill()
                # The first meets the outage, the next ones skip the store (`STORE_RETRY_S`): both refused.
                for round_ in range(3):
                    call = session.tool_call("echo", {"text": f"once {round_}"})
                    key = {"idempotency_key": f"k-{round_}"}
                    reply = await session.exchange("POST", "/mcp", call, headers=session.headers(**key))
                    assert reply.status == 503, (round_, reply.status, reply.raw)
                    assert reply.headers.get("retry-after") == "1"
                    assert reply.headers.get("mcp-resume") == "unavailable"
                    error = json.loads(reply.raw)["error"]
                    assert error["code"] == p.STREAM_ERROR and "retry" in error["message"], error
                    # Without a key, served as unwrapped (no resumability), as before.
                    plain = await session.exchange("POST", "/mcp", session.tool_call("echo", {"text": "hi"}))
                    assert plain.status == 200, (round_, plain.status, plain.raw)
                    assert plain.messages()[-1]["result"]["content"][0]["text"] == "hi"
        finally:
            await store.aclose()


def node_of(app: Any) -> Node:
    layer = app
    while not isinstance(getattr(layer, "node", None), Node):
        layer = layer.app
    node: Node = layer.node
    return node


async def test_the_startup_waits_for_the_cluster_link(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="mcp_resume_asgi")
    with own_redis() as server:
        assert server.proc is not None
        store = RedisStore(server.url, prefix="node-up:")
        app = resumable(create_app(), store=store, secret=SECRET, node_timeout_s=scaled(30))
        node = node_of(app)
        try:
            async with anyio.create_task_group() as tg:
                # Redis stalls (SIGSTOP) through the start of the server: the link cannot be up.
                os.kill(server.proc.pid, signal.SIGSTOP)
                continued = anyio.Event()

                async def wake() -> None:
                    await anyio.sleep(0.5)
                    assert server.proc is not None
                    os.kill(server.proc.pid, signal.SIGCONT)
                    continued.set()

                tg.start_soon(wake)
                try:
                    async with serve_in_loop(app) as info:
                        assert continued.is_set() and node.running, "served before the cluster link was up"
                        async with httpx.AsyncClient(base_url=info.base_url, timeout=15) as client:
                            init = await RawSession(client).initialize()
                            assert init.status == 200 and init.headers.get("mcp-resume") is None
                finally:
                    os.kill(server.proc.pid, signal.SIGCONT)
        finally:
            await store.aclose()
    assert [r for r in caplog.records if "cluster link is not up" in r.getMessage()] == []


async def test_the_startup_goes_on_without_the_cluster_link_after_node_timeout_s(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="mcp_resume_asgi")
    with own_redis() as server:
        server.kill()  # down from the start
        store = RedisStore(server.url, prefix="node-down:")
        app = resumable(create_app(), store=store, secret=SECRET, node_timeout_s=0.5)
        node = node_of(app)
        try:
            async with (
                serve_in_loop(app) as info,
                httpx.AsyncClient(base_url=info.base_url, timeout=15) as client,
            ):
                assert not node.running
                warned = [
                    r.getMessage() for r in caplog.records if "cluster link is not up" in r.getMessage()
                ]
                assert len(warned) == 1 and node.node_id in warned[0], warned
                # Served without resumability meanwhile, as while the store is down.
                init = await RawSession(client).initialize()
                assert init.status == 200 and init.headers.get("mcp-resume") == "unavailable"
        finally:
            await store.aclose()
