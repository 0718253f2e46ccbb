"""Clients that follow one stream of a lost node learn its end, however they come and go.

Two uvicorn nodes A and B (`tests.apps.multinode_app` on Redis, `node_timeout_s` 2 s). A call
runs on A; two clients follow its stream on B by resuming with `Last-Event-ID`, each taking
the stream over from the other (a resume replaces the connection attached before it, which is
closed with `retry:` and comes back at once). Then A is killed (SIGKILL).

Each connection on B lives far less than the owner check's interval, so a check timed per
connection is never made: the clients would replace each other for ever, the call neither
ended nor run again. The check is timed per stream on B, whoever is attached: one of the two
clients gets the stream's end - -32000, "the server running this request stopped"; or, where
the tool may run again (`tests.apps.rerun_app`, `rerun_on_loss`), the re-run's result.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import anyio
import httpx
import pytest

from tests.support.cluster import cluster, port_of, prefix
from tests.support.raw import RawSession
from tests.support.server import HOST
from tests.support.stores import require_redis
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90), pytest.mark.slow]

__all__ = ["prefix"]  # the fixture, used by name

NODE_TIMEOUT_S = 2.0
RERUN_APP = "tests.apps.rerun_app:create_app"


@pytest.mark.parametrize("rerun", [False, True], ids=["run-once", "rerun"])
async def test_two_clients_replacing_each_other_on_a_lost_nodes_stream_get_its_end(
    prefix: str, rerun: bool
) -> None:
    require_redis()
    options = {"node_timeout_s": NODE_TIMEOUT_S}
    app = {"target": RERUN_APP, "env": {"MCP_RESUME_RERUN": "1"}} if rerun else {}
    ended = anyio.Event()
    replacing = anyio.Event()
    """Set once both clients attached three times each: they replace each other."""
    attached: Counter[str] = Counter()
    endings: list[tuple[str, Any]] = []

    async with (
        cluster(2, prefix, policy={"retry_ms": 20}, options=options, **app) as (a, b),
        httpx.AsyncClient(base_url=f"http://{HOST}:{port_of(a)}", timeout=scaled(30)) as on_a,
        httpx.AsyncClient(base_url=f"http://{HOST}:{port_of(b)}", timeout=scaled(30)) as on_b,
    ):
        caller = RawSession(on_a)
        assert (await caller.initialize()).status == 200
        if rerun:
            call = caller.tool_call("counted", {"seconds": 3, "steps": 30, "tag": "followed"}, progress=True)
        else:
            call = caller.tool_call("slow_progress", {"seconds": 60, "steps": 600}, progress=True)
        first = await caller.exchange("POST", "/mcp", call, stop_after=3)
        assert first.status == 200 and first.last_id is not None

        async def follow(name: str) -> None:
            """Resume the stream on B until it ends, coming back whenever it is closed."""
            session = RawSession(on_b)
            session.session_id = caller.session_id
            last_id = first.last_id
            while not ended.is_set():
                headers = session.headers(last_event_id=last_id or "")
                retry_ms = 20
                async with session.open("GET", "/mcp", headers=headers) as (response, reader):
                    if response.status_code != 200:
                        endings.append((name, response.status_code))
                        ended.set()
                        return
                    attached[name] += 1
                    if min(attached["one"], attached["two"]) >= 3:
                        replacing.set()
                    async for event in reader:
                        last_id = event.id or last_id
                        retry_ms = event.retry or retry_ms
                        message = json.loads(event.data) if event.data else None
                        if isinstance(message, dict) and message.get("id") == call["id"]:
                            endings.append((name, message))
                            ended.set()
                            return
                await anyio.sleep(retry_ms / 1000)

        async with anyio.create_task_group() as tg:
            tg.start_soon(follow, "one")
            tg.start_soon(follow, "two")
            with anyio.fail_after(scaled(20)):
                await replacing.wait()
            a.kill()
            killed_at = time.monotonic()
            # About `node_timeout_s` to find the owner dead (and the re-run's 3 s), generously.
            with anyio.move_on_after(NODE_TIMEOUT_S + scaled(10) + (3 if rerun else 0)):
                await ended.wait()
            took = time.monotonic() - killed_at
            tg.cancel_scope.cancel()

    print(f"\nconnections on B: {dict(attached)}; ended {took:.2f} s after the kill: {endings}")
    assert ended.is_set(), f"the followers never learned the stream's end ({dict(attached)} connections)"
    (_, message), *_ = endings
    assert isinstance(message, dict), endings
    if rerun:
        assert message["result"]["content"][0]["text"] == "counted followed", message
    else:
        assert message["error"]["code"] == -32000
        assert "stopped" in message["error"]["message"]
