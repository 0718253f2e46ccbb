"""The sweep ends what a killed node left running that may not run again, though nobody comes back.

Real uvicorn nodes on the suite's Redis (`tests/support/cluster.py`); the tool's route has no
`rerun_on_loss`. Node A runs the work and is killed (SIGKILL); then nobody follows, polls or GETs
anything until the store shows the work ended - read from Redis directly, not through a node:

* three nodes of `tests.apps.rerun_app`: a 2025 call whose client left after three events, and
  three 2026-07-28 tasks nobody polls. B and C both sweep: each stream is ended exactly once
  (one error event, after what A recorded; one node says it ended it), then a resume of the
  call on C gets the error at once, and each task is `failed` with it on B;
* two nodes of `tests.apps.multinode_rest_app`: a REST call nobody GETs is settled, and its GET
  on B says `failed` with the same error.

The restart of a lone node on `SQLiteStore` is `test_sweep_sqlite.py`.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import anyio
import httpx
import pytest

from mcp_resume_asgi.core.orphans import ORPHAN_TEXT, after_loss
from mcp_resume_asgi.store import RedisStore
from mcp_resume_asgi.store.base import StreamMeta
from tests.support.cluster import cluster, port_of, prefix
from tests.support.modern_rpc import Raw
from tests.support.proxy import CutProxy
from tests.support.raw import RawSession
from tests.support.server import HOST
from tests.support.stores import redis_url, require_redis
from tests.support.timing import scaled
from tests.test_multinode_rerun import TARGET, runs
from tests.test_rest_multinode import nodes

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120), pytest.mark.slow]

__all__ = ["prefix"]  # the fixture, used by name

NODE_TIMEOUT_S = 2.0
ENDED_BY_SWEEP = re.compile(
    r"stream (\S+): its node \S+ is gone before its answer and it is not run again; ended with an "
    r"error \(found by the sweep\)"
)
#: What a node's console log puts around a message and in its wrapped lines (time, level, where).
_LOG_FRAME = re.compile(r"\[\d\d/\d\d/\d\d \d\d:\d\d:\d\d\]|\bWARNING\b|\bINFO\b|\S+\.py:\d+")


def ended_by_sweep(err: str) -> list[str]:
    """The streams the nodes' logs (their stderr) say a sweep ended, one entry per log line."""
    return ENDED_BY_SWEEP.findall(" ".join(_LOG_FRAME.sub(" ", err).split()))


async def calls_in_store(prefix: str) -> list[StreamMeta]:
    """Every `tools/call` stream the store holds under `prefix`, read from Redis (no node asked)."""
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(redis_url())
    store = RedisStore(redis_url(), prefix=prefix)
    try:
        ids = {
            key.decode().rsplit(":", 2)[-2]
            async for key in client.scan_iter(match=f"{prefix}*s:*:m", count=1000)
        }
        found = [await store.get_stream(stream_id) for stream_id in sorted(ids)]
    finally:
        await client.aclose()
        await store.aclose()
    return [meta for meta in found if meta is not None and meta.method == "tools/call"]


async def events_of(prefix: str, stream_id: str) -> list[tuple[int, bytes]]:
    store = RedisStore(redis_url(), prefix=prefix)
    try:
        return await store.read(stream_id, 0)
    finally:
        await store.aclose()


def message_of(frame: bytes) -> Any:
    data = b"".join(line[6:] for line in frame.split(b"\n") if line.startswith(b"data: "))
    return json.loads(data) if data else None


async def wait_ended(prefix: str, count: int) -> list[StreamMeta]:
    """The `count` calls' streams, once the store holds an end for each (nobody asked a node)."""
    with anyio.fail_after(scaled(30)):
        while True:
            calls = await calls_in_store(prefix)
            if len(calls) == count and all(meta.final_seq is not None for meta in calls):
                return calls
            await anyio.sleep(0.1)


