"""Sessions belong to the fleet: a node that leaves (SIGTERM) or dies (SIGKILL) takes no session
with it, and a call it was running completes.

Two uvicorn nodes on one Redis behind the round-robin proxy (`tests.support.cluster`), node A
with `--timeout-graceful-shutdown 2`. Ten clients each open a session (the round robin puts
about half on A), make a call streaming progress, and once every call streams, A gets its
signal and the balancer drops it. Then each client lists the tools and makes a second call on
the same session. What must hold: 10/10 first calls complete with every progress event once
and in order, and 10/10 sessions go on, through B, which took A's sessions over (`engine/
adoption.py`): the id each client knows never changed.

The figures (how long after the signal the first call on a moved session was answered, the
calls that failed) are printed for the report (`docs/guides/deploy.md`, `BENCHMARKS.md`).
"""

from __future__ import annotations

import contextlib
import re
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mcp_resume_asgi.client import McpError, ResumableSession, ResumableTransport
from tests.support.cluster import cluster, pid_of, port_of, prefix
from tests.support.exchanges import Recorder, recorded_session
from tests.support.mcp_client import result_text, text
from tests.support.proxy import CutProxy
from tests.support.stores import require_redis
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(150), pytest.mark.slow]

__all__ = ["prefix"]  # the fixture, used by name

CLIENTS = 10
STEPS = 20
SECONDS = 3.0
NODE_TIMEOUT_S = 2.0
GRACEFUL_S = 2.0
PRE_STOP_S = 1.0


async def _logs(folder: Path) -> list[str]:
    """Each node's log (`cluster(log_dir=...)`)."""
    return await anyio.to_thread.run_sync(lambda: [log.read_text() for log in folder.glob("node-*.log")])


async def _replays(folder: Path) -> list[float]:
    """How long each adoption's replay took, as the adopting node logged it, sorted."""
    return sorted(
        float(t) for log in await _logs(folder) for t in re.findall(r"replayed in ([0-9.]+) s", log)
    )


async def _first_call(client: str, session: Any, progress: list[float]) -> str:
    async def on_progress(p: float, total: float | None = None, message: str | None = None) -> None:
        progress.append(p)

    args = {"seconds": SECONDS, "steps": STEPS}
    if client != "helper":
        result = await session.call_tool(
            "slow_progress", args, progress_callback=on_progress, read_timeout_seconds=scaled(60)
        )
        return result_text(result)
    return text(await session.call_tool("slow_progress", args, on_progress=on_progress))


async def _goes_on(client: str, session: Any) -> str:
    """`tools/list` and a second call on the same session: the second call's text."""
    args = {"seconds": 0.1, "steps": 2}
    if client != "helper":
        tools = await session.list_tools()
        assert any(tool.name == "slow_progress" for tool in tools.tools)
        return result_text(await session.call_tool("slow_progress", args, read_timeout_seconds=scaled(30)))
    listed = await session.request("tools/list")
    assert any(tool["name"] == "slow_progress" for tool in listed["tools"])
    return text(await session.call_tool("slow_progress", args))


@contextlib.asynccontextmanager
async def _session(client: str, url: str, recorder: Recorder) -> AsyncIterator[Any]:
    """A session of `client`: the stock `mcp` client's `Client` in its legacy mode (a 2025
    session, its log level set: state its adopter replays), its `ClientSession` (`stock`), or
    the client helper. (`Client`'s default mode speaks 2026-07-28 here, without the
    resumable-streams opt-in: such a call cannot move, and must end within the server's
    graceful timeout; `docs/guides/deploy.md`.)"""
    if client == "legacy":
        async with (
            recorder.httpx2_client() as http,
            Client(streamable_http_client(url, http_client=http), mode="legacy", log_level="debug") as mcp,
        ):
            yield mcp
    else:
        async with recorded_session(client, url, recorder) as session:
            yield session


