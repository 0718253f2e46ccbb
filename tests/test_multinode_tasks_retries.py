"""A task-creating call retried with its `Idempotency-Key` on the other node (`tasks/retries.py`).

Two uvicorn processes sharing Redis behind a round-robin balancer (the harness of
tests/test_multinode_tasks.py), 2026-07-28 (no sessions: a retry may land on any node):

* the call became a task on node A; its retry through node B gets the same task, from the store;
* the call on node A is not a task yet when its retry reaches node B: the retry is relayed to
  A, takes the original's place, and becomes the same task at the original's deadline.

The tool runs once, on node A.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import anyio
import httpx
import pytest

from mcp_resume_asgi.client.tasks import TASKS_EXTENSION
from tests.support.cluster import pid_of, port_of, prefix, steer
from tests.support.modern_rpc import MODERN
from tests.support.timing import scaled
from tests.test_multinode_tasks import POLICY, nodes

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90), pytest.mark.slow]

__all__ = ["prefix"]  # the fixture, used by name


def call(tag: str, seconds: float) -> dict[str, Any]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}},
    }
    params = {"name": "slow", "arguments": {"seconds": seconds, "tag": tag}, "_meta": meta}
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}


def headers(key: str | None, method: str = "tools/call", name: str = "slow") -> dict[str, str]:
    headers = {
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": MODERN,
        "mcp-method": method,
        "mcp-name": name,
    }
    if key is not None:
        headers["idempotency-key"] = key
    return headers


def answer_of(response: httpx.Response) -> dict[str, Any]:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        datas = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        answers = [json.loads(d) for d in datas if d]
        return next(a for a in answers if a.get("id") == 7)
    answer: dict[str, Any] = response.json()
    return answer


async def started_on(client: httpx.AsyncClient, servers: Any, tag: str) -> dict[int, int]:
    counts = {}
    for server in servers:
        seen = (await client.get(f"http://127.0.0.1:{port_of(server)}/__seen__")).json()
        counts[pid_of(server)] = seen["started"].count(tag)
    return counts


async def test_a_retry_through_node_b_of_a_call_that_became_a_task_on_node_a_gets_that_task(
    prefix: str,
) -> None:
    tag, key = "retried-across", f"k-{uuid.uuid4().hex}"
    async with nodes(prefix) as ((a, b), proxy):
        limits = httpx.Limits(max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=proxy.base_url, timeout=15, limits=limits) as client:
            await steer(proxy, port_of(a))
            first = await client.post("/mcp", json=call(tag, 1.0), headers=headers(key))
            assert int(first.headers["x-node"]) == pid_of(a)
            task = answer_of(first)["result"]
            assert task["resultType"] == "task", task
            await steer(proxy, port_of(b))
            retry = await client.post("/mcp", json=call(tag, 1.0), headers=headers(key))
            assert int(retry.headers["x-node"]) == pid_of(b)
            assert answer_of(retry)["result"] == task
            assert await started_on(client, (a, b), tag) == {pid_of(a): 1, pid_of(b): 0}


async def test_a_retry_through_node_b_before_the_call_on_node_a_became_a_task_becomes_that_task(
    prefix: str,
) -> None:
    tag, key = "early-across", f"k-{uuid.uuid4().hex}"
    # The retry must reach B before the deadline (2 s): ample on a loaded machine too.
    async with nodes(prefix, {**POLICY, "task_after_s": 2.0}) as ((a, b), proxy):
        limits = httpx.Limits(max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=proxy.base_url, timeout=15, limits=limits) as client:
            original: list[httpx.Response] = []

            async def in_flight() -> None:
                # Its client lost it; the server has not noticed (the answer's headers wait for
                # the app or the task deadline).
                async with client.stream("POST", "/mcp", json=call(tag, 4.0), headers=headers(key)) as r:
                    original.append(r)
                    await r.aread()
                await anyio.sleep_forever()

            async with anyio.create_task_group() as tg:
                await steer(proxy, port_of(a))
                started = anyio.current_time()
                tg.start_soon(in_flight)
                with anyio.fail_after(scaled(10)):
                    while (await started_on(client, (a,), tag))[pid_of(a)] == 0:  # it reached A
                        await anyio.sleep(0.02)
                await steer(proxy, port_of(b))
                retry = await client.post("/mcp", json=call(tag, 4.0), headers=headers(key))
                took = anyio.current_time() - started
                tg.cancel_scope.cancel()
            assert int(retry.headers["x-node"]) == pid_of(b)
            task = answer_of(retry)["result"]
            # A task still working (not the tool's result: it still ran), not before the deadline.
            assert task["resultType"] == "task" and task["status"] == "working", task
            assert took > 1.9, f"answered {took:.2f}s after the original arrived (task_after_s=2.0)"
            with anyio.fail_after(scaled(15)):
                while True:
                    await steer(proxy, port_of(b))
                    again = await client.post("/mcp", json=call(tag, 4.0), headers=headers(key))
                    assert answer_of(again)["result"] == task, "one task"
                    get = {
                        "jsonrpc": "2.0",
                        "id": 7,
                        "method": "tasks/get",
                        "params": {"taskId": task["taskId"], "_meta": call(tag, 0)["params"]["_meta"]},
                    }
                    polled = await client.post(
                        "/mcp", json=get, headers=headers(None, "tasks/get", task["taskId"])
                    )
                    status = polled.json()["result"]
                    if status["status"] != "working":
                        break
                    await anyio.sleep(0.1)
            assert (
                status["status"] == "completed" and status["result"]["content"][0]["text"] == f"slept {tag}"
            )
            assert await started_on(client, (a, b), tag) == {pid_of(a): 1, pid_of(b): 0}