async def test_two_sweeping_nodes_end_a_killed_nodes_call_and_tasks_exactly_once(
    prefix: str, capfd: pytest.CaptureFixture[str]
) -> None:
    require_redis()
    policy = {"retry_ms": 20, "task_after_s": 0, "task_ttl_s": 60, "task_poll_interval_ms": 50}
    options = {"node_timeout_s": NODE_TIMEOUT_S}
    tags = [f"orphan-task-{i}" for i in range(3)]
    err = ""
    async with (
        cluster(3, prefix, policy=policy, options=options, target=TARGET, env={"MCP_RESUME_RERUN": "0"}) as (
            a,
            b,
            c,
        ),
        CutProxy([port_of(a)]) as proxy,
        httpx.AsyncClient(base_url=f"http://{HOST}:{port_of(a)}", timeout=scaled(30)) as on_a,
        httpx.AsyncClient(base_url=f"http://{HOST}:{port_of(c)}", timeout=scaled(30)) as on_c,
    ):
        raw = Raw(proxy)
        async with raw.client:
            # A 2025 call whose client leaves after three events, and never comes back on its own.
            caller = RawSession(on_a)
            assert (await caller.initialize()).status == 200
            call = caller.tool_call(
                "counted", {"seconds": 60, "steps": 600, "tag": "orphan-call"}, progress=True
            )
            first = await caller.exchange("POST", "/mcp", call, stop_after=3)
            assert first.status == 200 and first.last_id is not None
            task_ids = []
            for tag in tags:
                arguments = {"seconds": 60, "steps": 600, "tag": tag}
                answer, _ = await raw.rpc(
                    "tools/call", {"name": "counted", "arguments": arguments}, "counted", a
                )
                assert answer["result"]["resultType"] == "task", answer
                task_ids.append(answer["result"]["taskId"])
            with anyio.fail_after(scaled(15)):
                while any([await runs(prefix, tag) < 1 for tag in tags]):
                    await anyio.sleep(0.05)
            assert len(await calls_in_store(prefix)) == 4
            a.kill()
            killed_at = time.monotonic()
            proxy.backend_ports = [port_of(b), port_of(c)]
            calls = await wait_ended(prefix, 4)
            took = time.monotonic() - killed_at
            await anyio.sleep(NODE_TIMEOUT_S)  # (another round of sweeps: none ends anything again)
            err += capfd.readouterr().err

            # Each ended once, by one of the two sweeping nodes, with one error after A's events.
            assert sorted(ended_by_sweep(err)) == sorted(meta.stream_id for meta in calls), err
            call_checked = False
            for meta in calls:
                events = await events_of(prefix, meta.stream_id)
                seqs = [seq for seq, _ in events]
                assert seqs[:-1] == list(range(1, len(events))), seqs
                recorded = seqs[-2] if len(seqs) > 1 else 0  # (what A recorded: maybe nothing)
                assert seqs[-1] == after_loss(recorded), "past every id A can have handed out"
                errors = [m for _, frame in events if "error" in (m := message_of(frame))]
                assert errors == [
                    {
                        "jsonrpc": "2.0",
                        "id": meta.request_id,
                        "error": {"code": -32000, "message": ORPHAN_TEXT},
                    }
                ], errors
                assert meta.final_seq == events[-1][0], "the error is the answer, after what A recorded"
                if meta.protocol_version == "2025-11-25":  # (the call: its client had three events)
                    assert len(events) > 3, events
                    call_checked = True

            assert call_checked

            # Only now does anyone come back: the call's resume gets the error at once ...
            resumer = RawSession(on_c)
            resumer.session_id = caller.session_id
            with anyio.fail_after(scaled(10)):
                resumed = await resumer.exchange(
                    "GET", "/mcp", None, headers=resumer.headers(last_event_id=first.last_id)
                )
            assert resumed.status == 200
            assert resumed.messages()[-1] == {
                "jsonrpc": "2.0",
                "id": call["id"],
                "error": {"code": -32000, "message": ORPHAN_TEXT},
            }, resumed.messages()
            # ... and each task is failed with it.
            for task_id in task_ids:
                task, _ = await raw.get(task_id, b)
                assert task["status"] == "failed", task
                assert task["statusMessage"] == ORPHAN_TEXT, task
        ran = {tag: await runs(prefix, tag) for tag in tags}
    print(
        f"\nsweep: 1 call and {len(tags)} tasks ended {took:.2f}s after the kill (node_timeout_s={NODE_TIMEOUT_S})"
    )
    assert ran == dict.fromkeys(tags, 1), "ended, never run again"


async def test_a_rest_call_nobody_gets_is_settled_by_the_sweep(prefix: str) -> None:
    async with nodes(prefix, "2026-07-28", {"node_timeout_s": NODE_TIMEOUT_S}) as (a, b, both):
        url = "/mcp/tools/slow/calls/unpolled-1"
        await both.on(a)
        put = await both.client.put(
            url, json={"steps": 600, "tag": "unpolled"}, headers={"idempotency-key": "k"}
        )
        assert put.json()["status"] == "running", put.text
        a.kill()
        (meta,) = await wait_ended(prefix, 1)  # (nobody GETs the call meanwhile)
        (_, frame), *_ = (await events_of(prefix, meta.stream_id))[-1:]
        assert message_of(frame)["error"]["message"] == ORPHAN_TEXT
        async with httpx.AsyncClient(base_url=f"http://{HOST}:{port_of(b)}", timeout=10) as direct:
            state = (await direct.get(url)).json()
    assert state["status"] == "failed", state
    assert state["error"]["message"] == ORPHAN_TEXT, state