@pytest.mark.parametrize(
    ("client", "how"),
    [
        ("stock", signal.SIGTERM),
        ("legacy", signal.SIGTERM),
        ("helper", signal.SIGTERM),
        ("helper", signal.SIGKILL),
        ("stock", signal.SIGKILL),
        ("legacy", signal.SIGKILL),
    ],
    ids=[
        "stock-sigterm",
        "legacy-sigterm",
        "helper-sigterm",
        "helper-sigkill",
        "stock-sigkill",
        "legacy-sigkill",
    ],
)
async def test_a_node_leaving_mid_call_takes_no_session_with_it(
    prefix: str, client: str, how: signal.Signals, tmp_path: Path
) -> None:
    require_redis()
    policy: dict[str, Any] = {"retry_ms": 50}
    if how is signal.SIGKILL:
        policy["rerun_on_loss"] = True
    options = {"node_timeout_s": NODE_TIMEOUT_S}
    recorder = Recorder()
    progress: dict[int, list[float]] = {i: [] for i in range(CLIENTS)}
    first: dict[int, str] = {}
    then: dict[int, str] = {}
    moved_at: dict[int, float] = {}
    signalled = anyio.Event()
    signalled_at = 0.0
    opened = 0
    all_opened = anyio.Event()

    async with (
        cluster(
            2, prefix, policy=policy, options=options, graceful_shutdown=GRACEFUL_S, log_dir=tmp_path
        ) as (a, b),
        CutProxy([port_of(a), port_of(b)]) as proxy,
    ):

        async def one_client(i: int) -> None:
            nonlocal opened
            try:
                async with _session(client, proxy.mcp_url, recorder) as session:
                    if client != "helper":
                        await session.list_tools()
                    opened += 1
                    if opened == CLIENTS:
                        all_opened.set()
                    await all_opened.wait()
                    try:
                        first[i] = await _first_call(client, session, progress[i])
                    except (MCPError, McpError) as exc:
                        first[i] = f"error: {exc}"
                    await signalled.wait()
                    try:
                        then[i] = await _goes_on(client, session)
                        moved_at[i] = time.monotonic() - signalled_at
                    except (MCPError, McpError) as exc:
                        then[i] = f"error: {exc}"
            except Exception as exc:
                first.setdefault(i, f"{type(exc).__name__}: {exc}")
                then.setdefault(i, f"{type(exc).__name__}: {exc}")

        with anyio.fail_after(scaled(120)):
            async with anyio.create_task_group() as tg:
                for i in range(CLIENTS):
                    tg.start_soon(one_client, i)
                await all_opened.wait()
                while not all(progress.values()):
                    await anyio.sleep(0.05)
                await anyio.sleep(0.5)
                proxy.backend_ports = [port_of(b)]  # A is not ready any more: the balancer drops it
                a.signal(how)
                signalled_at = time.monotonic()
                signalled.set()
    on_a = [e for e in recorder.where(method="POST", rpc="initialize") if e.node == pid_of(a)]
    failed = sum(1 for v in [*first.values(), *then.values()] if v != f"done {STEPS}" and v != "done 2")
    replays = await _replays(tmp_path)
    print(
        f"\n{client} {how.name}: {len(on_a)} of {CLIENTS} sessions opened on A; calls failed: {failed}; "
        f"second call answered {min(moved_at.values(), default=0):.2f}-"
        f"{max(moved_at.values(), default=0):.2f}s after the signal; {len(replays)} sessions taken over, "
        f"replayed in {replays[0] if replays else 0:.3f}-{replays[-1] if replays else 0:.3f}s"
    )
    assert on_a, "the round robin put no session on A"
    assert first == {i: f"done {STEPS}" for i in range(CLIENTS)}, first
    for i in range(CLIENTS):
        if how is signal.SIGTERM:
            assert progress[i] == [float(n) for n in range(1, STEPS + 1)], (i, progress[i])
        else:  # the first run's progress, then the re-run's from 1: each in order
            assert progress[i][-STEPS:] == [float(n) for n in range(1, STEPS + 1)], (i, progress[i])
    assert then == {i: "done 2" for i in range(CLIENTS)}, then


