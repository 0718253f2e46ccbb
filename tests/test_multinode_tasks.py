"""Tasks (SEP-2663) on two nodes sharing Redis behind a round-robin balancer without affinity.

Two uvicorn processes (`tests.apps.multinode_tasks_app`: the stock `MCPServer` tasks app,
wrapped with `tasks=True` on a `RedisStore` under a per-test prefix) behind `CutProxy`, which
cuts nothing here and hands each TCP connection to the next process; clients open one
connection per request, and a test that needs a request on a given node steers the balancer
(`steer` of tests/support/cluster.py). Every answer says which process gave it (``x-node``) and
``GET /__seen__`` on a node says what its slow tool did. The protocol is 2026-07-28: no
sessions, so a task's polls and cancel may land on any node.

What must hold (README, Tasks): `tasks/get` answers from any node - a task created on node A
is polled to its result through node B; `tasks/cancel` sent to node B stops the tool running
on node A; the client helper follows a task whose polls alternate between the nodes.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any

import anyio
import httpx
import pytest

from mcp_resume_asgi.client import ResumableTransport, sdk_http_client, sdk_tasks_extension
from mcp_resume_asgi.client.tasks import TASKS_EXTENSION
from tests.support.cluster import cluster_behind_proxy, pid_of, port_of, prefix, steer
from tests.support.modern_rpc import Raw
from tests.support.proxy import CutProxy
from tests.support.server import SubprocessServer
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90), pytest.mark.slow]

__all__ = ["prefix"]  # the fixture, used by name

TARGET = "tests.apps.multinode_tasks_app:create_app"
ELICITING = {"elicitation": {}, "extensions": {TASKS_EXTENSION: {}}}
POLICY = {"retry_ms": 20, "task_after_s": 0, "task_ttl_s": 60, "task_poll_interval_ms": 50}


def nodes(
    prefix: str, policy: dict[str, Any] = POLICY
) -> contextlib.AbstractAsyncContextManager[tuple[list[SubprocessServer], CutProxy]]:
    """Two nodes of the tasks app on Redis, behind the round-robin proxy."""
    return cluster_behind_proxy(2, prefix, target=TARGET, policy=policy)


async def test_a_task_created_on_node_a_is_polled_to_completion_through_node_b(prefix: str) -> None:
    async with nodes(prefix) as ((a, b), proxy):
        raw = Raw(proxy)
        async with raw.client:
            answer, node = await raw.rpc(
                "tools/call", {"name": "slow", "arguments": {"seconds": 1.0, "tag": "on-a"}}, "slow", a
            )
            assert node == pid_of(a) and answer["result"]["resultType"] == "task", answer
            task_id = answer["result"]["taskId"]
            answered_by: Counter[int] = Counter()
            with anyio.fail_after(scaled(15)):
                while True:
                    task, node = await raw.get(task_id, b)
                    answered_by[node] += 1
                    if task["status"] != "working":
                        break
                    await anyio.sleep(task["pollIntervalMs"] / 1000)
            assert answered_by == Counter({pid_of(b): answered_by[pid_of(b)]}) and answered_by[pid_of(b)] >= 3
            assert task["status"] == "completed", task
            assert task["result"]["content"][0]["text"] == "slept on-a" and task["result"]["isError"] is False
            on_a, on_b = await raw.seen(a), await raw.seen(b)
    assert on_a["started"] == ["on-a"] and on_a["finished"] == ["on-a"]
    assert on_b["started"] == [], "the tool ran on node A only"


async def test_tasks_cancel_sent_to_node_b_stops_the_tool_running_on_node_a(prefix: str) -> None:
    async with nodes(prefix) as ((a, b), proxy):
        raw = Raw(proxy)
        async with raw.client:
            answer, node = await raw.rpc(
                "tools/call", {"name": "slow", "arguments": {"seconds": 30, "tag": "cancel-me"}}, "slow", a
            )
            assert node == pid_of(a), answer
            task_id = answer["result"]["taskId"]
            cancel, node = await raw.rpc("tasks/cancel", {"taskId": task_id}, task_id, b)
            assert node == pid_of(b) and cancel["result"] == {"resultType": "complete"}, cancel
            with anyio.fail_after(scaled(10)):
                while "cancel-me" not in (await raw.seen(a))["cancelled"]:
                    await anyio.sleep(0.05)
                while (task := (await raw.get(task_id, b))[0])["status"] == "working":
                    await anyio.sleep(0.05)
            assert task["status"] == "cancelled", task
            on_a = await raw.seen(a)
    assert on_a["finished"] == [] and on_a["cancelled"] == ["cancel-me"]


async def test_the_sdk_client_with_the_helper_follows_a_task_across_alternating_nodes(prefix: str) -> None:
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    nodes_seen: list[tuple[str, int]] = []

    async def on_response(response: Any) -> None:
        method = response.request.headers.get("mcp-method", "")
        nodes_seen.append((method, int(response.headers.get("x-node", 0))))

    async with nodes(prefix, {**POLICY, "task_after_s": 0.3}) as ((a, b), proxy):
        inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))
        http = sdk_http_client(transport=ResumableTransport(inner), event_hooks={"response": [on_response]})
        connector = streamable_http_client(proxy.mcp_url, http_client=http)
        async with http, Client(connector, extensions=[sdk_tasks_extension()]) as client:
            with anyio.fail_after(scaled(20)):
                result = await client.call_tool("slow", {"seconds": 1.5, "tag": "roaming"})
    assert result.content[0].text == "slept roaming"  # type: ignore[union-attr]
    polls = Counter(node for method, node in nodes_seen if method == "tasks/get")
    assert set(polls) == {pid_of(a), pid_of(b)} and min(polls.values()) >= 3, nodes_seen


async def test_a_2025_session_of_the_client_helper_follows_its_task_across_the_nodes(prefix: str) -> None:
    """A session lives on the node that answered its `initialize`; its polls land on both nodes."""
    from mcp_resume_asgi.client import ResumableSession

    nodes_seen: list[tuple[str, int]] = []

    async def on_response(response: httpx.Response) -> None:
        nodes_seen.append(
            (response.request.headers.get("mcp-method", ""), int(response.headers.get("x-node", 0)))
        )

    async with nodes(prefix, {**POLICY, "task_after_s": 0.3}) as ((a, b), proxy):
        inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))
        client = httpx.AsyncClient(
            transport=ResumableTransport(inner), timeout=15, event_hooks={"response": [on_response]}
        )
        async with client, ResumableSession(proxy.mcp_url, http_client=client) as session:
            with anyio.fail_after(scaled(20)):
                result = await session.call_tool("slow", {"seconds": 1.5, "tag": "session-roaming"})
            raw = Raw(proxy)
            async with raw.client:
                on_a, on_b = await raw.seen(a), await raw.seen(b)
    assert result["content"][0]["text"] == "slept session-roaming"
    polls = Counter(node for method, node in nodes_seen if method == "tasks/get")
    assert set(polls) == {pid_of(a), pid_of(b)} and min(polls.values()) >= 3, nodes_seen
    assert sorted(on_a["started"] + on_b["started"]) == ["session-roaming"], (on_a, on_b)


async def test_an_input_round_answered_through_node_b_goes_on_where_its_app_sealed_the_state(
    prefix: str,
) -> None:
    """A 2026-07-28 tool that asks (an `InputRequiredResult`) on node A, answered with `tasks/update`
    through node B: the next round is issued on node A, whose app sealed its `requestState` with
    a key of its own process (the stock server's default), so the nodes need not share one."""
    async with nodes(prefix) as ((a, b), proxy):
        raw = Raw(proxy)
        async with raw.client:
            answer, node = await raw.rpc(
                "tools/call",
                {"name": "confirm", "arguments": {"filename": "multi.txt"}},
                "confirm",
                a,
                capabilities=ELICITING,
            )
            assert node == pid_of(a) and answer["result"]["resultType"] == "task", answer
            task_id = answer["result"]["taskId"]
            with anyio.fail_after(scaled(10)):
                while (task := (await raw.get(task_id, b))[0])["status"] == "working":
                    await anyio.sleep(0.05)
            assert task["status"] == "input_required", task
            (key,) = task["inputRequests"]
            yes = {"action": "accept", "content": {"confirm": True}}
            await steer(proxy, port_of(b))
            updated, node = await raw.rpc(
                "tasks/update", {"taskId": task_id, "inputResponses": {key: yes}}, task_id
            )
            assert "error" not in updated, updated
            with anyio.fail_after(scaled(10)):
                while (task := (await raw.get(task_id, b))[0])["status"] in ("working", "input_required"):
                    await anyio.sleep(0.05)
    assert task["status"] == "completed", task
    assert task["result"]["content"][0]["text"] == "deleted multi.txt"
