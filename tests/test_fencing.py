"""A node that only looked dead stops its orphaned work quietly (fencing).

Node A (a real uvicorn in the test's loop, the Redis store) runs a call of a `rerun_on_loss`
tool; its app records one event, then waits. Meanwhile node B, on the same Redis, takes A for
lost (as its follower or `tasks/get` would once A's heartbeat lapsed: A paused by SIGSTOP past
`node_timeout_s`) and runs the call again: the record is B's now, and B answers. Then A's app
goes on (SIGCONT) and sends its next event. That write finds the record owned by B: A's app is
stopped there, nothing of A's run is written after B took the record (no event beside B's, no
error, no end), A logs one line saying so, and no traceback: the record holds A's first event,
B's marker and B's answer, and is completed by B.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
import httpx
import pytest
from starlette.types import Receive, Scope, Send

from mcp_resume_asgi import Policy
from mcp_resume_asgi.store.base import StreamKind
from mcp_resume_asgi.wire import jsonrpc as p
from tests.support.server import serve_in_loop
from tests.support.stores import redis_prefix, redis_url, require_redis
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

SECRET = "fencing-tests-shared-secret"


def _event(message: dict[str, Any]) -> bytes:
    return b"event: message\ndata: " + p.dumps(message) + b"\n\n"


def _note(node: str, n: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": {"level": "info", "data": [node, n]},
    }


class NodeApp:
    """The tool as one node runs it: its events name the node; `hold` makes it wait after its
    first event until `go` is set."""

    def __init__(self, name: str, *, hold: bool) -> None:
        self.name = name
        self.hold = hold
        self.first_sent = anyio.Event()
        self.go = anyio.Event()
        self.reached_end = False
        self.cancelled = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        request = json.loads((await receive())["body"])
        headers = [(b"content-type", b"text/event-stream")]
        try:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": _event(_note(self.name, 1)), "more_body": True})
            self.first_sent.set()
            if self.hold:
                await self.go.wait()
            for n in (2, 3):
                await anyio.sleep(0.05)  # (the tool's work between its events)
                await send(
                    {"type": "http.response.body", "body": _event(_note(self.name, n)), "more_body": True}
                )
            answer = {"jsonrpc": "2.0", "id": request["id"], "result": {"content": [], "by": self.name}}
            await send({"type": "http.response.body", "body": _event(answer), "more_body": False})
            self.reached_end = True
        except anyio.get_cancelled_exc_class():
            self.cancelled = True
            raise


async def test_a_node_taken_for_lost_stops_its_orphaned_run_quietly(caplog: pytest.LogCaptureFixture) -> None:
    require_redis()
    from mcp_resume_asgi.http.middleware import ResumeMiddleware
    from mcp_resume_asgi.store import RedisStore

    prefix = redis_prefix("test-fencing")
    app_a, app_b = NodeApp("a", hold=True), NodeApp("b", hold=False)
    store_a, store_b = RedisStore(redis_url(), prefix=prefix), RedisStore(redis_url(), prefix=prefix)
    policy = Policy(rerun_on_loss=True, retry_ms=20)
    node_a = ResumeMiddleware(app_a, policy=policy, store=store_a, secret=SECRET)
    node_b = ResumeMiddleware(app_b, policy=policy, store=store_b, secret=SECRET)
    body = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "slow", "arguments": {}}}
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": "2025-11-25",
    }
    caplog.set_level(logging.INFO, logger="mcp_resume_asgi")
    try:
        async with (
            serve_in_loop(node_a) as info,
            httpx.AsyncClient(base_url=info.base_url, timeout=10) as client,
        ):
            async with client.stream("POST", "/mcp", json=body, headers=headers) as response:
                assert response.status_code == 200
                with anyio.fail_after(scaled(10)):
                    await app_a.first_sent.wait()
                    async for line in response.aiter_lines():
                        if line.startswith("id:"):
                            stream_id = line[3:].strip().split(".", 1)[0]
                            break
            # (the client left: a 2025 call goes on without it)
            with anyio.fail_after(scaled(10)):
                while (meta := await store_b.get_stream(stream_id)) is None or meta.last_seq < 1:
                    await anyio.sleep(0.02)
            assert meta.kind is StreamKind.REQUEST and meta.owner == node_a.engine.node_id
            # B takes A for lost (its heartbeat lapsed while it was paused) and runs the call again.
            assert await node_b.engine.rerun(meta.copy())
            with anyio.fail_after(scaled(10)):
                while (meta := await store_b.get_stream(stream_id)) is None or meta.final_seq is None:
                    await anyio.sleep(0.02)
            assert app_b.reached_end and meta.owner == node_b.engine.node_id
            recorded = await store_b.read(stream_id, 0)
            # A goes on (SIGCONT): its next event finds the record B's.
            app_a.go.set()
            with anyio.fail_after(scaled(10)):
                while not app_a.cancelled and not app_a.reached_end:
                    await anyio.sleep(0.02)
            await anyio.sleep(0.2)  # (whatever A would still write, written)
            assert app_a.cancelled and not app_a.reached_end, "A's orphaned run stopped at its next write"
            after = await store_b.get_stream(stream_id)
            assert after is not None and after.owner == node_b.engine.node_id
            assert after.final_seq == meta.final_seq and after.last_seq == meta.last_seq
            assert await store_b.read(stream_id, 0) == recorded, "nothing of A's run written after B took it"
            texts = [data for _, data in recorded]
            assert b'["a",1]' in texts[0] and b'"rerun":1' in texts[1] and b'"by":"b"' in texts[-1]
            assert not any(b'"a",2' in t for t in texts)
        fenced = [r for r in caplog.records if "was taken for lost" in r.getMessage()]
        assert len(fenced) == 1, [r.getMessage() for r in fenced]
        assert (
            node_a.engine.node_id in fenced[0].getMessage()
            and node_b.engine.node_id in fenced[0].getMessage()
        )
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
        assert errors == [], [(r.getMessage(), r.exc_info) for r in errors]
    finally:
        await store_a.clear()
        for store in (store_a, store_b):
            await store.aclose()
