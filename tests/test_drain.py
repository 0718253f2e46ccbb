"""Rolling deploys lose nothing (issue 22, part 1): the drain on a real server's SIGTERM.

Two uvicorn nodes on Redis behind the round-robin proxy (`tests.support.cluster`'s
harness): every call is started on node A, A gets SIGTERM one second in, and the
balancer drops A (as its readiness check would). A closes every attached connection
after `retry:`; each client resumes on B, which serves the stream from Redis while
A's app goes on recording; A exits once its calls are over, within `drain_s`.
Single nodes of uvicorn, hypercorn and granian with the memory store get the same signal:
no other node can serve a resume, so their connections stay attached, each call is answered
on its own, and the process exits.

Nothing here is timed to pass only on a quiet machine: every wait is bounded by
`scaled(...)` far above what a loaded machine needs, and what is asserted is what
the clients got (every event once, in order) and how the node ended.
"""

from __future__ import annotations

import signal
import subprocess
import time
from typing import Any

import anyio
import httpx
import pytest
from mcp.shared.exceptions import MCPError

from mcp_resume_asgi.client import McpError
from mcp_resume_asgi.engine.services import SHUT_DOWN
from tests.support.cluster import cluster, cluster_behind_proxy, pid_of, port_of, prefix
from tests.support.exchanges import Recorder, owner_of, recorded_session
from tests.support.mcp_client import result_text, text
from tests.support.proxy import CutProxy
from tests.support.server import SubprocessServer
from tests.support.stores import require_redis
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120), pytest.mark.slow]

__all__ = ["prefix"]  # the fixture, used by name

CALLS = 20
STEPS = 40
SECONDS = 4.0
DRAIN_S = 30.0
SIGTERM_AFTER_S = 1.0
BUDGET_S = 1.0
"""A budget shorter than what is left of the call (about 3.5 s of sleeps)."""


async def _exit_of(server: SubprocessServer, within_s: float) -> tuple[int, float]:
    """Wait for the node to exit: its status, and how long that took from now."""
    started = time.monotonic()
    try:
        code = await anyio.to_thread.run_sync(server.wait, within_s)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the node did not exit within {within_s:.0f}s of its SIGTERM") from None
    return code, time.monotonic() - started


@pytest.mark.parametrize("client", ["stock", "helper"])
async def test_sigterm_drains_20_streaming_calls_to_the_other_node(prefix: str, client: str) -> None:
    """20 calls streaming progress for ~4 s on A; SIGTERM to A after 1 s: all complete at the
    client, every progress event once and in order, resumed on B; A exits within `drain_s`."""
    require_redis()
    policy = {"retry_ms": 50}
    options = {"drain_s": DRAIN_S}
    recorder = Recorder()
    progress: dict[int, list[float]] = {i: [] for i in range(CALLS)}
    outcomes: dict[int, str] = {}

    all_started = anyio.Event()

    async def run_call(session: Any, i: int) -> None:
        async def on_progress(p: float, total: float | None = None, message: str | None = None) -> None:
            progress[i].append(p)
            if all(progress.values()):
                all_started.set()

        args = {"seconds": SECONDS, "steps": STEPS}
        try:
            if client == "stock":
                result = await session.call_tool(
                    "slow_progress", args, progress_callback=on_progress, read_timeout_seconds=scaled(60)
                )
                outcomes[i] = result_text(result)
            else:
                answer = await session.call_tool("slow_progress", args, on_progress=on_progress)
                outcomes[i] = text(answer)
        except (MCPError, McpError) as exc:
            outcomes[i] = f"error: {exc}"
        except Exception as exc:
            outcomes[i] = f"{type(exc).__name__}: {exc}"

    async with cluster(2, prefix, policy=policy, options=options) as (a, b), CutProxy([port_of(a)]) as proxy:
        with anyio.fail_after(scaled(90)):
            async with recorded_session(client, proxy.mcp_url, recorder) as session:
                assert owner_of(recorder) == pid_of(a)
                if client == "stock":
                    # (the stock client lists the tools after a call's result when it has not yet:
                    # a request of A's session, which needs A; a client lists them first)
                    await session.list_tools()
                async with anyio.create_task_group() as tg:
                    for i in range(CALLS):
                        tg.start_soon(run_call, session, i)
                    # Every call reached A first: a request still on its way as the server stops is
                    # dropped by uvicorn itself (a connection without a request yet is closed at
                    # once), which the stock client does not retry. (Arriving during the drain:
                    # `test_drain_arrivals.py`.)
                    started_at = time.monotonic()
                    with anyio.fail_after(scaled(20)):
                        await all_started.wait()
                    await anyio.sleep(max(SIGTERM_AFTER_S - (time.monotonic() - started_at), 0))
                    assert all(0 < len(progress[i]) < STEPS for i in progress), progress
                    a.signal(signal.SIGTERM)
                    proxy.backend_ports = [port_of(b)]  # A is not ready any more: the balancer drops it
                    code, exit_s = await _exit_of(a, scaled(DRAIN_S + 15))
    print(f"\n{client}: A exited {exit_s:.2f}s after its SIGTERM (status {code})\n{recorder.summary()}")
    assert outcomes == {i: f"done {STEPS}" for i in range(CALLS)}, outcomes
    for i in range(CALLS):
        assert progress[i] == [float(n) for n in range(1, STEPS + 1)], (i, progress[i])
    assert code in (0, -signal.SIGTERM), code
    assert exit_s < DRAIN_S, f"A took {exit_s:.1f}s to exit, more than drain_s"
    resumes_on_b = [e for e in recorder.where(method="GET", resume=True) if e.node == pid_of(b)]
    assert len(resumes_on_b) >= CALLS, "every call's stream was resumed on B"
    assert all(e.status == 200 for e in resumes_on_b), [e.status for e in resumes_on_b]