async def test_the_client_helper_rides_a_restart_out(prefix: str) -> None:
    """One node serving a session is killed mid-call (`rerun_on_loss`), and nothing answers for
    a while; then its next life (node B, same store) comes up behind the proxy. The helper keeps
    trying meanwhile (`reconnect_s`): the call completes (run again), the session goes on. When
    nothing comes back within `reconnect_s`, the call ends with an error that says so."""
    require_redis()
    policy = {"retry_ms": 50, "rerun_on_loss": True}
    recorder = Recorder()
    progress: list[float] = []
    async with (
        cluster(2, prefix, policy=policy, options={"node_timeout_s": NODE_TIMEOUT_S}) as (a, b),
        CutProxy([port_of(a)]) as proxy,
    ):
        with anyio.fail_after(scaled(60)):
            async with recorded_session("helper", proxy.mcp_url, recorder) as session:
                async with anyio.create_task_group() as tg:
                    outcome: dict[str, str] = {}

                    async def call() -> None:
                        outcome["first"] = await _first_call("helper", session, progress)

                    tg.start_soon(call)
                    while len(progress) < 3:
                        await anyio.sleep(0.05)
                    a.kill()
                    down_at = time.monotonic()
                    await anyio.sleep(3.0)  # nothing answers: the proxy's backend refuses
                    proxy.backend_ports = [port_of(b)]
                    up_at = time.monotonic()
                outcome["then"] = await _goes_on("helper", session)
                answered = time.monotonic() - up_at
            async with (
                httpx.AsyncClient(
                    transport=ResumableTransport(reconnect_s=1.0, default_retry_ms=100),
                    timeout=httpx.Timeout(30, read=60),
                ) as http,
                ResumableSession(proxy.mcp_url, http_client=http) as late,
            ):
                late_progress: list[float] = []
                async with anyio.create_task_group() as tg:

                    async def doomed() -> None:
                        try:
                            outcome["late"] = await _first_call("helper", late, late_progress)
                        except McpError as exc:
                            outcome["late"] = f"error: {exc.message}"

                    tg.start_soon(doomed)
                    while not late_progress:
                        await anyio.sleep(0.05)
                    b.kill()
    print(
        f"\nrestart: nothing answered for {up_at - down_at:.1f}s; the call completed and the session's "
        f"next call was answered {answered:.2f}s after the node came back"
    )
    assert outcome["first"] == f"done {STEPS}", outcome
    assert progress[-STEPS:] == [float(n) for n in range(1, STEPS + 1)], progress
    assert outcome["then"] == "done 2", outcome
    assert outcome["late"].startswith("error: ") and "no server answered" in outcome["late"], outcome


async def _short_call(client: str, session: Any) -> str:
    """A 1 s call streaming progress: its text."""
    args = {"seconds": 1.0, "steps": 5}
    if client == "helper":
        return text(await session.call_tool("slow_progress", args))
    progress: list[float] = []

    async def on_progress(p: float, total: float | None = None, message: str | None = None) -> None:
        progress.append(p)

    result = await session.call_tool(
        "slow_progress", args, progress_callback=on_progress, read_timeout_seconds=scaled(60)
    )
    return result_text(result)


