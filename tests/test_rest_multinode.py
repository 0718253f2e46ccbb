"""The REST face (SEP-1597) on two nodes sharing Redis behind a round-robin balancer (issue 14).

Two uvicorn processes (`tests.apps.multinode_rest_app`: the stock `MCPServer` of
`tests/apps/rest_app.py` wrapped with `rest=True` on a `RedisStore` under a per-test prefix)
behind `CutProxy`, which hands each TCP connection to the next process. The client opens one
connection per request, so its requests alternate between the nodes; a test that needs a
request on a given node steers the balancer. Every answer says which process gave it
(``x-node``) and ``GET /__seen__`` on a node what its tools did there.

What must hold: any node serves GET (the ETag of a state is the same on both: a 304 from
the other node); advance and cancel reach the node that runs the call; a PUT retried on the
other node after a cut runs nothing twice; a dead owner turns the call `failed` with a
clear error.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from tests.support.cluster import cluster, pid_of, port_of, prefix, steer
from tests.support.proxy import CutProxy
from tests.support.rest_calls import settled
from tests.support.server import SubprocessServer
from tests.support.stores import require_redis
from tests.support.timing import scaled
from tests.test_rest import Seen, sep_client_loop

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120), pytest.mark.slow]

__all__ = ["prefix"]  # the fixture, used by name

TARGET = "tests.apps.multinode_rest_app:create_app"
POLICY = {"retry_ms": 20, "task_ttl_s": 60, "task_poll_interval_ms": 100}
YES = {"action": "accept", "content": {"confirm": True}}


class Nodes:
    def __init__(self, servers: list[SubprocessServer], proxy: CutProxy) -> None:
        self.servers = servers
        self.proxy = proxy
        self.answered_by: list[tuple[str, str, int]] = []

        async def on_response(response: httpx.Response) -> None:
            node = int(response.headers.get("x-node", 0))
            self.answered_by.append((response.request.method, response.request.url.path, node))

        self.client = httpx.AsyncClient(
            base_url=proxy.base_url,
            timeout=20,
            limits=httpx.Limits(max_keepalive_connections=0),
            event_hooks={"response": [on_response]},
        )

    async def on(self, server: SubprocessServer) -> None:
        """The next request goes to `server`."""
        await steer(self.proxy, port_of(server))

    async def seen(self, server: SubprocessServer) -> dict[str, Any]:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port_of(server)}") as direct:
            seen: dict[str, Any] = (await direct.get("/__seen__")).json()
        assert seen["pid"] == pid_of(server)
        return seen

    async def runs(self, tag: str) -> Counter[int]:
        return Counter({pid_of(s): (await self.seen(s))["runs"].get(tag, 0) for s in self.servers})


@contextlib.asynccontextmanager
async def nodes(
    prefix: str, era: str, options: dict[str, Any] | None = None
) -> AsyncIterator[tuple[SubprocessServer, SubprocessServer, Nodes]]:
    require_redis()
    async with (
        cluster(
            2, prefix, policy=POLICY, options=options, target=TARGET, env={"MCP_RESUME_ERA": era}
        ) as servers,
        CutProxy([port_of(s) for s in servers]) as proxy,
    ):
        both = Nodes(servers, proxy)
        async with both.client:
            yield servers[0], servers[1], both


@pytest.mark.parametrize("era", ["2026-07-28", "2025-11-25"])
async def test_the_sep_client_loop_polls_a_call_through_both_nodes(prefix: str, era: str) -> None:
    tag = f"roaming-{era}"
    async with nodes(prefix, era) as (a, b, cluster):
        seen = Seen()
        with anyio.fail_after(scaled(30)):
            done = await sep_client_loop(
                cluster.client, "slow", "roam-1", {"steps": 12, "tag": tag}, seen=seen
            )
        # Under heavy load the call can be over before its second poll, so that one node alone
        # answered GETs: the finished call is then read once more, through the proxy's next node
        # (round robin), and must read the same there.
        for _ in range(2):
            if {node for method, _, node in cluster.answered_by if method == "GET"} == {pid_of(a), pid_of(b)}:
                break
            again = await cluster.client.get("/mcp/tools/slow/calls/roam-1")
            assert again.status_code == 200 and again.json()["result"] == done["result"], again.text
        runs = await cluster.runs(tag)
    assert done["status"] == "success" and done["result"]["content"][0]["text"] == f"done {tag}"
    progress = [s["progress"]["progress"] for s in seen.states if s["status"] == "running"]
    assert progress and progress == sorted(progress), seen.states
    gets = Counter(node for method, _, node in cluster.answered_by if method == "GET")
    assert set(gets) == {pid_of(a), pid_of(b)}, cluster.answered_by
    assert sum(runs.values()) == 1, f"one run in the cluster: {runs}"


@pytest.mark.parametrize("era", ["2026-07-28", "2025-11-25"])
async def test_a_call_put_on_node_a_is_advanced_through_node_b(prefix: str, era: str) -> None:
    async with nodes(prefix, era) as (a, b, cluster):
        url = "/mcp/tools/confirm/calls/ask-1"
        await cluster.on(a)
        put = await cluster.client.put(url, json={"filename": "a.txt"}, headers={"idempotency-key": "k"})
        assert put.status_code == 201 and int(put.headers["x-node"]) == pid_of(a)
        put = await settled(cluster.client, put, url)
        assert put.json()["status"] == "awaitingElicitationResult", put.text
        await cluster.on(b)
        # The other node computes the same ETag for the same state.
        same = await cluster.client.get(url, headers={"if-none-match": put.headers["etag"]})
        assert same.status_code == 304 and int(same.headers["x-node"]) == pid_of(b)
        await cluster.on(b)
        assert (await cluster.client.post(f"{url}/advance", json=YES)).status_code == 428
        await cluster.on(b)
        stale = await cluster.client.post(f"{url}/advance", json=YES, headers={"if-match": '"0"'})
        assert stale.status_code == 412
        await cluster.on(b)
        advanced = await cluster.client.post(
            f"{url}/advance", json=YES, headers={"if-match": put.headers["etag"]}
        )
        assert advanced.status_code == 200 and int(advanced.headers["x-node"]) == pid_of(b)
        with anyio.fail_after(scaled(10)):
            state = advanced.json()
            while state["status"] == "running":
                await anyio.sleep(0.1)
                state = (await cluster.client.get(url)).json()
        assert state["status"] == "success" and state["result"]["content"][0]["text"] == "deleted a.txt"
        await cluster.on(b)
        other = await cluster.client.put(url, json={"filename": "a.txt"}, headers={"idempotency-key": "k2"})
        assert other.status_code == 409


async def test_a_cancel_on_node_b_stops_the_tool_running_on_node_a(prefix: str) -> None:
    tag = "cancel-across"
    async with nodes(prefix, "2026-07-28") as (a, b, cluster):
        url = "/mcp/tools/slow/calls/cancel-1"
        await cluster.on(a)
        put = await cluster.client.put(url, json={"steps": 200, "tag": tag}, headers={"idempotency-key": "k"})
        assert put.json()["status"] == "running" and int(put.headers["x-node"]) == pid_of(a)
        await cluster.on(b)
        cancel = await cluster.client.post(f"{url}/cancel")
        assert cancel.status_code == 200 and int(cancel.headers["x-node"]) == pid_of(b)
        assert cancel.json()["status"] == "canceled", cancel.text
        with anyio.fail_after(scaled(10)):
            while tag not in (await cluster.seen(a))["cancelled"]:
                await anyio.sleep(0.05)
        again = await cluster.client.post(f"{url}/cancel")
        assert again.json() == cancel.json()
        assert (await cluster.seen(b))["runs"].get(tag, 0) == 0


async def test_a_put_cut_on_node_a_and_retried_through_node_b_runs_once(prefix: str) -> None:
    tag = "cut-across"
    async with nodes(prefix, "2026-07-28") as (a, b, cluster):
        url = "/mcp/tools/slow/calls/cut-1"
        headers = {"idempotency-key": "one-key"}
        body = {"steps": 8, "tag": tag, "step_s": 0.25}
        cut: list[BaseException] = []

        async def put() -> None:
            try:
                await cluster.client.put(url, json=body, headers=headers)
            except httpx.TransportError as exc:
                cut.append(exc)

        await cluster.on(a)
        async with anyio.create_task_group() as tg:
            tg.start_soon(put)
            with anyio.fail_after(scaled(10)):
                while (await cluster.seen(a))["runs"].get(tag, 0) == 0:
                    await anyio.sleep(0.02)
            assert await cluster.proxy.cut_all() >= 1
        assert cut, "the PUT's connection was cut before its answer"
        await cluster.on(b)
        retried = await cluster.client.put(url, json=body, headers=headers)
        assert retried.status_code == 200 and int(retried.headers["x-node"]) == pid_of(b), retried.text
        with anyio.fail_after(scaled(10)):
            while (state := (await cluster.client.get(url)).json())["status"] == "running":
                await anyio.sleep(0.1)
        assert state["status"] == "success"
        runs = await cluster.runs(tag)
    assert runs == Counter({pid_of(a): 1, pid_of(b): 0}), "one run, on the node that took the first PUT"


async def test_a_dead_owner_fails_the_call_with_a_clear_error(prefix: str) -> None:
    async with nodes(prefix, "2026-07-28", {"node_timeout_s": 2}) as (a, b, cluster):
        url = "/mcp/tools/slow/calls/orphan-1"
        await cluster.on(a)
        put = await cluster.client.put(
            url, json={"steps": 200, "tag": "orphan"}, headers={"idempotency-key": "k"}
        )
        assert put.json()["status"] == "running" and int(put.headers["x-node"]) == pid_of(a)
        os.kill(pid_of(a), signal.SIGKILL)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port_of(b)}", timeout=10) as direct:
            with anyio.fail_after(scaled(2 + 5)):
                while (state := (await direct.get(url)).json())["status"] == "running":
                    await anyio.sleep(0.2)
    assert state["status"] == "failed", state
    assert state["error"]["message"] == "the server running this request stopped before it finished"