# ----------------------------------------------------------------------------- tasks (2026-07-28)

TASKS_TARGET = "tests.apps.multinode_tasks_app:create_app"
TASKS = 10
TASK_POLICY = {"retry_ms": 20, "task_after_s": 0, "task_ttl_s": 60, "task_poll_interval_ms": 50}


async def test_sigterm_leaves_10_tasks_running_polled_to_completion_through_the_other_node(
    prefix: str,
) -> None:
    """10 tasks of ~4 s created on A; SIGTERM to A after 1 s: A's app finishes them (the drain
    waits), each polled through B only, all `completed`; A exits within `drain_s`."""
    from tests.support.modern_rpc import Raw

    async with cluster_behind_proxy(
        2, prefix, target=TASKS_TARGET, policy=TASK_POLICY, options={"drain_s": DRAIN_S}
    ) as ((a, b), proxy):
        raw = Raw(proxy)
        async with raw.client:
            task_ids = []
            for i in range(TASKS):
                answer, node = await raw.rpc(
                    "tools/call",
                    {"name": "slow", "arguments": {"seconds": SECONDS, "tag": f"t{i}"}},
                    "slow",
                    a,
                )
                assert node == pid_of(a) and answer["result"]["resultType"] == "task", answer
                task_ids.append(answer["result"]["taskId"])
            await anyio.sleep(SIGTERM_AFTER_S)
            a.signal(signal.SIGTERM)
            proxy.backend_ports = [port_of(b)]
            tasks: dict[str, dict[str, Any]] = {}
            with anyio.fail_after(scaled(60)):
                for task_id in task_ids:
                    while True:
                        task, node = await raw.get(task_id, b)
                        assert node == pid_of(b)
                        if task["status"] != "working":
                            tasks[task_id] = task
                            break
                        await anyio.sleep(task["pollIntervalMs"] / 1000)
            code, exit_s = await _exit_of(a, scaled(DRAIN_S + 15))
    print(f"\ntasks: A exited {exit_s:.2f}s after the last task was seen done (status {code})")
    statuses = {task_id: task["status"] for task_id, task in tasks.items()}
    assert statuses == dict.fromkeys(task_ids, "completed"), tasks
    texts = [tasks[task_id]["result"]["content"][0]["text"] for task_id in task_ids]
    assert texts == [f"slept t{i}" for i in range(TASKS)]
    assert code in (0, -signal.SIGTERM), code