@pytest.mark.parametrize("serving", [2, 3], ids=["two-nodes", "three-nodes"])
@pytest.mark.parametrize("client", ["stock", "helper"])
async def test_a_rolling_deploy_fails_no_call_and_loses_no_session(
    prefix: str, client: str, serving: int, tmp_path: Path
) -> None:
    """Ten sessions call a 1 s streaming tool one call after the other while the service is
    deployed: `serving` nodes (A, B, and C for three) serve; a new node takes A's place behind
    the proxy and A is drained (SIGTERM, a second later, as after a `preStop` delay), then B the
    same way, and so on. Every call succeeds, every session lives to the end (its calls answered
    by the new nodes once the old ones are gone)."""
    require_redis()
    # (scaled: every old node lives through its drain, and a loaded machine that holds one up past
    # an unscaled timeout would have its calls taken for lost, which is the other tests' subject)
    options = {"node_timeout_s": scaled(NODE_TIMEOUT_S)}
    recorder = Recorder()
    calls: dict[int, list[tuple[float, float, str]]] = {i: [] for i in range(CLIENTS)}
    done = anyio.Event()
    async with (
        cluster(
            2 * serving,
            prefix,
            policy={"retry_ms": 50},
            options=options,
            graceful_shutdown=GRACEFUL_S,
            log_dir=tmp_path,
        ) as nodes,
        CutProxy([port_of(node) for node in nodes[:serving]]) as proxy,
    ):

        async def one_client(i: int) -> None:
            async with _session(client, proxy.mcp_url, recorder) as session:
                if client != "helper":
                    await session.list_tools()
                while not done.is_set():
                    started = time.monotonic()
                    try:
                        outcome = await _short_call(client, session)
                    except (MCPError, McpError) as exc:
                        outcome = f"error: {exc}"
                    calls[i].append((started, time.monotonic(), outcome))

        with anyio.fail_after(scaled(120)):
            async with anyio.create_task_group() as tg:
                for i in range(CLIENTS):
                    tg.start_soon(one_client, i)
                while not all(calls.values()):  # every session has made a call
                    await anyio.sleep(0.1)
                deploy_started = time.monotonic()
                for old, new in zip(nodes[:serving], nodes[serving:], strict=True):
                    kept = [p for p in proxy.backend_ports if p != port_of(old)]
                    proxy.backend_ports = [*kept, port_of(new)]
                    # (as a `preStop` delay does: the balancer has let go of the node before its
                    # SIGTERM, or a connection it handed over just before is closed unanswered
                    # by the stopping server, which the stock client does not retry)
                    await anyio.sleep(PRE_STOP_S)
                    old.signal(signal.SIGTERM)
                    await anyio.to_thread.run_sync(old.wait, scaled(40))
                deploy_ended = time.monotonic()
                with anyio.move_on_after(scaled(30)):  # every session makes a call after the deploy
                    while not all(made and made[-1][0] > deploy_ended for made in calls.values()):
                        await anyio.sleep(0.1)
                done.set()
    logs = await _logs(tmp_path)
    adoptions = sum(log.count("taken over from node") for log in logs)
    left = {node for log in logs for node in re.findall(r"taken over from node (\S+),", log)}
    replays = await _replays(tmp_path)
    every = [call for made in calls.values() for call in made]
    failed = [call for call in every if call[2] != "done 5"]
    during = [end - start for start, end, _ in every if end > deploy_started and start < deploy_ended]
    print(
        f"\n{client} rolling deploy of {serving} nodes: {len(every)} calls, {len(failed)} failed; deploy took "
        f"{deploy_ended - deploy_started:.1f}s; sessions taken over: {adoptions} (from {len(left)} nodes); "
        "calls overlapping the "
        f"deploy took {min(during, default=0):.2f}-{max(during, default=0):.2f}s (a call alone takes 1 s); "
        "a session's replay "
        f"took {replays[0] if replays else 0:.3f}-{replays[-1] if replays else 0:.3f}s"
    )
    warnings = [
        line
        for log in logs
        for line in log.splitlines()
        if " WARNING " in line or "did not answer" in line or "taken over" in line
    ]
    assert failed == [], (failed[:5], warnings[:20])
    for i, made in calls.items():
        assert made and made[-1][0] > deploy_ended, f"session {i} made no call after the deploy"
    assert len(left) == serving, f"sessions were taken over from {len(left)} of the {serving} nodes replaced"
