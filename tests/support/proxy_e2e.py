"""What tests/test_proxy_e2e.py (the stock Python server behind `mcp-resume proxy`) and
tests/test_proxy_e2e_ts.py (the TypeScript SDK's server behind it) share: the upstream process,
the proxy nodes in front of it, and the scenarios each file runs against its upstream.

The two files run in different xdist workers (their processes are module-scoped: each file
starts its own upstream and nodes). For each upstream, two deployments: one proxy node on the
memory store, and two on one Redis prefix (a service of two nodes). Against each:

* chaos: 5 clients x 4 calls of a streaming tool through `CutProxy`, which hands connections to
  the nodes in turn (no stickiness) and cuts each 0.2-1.2 s after it opened; every call must give
  its result with every progress event once and in order (20/20 exact);
* a client in auto mode (2026-07-28 with the Python upstream, which answers `server/discover`
  through the proxy; a 2025-11-25 session with the Tasks extension with the TypeScript SDK 1.x
  server, which speaks 2025 only) whose long call becomes a task and completes through
  `tasks/get`;
* the REST face: the upstream's tools listed, a call made with PUT and read back with GET;
* a `tools/call` POST with an `Idempotency-Key` sent twice (to the other node on Redis): one run;
* `mcp-resume inspect` on the Redis store of the two nodes.

And, with nodes of their own: a node told to stop (SIGTERM) mid-call drains, its client resumes on
the other node.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from mcp_resume_asgi.client import McpError, ResumableSession, ResumableTransport
from tests.support import stores
from tests.support.npm import NpmPeer
from tests.support.processes import NODE_READY, ReadyProcess, mcp_resume
from tests.support.proxy import CutProxy
from tests.support.raw import RawSession
from tests.support.server import SubprocessServer
from tests.support.timing import scaled

TS_DIR = Path(__file__).resolve().parents[1] / "ts_server"
TS_PEER = NpmPeer(TS_DIR, ("@modelcontextprotocol/sdk",), min_node_major=18)
SECRET = "proxy-e2e-secret-0123456789abcdef"
CLIENTS, CALLS, STEPS, SECONDS = 5, 4, 10, 1.0
CUTS = (0.2, 1.2)
PROXY_OPTIONS = [
    "--tasks",
    "--rest",
    "--policy",
    "retry_ms=20",
    "--policy",
    "task_after_s=0.5",
    "--policy",
    "task_poll_interval_ms=50",
    "--node-timeout-s",
    "2",
    "--log-level",
    "warning",
]


@dataclass
class Upstream:
    kind: str
    port: int

    @property
    def mcp_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def runs(self) -> dict[str, int]:
        counts: dict[str, int] = httpx.get(f"http://127.0.0.1:{self.port}/__stats__").json()
        return counts


@dataclass
class Deployment:
    upstream: Upstream
    store: str
    nodes: list[ReadyProcess] = field(default_factory=list)

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    def mcp_url(self, node: int = 0) -> str:
        return f"{self.nodes[node].url}/mcp"


@contextlib.contextmanager
def upstream_process(kind: str) -> Iterator[Upstream]:
    """The upstream of `kind` ("ts": the TypeScript SDK server; "python": the stock `mcp`
    low-level server, counting its tool calls), running as its own process."""
    if kind == "ts":
        node, _ = TS_PEER.prepare()
        process = ReadyProcess(
            [node, str(TS_DIR / "server.mjs"), "--port", "0"], ready=NODE_READY, cwd=TS_DIR
        )
        process.start()
        try:
            yield Upstream("ts", process.port)
        finally:
            process.stop()
    else:
        server = SubprocessServer("tests.apps.counted_upstream:create_app")
        info = server.start()
        try:
            yield Upstream("python", info.port)
        finally:
            server.stop()
            server.kill()


@contextlib.contextmanager
def proxy_nodes(upstream: Upstream, store: str) -> Iterator[Deployment]:
    """`mcp-resume proxy` in front of `upstream`: one node on the memory store ("memory"), or
    two on one Redis prefix ("redis"), deleted afterwards."""
    deployment = Deployment(upstream, store)
    prefix = ""
    if store == "memory":
        deployment.nodes = [
            mcp_resume("proxy", "--upstream", upstream.mcp_url, "--port", "0", *PROXY_OPTIONS)
        ]
    else:
        stores.require_redis()
        prefix = stores.redis_prefix("test-proxy-e2e")
        redis = ["--store", stores.redis_url(), "--prefix", prefix, "--secret", SECRET]
        deployment.nodes = [
            mcp_resume("proxy", "--upstream", upstream.mcp_url, "--port", "0", *redis, *PROXY_OPTIONS)
            for _ in range(2)
        ]
    try:
        for node in deployment.nodes:
            node.start()
        yield deployment
    finally:
        for node in deployment.nodes:
            node.stop()
        if prefix:
            stores.delete_prefix_sync(stores.redis_url(), prefix)


def _text(result: dict[str, Any]) -> str:
    return "".join(block.get("text", "") for block in result.get("content", []))


@dataclass
class Outcome:
    progress: list[float] = field(default_factory=list)
    result: str | None = None
    error: str | None = None


async def _client(url: str, outcomes: list[Outcome]) -> None:
    """One client of the client helper: a session, `CALLS` streaming calls one after the other."""
    mine = [Outcome() for _ in range(CALLS)]
    outcomes.extend(mine)
    inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))
    http = httpx.AsyncClient(
        transport=ResumableTransport(inner, max_attempts=20), timeout=httpx.Timeout(30, read=300)
    )
    try:
        async with http, ResumableSession(url, http_client=http, tasks=False) as session:
            for outcome in mine:

                async def on_progress(
                    p: float, total: float | None, message: str | None, into: Outcome = outcome
                ) -> None:
                    into.progress.append(p)

                try:
                    answer = await session.call_tool(
                        "slow_progress", {"seconds": SECONDS, "steps": STEPS}, on_progress=on_progress
                    )
                    outcome.result = _text(answer)
                except McpError as exc:
                    outcome.error = f"McpError {exc.code}: {exc.message}"
    except Exception as exc:
        for outcome in mine:
            if outcome.result is None and outcome.error is None:
                outcome.error = f"{type(exc).__name__}: {exc}"


async def check_chaos_twenty_calls_exact_through_cut_connections(deployment: Deployment) -> None:
    seed = int(os.environ.get("MCP_RESUME_CHAOS_SEED") or random.SystemRandom().randrange(1 << 30))
    outcomes: list[Outcome] = []
    async with CutProxy(deployment.ports, cut_after_delay=CUTS, seed=seed) as proxy:
        with anyio.fail_after(scaled(90)):
            async with anyio.create_task_group() as tg:
                for _ in range(CLIENTS):
                    tg.start_soon(_client, proxy.mcp_url, outcomes)
    expected = [float(i) for i in range(1, STEPS + 1)]
    exact = [o for o in outcomes if o.result == f"done {STEPS}" and o.progress == expected]
    summary = (
        f"{deployment.upstream.kind} on {deployment.store} x{len(deployment.nodes)}, seed={seed}: "
        f"{len(exact)}/{len(outcomes)} exact, cuts={proxy.stats.cuts}, "
        f"connections={proxy.stats.connections}; not exact: {[o for o in outcomes if o not in exact][:4]}"
    )
    print(summary)
    assert len(outcomes) == CLIENTS * CALLS and len(exact) == CLIENTS * CALLS, summary
    assert proxy.stats.cuts >= CLIENTS * CALLS // 2, summary  # (a cut every other call, at least)


async def check_a_long_call_of_an_auto_mode_client_becomes_a_task_and_completes_through_tasks_get(
    deployment: Deployment,
) -> None:
    methods: list[str] = []

    async def note(request: httpx.Request) -> None:
        if request.method == "POST":
            with contextlib.suppress(ValueError, AttributeError):
                methods.append(json.loads(request.content).get("method", ""))

    async with (
        httpx.AsyncClient(timeout=30, event_hooks={"request": [note]}) as http,
        ResumableSession(deployment.mcp_url(), http_client=http, protocol_version="auto") as session,
    ):
        with anyio.fail_after(scaled(30)):
            result = await session.call_tool("slow_progress", {"seconds": 1.2, "steps": 4})
        version = session.protocol_version
    assert _text(result) == "done 4"
    assert "tasks/get" in methods, (version, methods)
    # The stock Python server (mcp 2.x) speaks 2026-07-28 through the proxy; the TypeScript SDK's
    # 1.x server answers no `server/discover`, so the client opens a 2025-11-25 session with the
    # Tasks extension declared: either way the call became a task.
    assert version == ("2026-07-28" if deployment.upstream.kind == "python" else "2025-11-25"), version


async def check_the_rest_face_serves_the_upstreams_tools(deployment: Deployment) -> None:
    call_id = f"rest-{deployment.upstream.kind}-{deployment.store}"
    async with httpx.AsyncClient(base_url=deployment.nodes[0].url, timeout=30) as http:
        listed = await http.get("/mcp/tools")
        assert listed.status_code == 200, listed.text
        assert {"echo", "slow_progress"} <= {tool["name"] for tool in listed.json()["tools"]}, listed.text
        put = await http.put(
            f"/mcp/tools/echo/calls/{call_id}",
            json={"text": "over rest"},
            headers={"idempotency-key": call_id},
        )
        assert put.status_code == 201, put.text
        assert put.json()["status"] == "success" and _text(put.json()["result"]) == "over rest"
    async with httpx.AsyncClient(base_url=deployment.nodes[-1].url, timeout=30) as http:
        got = await http.get(f"/mcp/tools/echo/calls/{call_id}")
        assert got.status_code == 200 and got.json()["etag"] == put.json()["etag"], got.text


async def check_a_retried_post_with_an_idempotency_key_runs_the_tool_once(deployment: Deployment) -> None:
    text = f"once-{deployment.upstream.kind}-{deployment.store}"
    before = await anyio.to_thread.run_sync(deployment.upstream.runs)
    async with (
        httpx.AsyncClient(base_url=deployment.nodes[0].url, timeout=30) as first,
        httpx.AsyncClient(base_url=deployment.nodes[-1].url, timeout=30) as second,
    ):
        session = RawSession(first)
        await session.initialize()
        call = session.tool_call("echo", {"text": text})
        answers = []
        for client in (first, second):
            session.client = client
            reply = await session.exchange(
                "POST", "/mcp", call, headers=session.headers(idempotency_key=text)
            )
            assert reply.status == 200, reply.raw
            answers.append([m for m in reply.messages() if "result" in m or "error" in m])
    after = await anyio.to_thread.run_sync(deployment.upstream.runs)
    assert answers[0] == answers[1] and _text(answers[0][0]["result"]) == text, answers
    assert after["echo"] - before["echo"] == 1, (before, after)


async def check_a_node_told_to_stop_drains_and_its_call_completes_through_the_other(
    upstream: Upstream,
) -> None:
    """Two proxy nodes on Redis behind a balancer; SIGTERM the node serving a call mid-call: its
    drain closes the client's connection with `retry:` while the call goes on through its proxy
    to the upstream, the client resumes on the other node from the store, every progress event
    once and in order, and the stopped node exits cleanly once the call is done."""
    stores.require_redis()
    prefix = stores.redis_prefix("test-proxy-drain")
    store = ["--store", stores.redis_url(), "--prefix", prefix, "--secret", SECRET, "--drain-s", "10"]
    nodes = [
        mcp_resume("proxy", "--upstream", upstream.mcp_url, "--port", "0", *store, *PROXY_OPTIONS)
        for _ in range(2)
    ]
    progress: list[float] = []
    result: dict[str, Any] = {}
    try:
        for node in nodes:
            await anyio.to_thread.run_sync(node.start)
        by_port = {node.port: node for node in nodes}
        async with CutProxy([node.port for node in nodes]) as balancer:
            stopped: list[ReadyProcess] = []
            signalled_at = 0

            async def on_progress(p: float, total: float | None, message: str | None) -> None:
                nonlocal signalled_at
                progress.append(p)
                if len(progress) == 2:
                    stopped.append(by_port[balancer.records[-1].backend_port])  # the call's connection
                    signalled_at = len(balancer.records)
                    stopped[0].signal(signal.SIGTERM)

            inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))
            async with (
                httpx.AsyncClient(transport=ResumableTransport(inner, max_attempts=20), timeout=30) as http,
                ResumableSession(balancer.mcp_url, http_client=http, tasks=False) as session,
            ):
                with anyio.fail_after(scaled(30)):
                    result = await session.call_tool(
                        "slow_progress", {"seconds": 1.5, "steps": 6}, on_progress=on_progress
                    )
                resumed = [r.backend_port for r in balancer.records[signalled_at:] if not r.cut]
            # The call's connection was closed by the drain: it went on through the other node.
            assert resumed and stopped[0].port not in resumed[-1:], (resumed, stopped[0].port)
            # (uvicorn re-raises the signal it handled once shut down: the status says SIGTERM)
            assert stopped and await anyio.to_thread.run_sync(stopped[0].wait, 20) in (0, -signal.SIGTERM)
    finally:
        for node in nodes:
            await anyio.to_thread.run_sync(node.stop)
        stores.delete_prefix_sync(stores.redis_url(), prefix)
    assert _text(result) == "done 6" and progress == [float(i) for i in range(1, 7)], (result, progress)


async def check_inspect_shows_the_nodes_sessions_and_calls_without_principals(deployment: Deployment) -> None:
    if deployment.store != "redis":
        pytest.skip("a memory store lives inside its process: nothing to inspect from outside")
    node = deployment.nodes[0]
    store = node.cmd[node.cmd.index("--store") + 1]
    prefix = node.cmd[node.cmd.index("--prefix") + 1]
    command = [sys.executable, "-m", "mcp_resume_asgi.cli", "inspect", "--store", store, "--prefix", prefix]
    auth = {"authorization": "Bearer inspected"}
    async with (
        httpx.AsyncClient(timeout=30, headers=auth) as http,
        ResumableSession(deployment.mcp_url(), http_client=http) as session,
    ):
        await session.call_tool("echo", {"text": "seen"})
        put = await http.put(
            f"{node.url}/mcp/tools/echo/calls/inspected",
            json={"text": "x"},
            headers={"idempotency-key": "i-1"},
        )
        assert put.status_code in (200, 201), put.text
        done = await anyio.run_process([*command, "--json"], env=node.env, check=False)
        table = await anyio.run_process(command, env=node.env, check=False)
        asked = await anyio.run_process(
            [*command, "--json", "--show-principals", "--limit", "1000"], env=node.env, check=False
        )
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)
    assert view["counts"]["nodes"] == 2 and all(n["alive"] for n in view["newest"]["nodes"]), view
    assert view["counts"]["sessions"] >= 1 and view["counts"]["streams"] >= 1, view
    assert view["counts"]["rest_calls"] >= 1, view
    assert "principal" not in done.stdout.decode() and "proxy:" not in done.stdout.decode()
    assert table.returncode == 0 and b"nodes: 2" in table.stdout, table.stdout
    # Asked, the streams name who started them: this caller by its credentials' digest.
    streams = json.loads(asked.stdout)["newest"]["streams"]
    assert any(str(s.get("principal", "")).startswith("proxy:") for s in streams), streams