# ----------------------------------------------------------------------------- one node, other servers


@pytest.mark.parametrize(
    ("server_class", "drain_s"),
    [("hypercorn", DRAIN_S), ("granian", DRAIN_S), ("uvicorn", DRAIN_S), ("uvicorn", BUDGET_S)],
    ids=["hypercorn", "granian", "uvicorn", "uvicorn-budget"],
)
async def test_sigterm_on_one_node_with_the_memory_store(
    server_class: str, drain_s: float, tmp_path: Any
) -> None:
    """One node, memory store, 20 calls streaming progress; SIGTERM once each has sent some: no
    other node can serve a resume (and the server stops accepting), so every connection stays
    attached and each call is answered on it, every progress event once and in order; the drain's
    summary says they finished and the process exits, within `drain_s`. With a budget shorter
    than the calls, the drain ends them at the budget: each connection gets the error saying so."""
    from tests.support.raw import RawSession
    from tests.support.server import GranianServer, HypercornServer

    cls = {"hypercorn": HypercornServer, "granian": GranianServer, "uvicorn": SubprocessServer}[server_class]
    log_path = tmp_path / "engine.log"
    server = cls(
        "tests.apps.drain_app:create_app",
        factory_kwargs={"log_path": str(log_path), "drain_s": drain_s},
        graceful_shutdown=DRAIN_S,  # (granian kills its worker after this: at least drain_s)
    )
    events: dict[int, list[Any]] = {i: [] for i in range(CALLS)}
    all_started = anyio.Event()
    try:
        info = await anyio.to_thread.run_sync(server.start)
        limits = httpx.Limits(max_connections=CALLS + 5)
        async with httpx.AsyncClient(base_url=info.base_url, timeout=scaled(30), limits=limits) as client:
            raw = RawSession(client)
            init = await raw.initialize()
            assert init.status == 200
            await raw.notify("notifications/initialized")

            async def run_call(i: int) -> None:
                call = raw.tool_call("slow_progress", {"seconds": SECONDS, "steps": STEPS}, progress=True)
                async with raw.open("POST", "/mcp", call) as (response, reader):
                    assert response.status_code == 200
                    async for event in reader:
                        events[i].append(event)
                        if all(sum(1 for e in mine if e.data) >= 2 for mine in events.values()):
                            all_started.set()

            with anyio.fail_after(scaled(DRAIN_S + 15)):
                async with anyio.create_task_group() as tg:
                    for i in range(CALLS):
                        tg.start_soon(run_call, i)
                    await all_started.wait()
                    server.signal(signal.SIGTERM)
            code, exit_s = await _exit_of(server, scaled(DRAIN_S + 15))
    finally:
        await anyio.to_thread.run_sync(server.kill)
    summary = log_path.read_text()
    print(f"\n{server_class}: exited {exit_s:.2f}s after the calls' end (status {code})\n{summary}")
    for i in range(CALLS):
        messages = [e.message for e in events[i] if e.data]
        progress = [m["params"]["progress"] for m in messages if m.get("method") == "notifications/progress"]
        answer = messages[-1]
        if drain_s == DRAIN_S:
            assert answer.get("result", {}).get("content", [{}])[0].get("text") == f"done {STEPS}", (
                i,
                answer,
            )
            assert progress == [float(n) for n in range(1, STEPS + 1)], (i, progress)
        else:
            assert answer.get("error", {}).get("message") == SHUT_DOWN, (i, answer)
            assert 2 <= len(progress) < STEPS and progress == [float(n) for n in range(1, len(progress) + 1)]
    if drain_s == DRAIN_S:
        assert f"{CALLS} request(s) finished, 0 ended at the budget" in summary, summary
        assert "attached connections kept" in summary, summary
    else:
        assert f"0 request(s) finished, {CALLS} ended at the budget" in summary, summary
    assert exit_s < DRAIN_S, "the node exited once its calls were over"
