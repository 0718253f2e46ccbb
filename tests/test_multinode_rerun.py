"""Re-runnable work survives its node (issue 22, item 2): SIGKILL the node running a call.

Two uvicorn nodes (`tests.apps.rerun_app`: a stateless app whose tool `counted` counts its runs
in Redis, wrapped with `tasks=True` on a shared Redis) behind `CutProxy` (round robin, no
affinity), the harness of `tests/support/cluster.py`. The
call runs on node A; one second in, A is killed (SIGKILL) and the balancer drops it.

* With `Policy(rerun_on_loss=True)` on the tool's route, the call completes through node B: a
  2025 call of the client helper or of the stock `mcp` client (its resume lands on B, whose follower finds the owner dead and
  runs the stored request again: the client gets the first run's events, the marker, then the
  re-run's), and a 2026-07-28 task polled through B (`tasks/get` finds the owner dead and runs
  it again). The tool ran exactly twice: once lost, once re-run.
* Without it, today's clean end: the helper's call ends with -32000, the task `failed`; the
  tool ran once.

A 2025 call's client resumes with `Last-Event-ID` on B (the stock client too, after the
priming event's `retry:`): the first run's progress 1..k, the marker, the re-run's 1..40.

The figures (how long after the kill the call completed) are printed for the report.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp.shared.exceptions import MCPError

from mcp_resume_asgi.client import McpError, ResumableSession
from tests.apps.rerun_app import done_key, runs_key
from tests.support.cluster import cluster, port_of, prefix
from tests.support.exchanges import Recorder, helper_http_client, recorded_session
from tests.support.mcp_client import result_text, text
from tests.support.modern_rpc import Raw
from tests.support.proxy import CutProxy
from tests.support.server import SubprocessServer
from tests.support.stores import redis_url, require_redis
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90), pytest.mark.slow]

__all__ = ["prefix"]  # the fixture, used by name

TARGET = "tests.apps.rerun_app:create_app"
NODE_TIMEOUT_S = 2.0
"""`node_timeout_s`: the dead node is noticed about this fast."""
MARKER_LOGGER = "mcp-resume-asgi"


@contextlib.asynccontextmanager
async def two_nodes(
    prefix: str, *, rerun: bool, policy: dict[str, Any], drain_s: float = 30.0
) -> AsyncIterator[tuple[SubprocessServer, SubprocessServer, CutProxy]]:
    """Nodes A and B of the rerun app; the balancer sends everything to A until the test moves it."""
    require_redis()
    env = {"MCP_RESUME_RERUN": "1" if rerun else "0"}
    options = {"node_timeout_s": NODE_TIMEOUT_S, "drain_s": drain_s}
    async with (
        cluster(2, prefix, policy=policy, options=options, target=TARGET, env=env) as (a, b),
        CutProxy([port_of(a)]) as proxy,
    ):
        yield a, b, proxy


async def runs(prefix: str, tag: str, key: Callable[[str, str], str] = runs_key) -> int:
    """How many times `counted(tag=tag)` started, on any node (`key=done_key`: reached its end)."""
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(redis_url(), socket_connect_timeout=2, socket_timeout=5)
    try:
        value = await client.get(key(prefix, tag))
    finally:
        await client.aclose()
    return int(value or 0)


@pytest.mark.parametrize("client", ["helper", "stock"])
@pytest.mark.parametrize("rerun", [True, False], ids=["rerun", "run-once"])
async def test_a_call_survives_its_node_killed(prefix: str, rerun: bool, client: str) -> None:
    """The client helper, and the stock `mcp` client (2025 revision, legacy mode)."""
    tag = f"{client}-{rerun}"
    recorder = Recorder()
    progress: list[float] = []
    markers: list[Any] = []
    outcome: list[str] = []
    got_some = anyio.Event()
    finished = anyio.Event()

    async def on_progress(value: float, total: float | None = None, message: str | None = None) -> None:
        progress.append(value)
        if len(progress) >= 5:
            got_some.set()

    async def on_notification(method: str, params: dict[str, Any]) -> None:
        if method == "notifications/message" and params.get("logger") == MARKER_LOGGER:
            markers.append(params.get("data"))

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        if params.logger == MARKER_LOGGER:
            markers.append(params.data)

    async def run_call(session: Any) -> None:
        arguments = {"seconds": 4, "steps": 40, "tag": tag}
        try:
            if client == "stock":
                result = await session.call_tool(
                    "counted", arguments, progress_callback=on_progress, read_timeout_seconds=scaled(30)
                )
                outcome.append(f"ok: {result_text(result)}")
            else:
                answer = await session.call_tool("counted", arguments, on_progress=on_progress)
                outcome.append(f"ok: {text(answer)}")
        except MCPError as exc:
            outcome.append(f"error {exc.error.code}: {exc.error.message}")
        except McpError as exc:
            outcome.append(f"error {exc.code}: {exc.message}")
        finally:
            finished.set()

    took = -1.0
    async with two_nodes(prefix, rerun=rerun, policy={"retry_ms": 50}) as (a, b, proxy):
        with anyio.fail_after(scaled(45)):
            async with (
                recorded_session(
                    client, proxy.mcp_url, recorder, logging_callback=on_log, on_notification=on_notification
                ) as session,
                anyio.create_task_group() as tg,
            ):
                tg.start_soon(run_call, session)
                with anyio.fail_after(scaled(10)):
                    await got_some.wait()
                a.kill()
                killed_at = time.monotonic()
                seen_at_kill = len(progress)
                proxy.backend_ports = [port_of(b)]
                with anyio.fail_after(scaled(30)):
                    await finished.wait()
                took = time.monotonic() - killed_at
        ran = await runs(prefix, tag)
    print(
        f"\n{client}, rerun_on_loss={rerun}: killed A after {seen_at_kill} progress events; the call "
        f"ended {took:.2f}s later with {outcome}; the tool ran {ran} time(s); markers {markers}; "
        f"{len(progress)} progress events\n{recorder.summary()}"
    )
    if rerun:
        assert outcome == [f"ok: counted {tag}"], outcome
        assert ran == 2, "once lost with node A, once re-run on node B"
        assert markers == [{"rerun": 1, "reason": "owner-lost"}]
        # The first run's events as they were, then the re-run's from its start, none twice.
        first_run = progress[: progress.index(1.0, 1)]
        assert (
            first_run == [float(i) for i in range(1, len(first_run) + 1)] and len(first_run) >= seen_at_kill
        )
        assert progress[len(first_run) :] == [float(i) for i in range(1, 41)]
    else:
        assert len(outcome) == 1 and outcome[0].startswith("error -32000"), outcome
        assert ran == 1
        assert markers == []
        assert progress == [float(i) for i in range(1, len(progress) + 1)]
    assert took <= NODE_TIMEOUT_S + scaled(12), f"took {took:.1f}s"


@pytest.mark.parametrize("rerun", [True, False], ids=["rerun", "run-once"])
async def test_a_task_survives_its_node_killed(prefix: str, rerun: bool) -> None:
    tag = f"task-{rerun}"
    policy = {"retry_ms": 20, "task_after_s": 0, "task_ttl_s": 60, "task_poll_interval_ms": 50}
    async with two_nodes(prefix, rerun=rerun, policy=policy) as (a, b, proxy):
        proxy.backend_ports = [port_of(a), port_of(b)]
        raw = Raw(proxy)
        async with raw.client:
            answer, _ = await raw.rpc(
                "tools/call",
                {"name": "counted", "arguments": {"seconds": 3, "steps": 30, "tag": tag}},
                "counted",
                a,
            )
            assert answer["result"]["resultType"] == "task", answer
            task_id = answer["result"]["taskId"]
            task, _ = await raw.get(task_id, b)
            assert task["status"] == "working", task
            await anyio.sleep(1.0)
            a.kill()
            killed_at = time.monotonic()
            proxy.backend_ports = [port_of(b)]
            statuses: list[str] = []
            with anyio.fail_after(scaled(30)):
                while True:
                    task, _ = await raw.get(task_id, b)
                    if not statuses or statuses[-1] != task["status"]:
                        statuses.append(task["status"])
                    if task["status"] != "working":
                        break
                    await anyio.sleep(task["pollIntervalMs"] / 1000)
            took = time.monotonic() - killed_at
        ran = await runs(prefix, tag)
    print(
        f"\ntask, rerun_on_loss={rerun}: statuses {statuses} after the kill, ended {took:.2f}s later; ran {ran}"
    )
    if rerun:
        assert task["status"] == "completed", task
        assert task["result"]["content"][0]["text"] == f"counted {tag}"
        assert ran == 2, "once lost with node A, once re-run on node B"
    else:
        assert task["status"] == "failed", task
        assert ran == 1
    assert took <= NODE_TIMEOUT_S + scaled(12), f"took {took:.1f}s"


async def test_a_node_that_only_looked_dead_stops_its_orphaned_task(
    prefix: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """SIGSTOP node A past `node_timeout_s` while it runs a task: B finds it lost and runs the
    task again to its end. SIGCONT A: its run's next event finds the record B's (fencing), and
    its run stops there, quietly - one log line, no traceback - and writes nothing more: the
    record is as B left it. (The `mcp` SDK's stateless mode runs the tool apart from its HTTP
    call, which is what the middleware stops: that tool runs on, its events dropped.)"""
    tag = "paused"
    policy = {"retry_ms": 20, "task_after_s": 0, "task_ttl_s": 60, "task_poll_interval_ms": 50}
    err = ""
    async with two_nodes(prefix, rerun=True, policy=policy) as (a, b, proxy):
        proxy.backend_ports = [port_of(a), port_of(b)]
        raw = Raw(proxy)
        async with raw.client:
            answer, _ = await raw.rpc(
                "tools/call",
                {"name": "counted", "arguments": {"seconds": 3, "steps": 30, "tag": tag}},
                "counted",
                a,
            )
            task_id = answer["result"]["taskId"]
            await anyio.sleep(1.0)
            a.signal(signal.SIGSTOP)
            try:
                proxy.backend_ports = [port_of(b)]
                with anyio.fail_after(scaled(30)):
                    while (task := (await raw.get(task_id, b))[0])["status"] == "working":
                        await anyio.sleep(task["pollIntervalMs"] / 1000)
                assert task["status"] == "completed", task
                stream_id = await stream_of_task(prefix)
                recorded = await record_of(prefix, stream_id)
            finally:
                a.signal(signal.SIGCONT)
            with anyio.fail_after(scaled(15)):
                while "was taken for lost" not in " ".join(err.split()):
                    await anyio.sleep(0.1)
                    err += capfd.readouterr().err
            await anyio.sleep(3.0)  # (whatever A's orphaned run would still do: 2 s of it were left)
            err += capfd.readouterr().err
            after = await record_of(prefix, stream_id)
        ran = await runs(prefix, tag)
        done = await runs(prefix, tag, key=done_key)
    print(f"\nSIGSTOP/SIGCONT: ran {ran}, reached the end {done}; A said:\n{err}")
    assert ran == 2
    assert after == recorded, "nothing of A's orphaned run written after B took the record"
    assert " ".join(err.split()).count("was taken for lost") == 1
    assert "Traceback" not in err and "SEQ event" not in err


async def stream_of_task(prefix: str) -> str:
    """The one stream whose loss was claimed under `prefix` (the test's one call)."""
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(redis_url())
    try:
        found = [key async for key in client.scan_iter(match=f"{prefix}k:rerun-claim:*")]
    finally:
        await client.aclose()
    assert len(found) == 1, found
    return found[0].decode().split("rerun-claim:", 1)[1].rsplit(":", 1)[0]


async def record_of(prefix: str, stream_id: str) -> tuple[Any, list[tuple[int, bytes]]]:
    """The stream's record as the store holds it: (owner, last seq, final seq), and its events."""
    from mcp_resume_asgi.store import RedisStore

    store = RedisStore(redis_url(), prefix=prefix)
    try:
        meta = await store.get_stream(stream_id)
        assert meta is not None
        return (meta.owner, meta.last_seq, meta.final_seq), await store.read(stream_id, 0)
    finally:
        await store.aclose()


async def test_a_call_its_nodes_drain_budget_stopped_is_run_again_on_the_other_node(prefix: str) -> None:
    """SIGTERM instead of SIGKILL, with a drain budget (1 s) shorter than the call (4 s): at the
    budget A leaves the call's record to be run again instead of ending it with an error; B,
    which serves the client's resume, runs it again; the call completes, the tool ran twice."""
    tag = "drained"
    recorder = Recorder()
    progress: list[float] = []
    markers: list[Any] = []
    outcome: list[str] = []
    got_some = anyio.Event()

    async def on_progress(value: float, total: float | None = None, message: str | None = None) -> None:
        progress.append(value)
        if len(progress) >= 5:
            got_some.set()

    async def on_notification(method: str, params: dict[str, Any]) -> None:
        if method == "notifications/message" and params.get("logger") == MARKER_LOGGER:
            markers.append(params.get("data"))

    async with two_nodes(prefix, rerun=True, policy={"retry_ms": 50}, drain_s=1.0) as (a, b, proxy):
        with anyio.fail_after(scaled(45)):
            async with (
                helper_http_client(recorder) as http,
                ResumableSession(proxy.mcp_url, http_client=http, on_notification=on_notification) as session,
                anyio.create_task_group() as tg,
            ):

                async def run_call() -> None:
                    answer = await session.call_tool(
                        "counted", {"seconds": 4, "steps": 40, "tag": tag}, on_progress=on_progress
                    )
                    outcome.append(text(answer))

                tg.start_soon(run_call)
                with anyio.fail_after(scaled(10)):
                    await got_some.wait()
                a.signal(signal.SIGTERM)
                signalled_at = time.monotonic()
                proxy.backend_ports = [port_of(b)]
            took = time.monotonic() - signalled_at
            code = await anyio.to_thread.run_sync(a.wait, scaled(10))
        ran = await runs(prefix, tag)
    print(
        f"\ndrain budget 1 s: the call completed {took:.2f}s after A's SIGTERM; A exited with {code}; "
        f"the tool ran {ran} time(s); markers {markers}; {len(progress)} progress events\n{recorder.summary()}"
    )
    assert outcome == [f"counted {tag}"]
    assert ran == 2, "stopped at A's drain budget, run again on node B"
    assert markers == [{"rerun": 1, "reason": "owner-lost"}]
    first_run = progress[: progress.index(1.0, 1)]
    assert first_run == [float(i) for i in range(1, len(first_run) + 1)]
    assert progress[len(first_run) :] == [float(i) for i in range(1, 41)]


async def test_ten_calls_and_ten_tasks_all_complete_through_the_other_node(prefix: str) -> None:
    """10 calls of the client helper and 10 tasks (2026-07-28) running on A; SIGKILL to A:
    every one completes through B, each tool counted exactly twice."""
    count = 10
    policy = {"retry_ms": 50, "task_after_s": 0, "task_ttl_s": 60, "task_poll_interval_ms": 100}
    progress: dict[str, list[float]] = {f"call-{i}": [] for i in range(count)}
    results: dict[str, str] = {}
    started = anyio.Event()

    def on_progress_of(tag: str) -> Any:
        async def on_progress(value: float, total: float | None = None, message: str | None = None) -> None:
            progress[tag].append(value)
            if all(len(values) >= 3 for values in progress.values()):
                started.set()

        return on_progress

    async with two_nodes(prefix, rerun=True, policy=policy) as (a, b, proxy):
        raw = Raw(proxy)
        with anyio.fail_after(scaled(60)):
            async with (
                raw.client,
                helper_http_client(Recorder()) as http,
                ResumableSession(proxy.mcp_url, http_client=http) as session,
                anyio.create_task_group() as tg,
            ):

                async def run_call(tag: str) -> None:
                    arguments = {"seconds": 3, "steps": 30, "tag": tag}
                    answer = await session.call_tool("counted", arguments, on_progress=on_progress_of(tag))
                    results[tag] = text(answer)

                for tag in progress:
                    tg.start_soon(run_call, tag)
                task_ids = {}
                for i in range(count):
                    tag = f"task-{i}"
                    arguments = {"seconds": 3, "steps": 30, "tag": tag}
                    answer, _ = await raw.rpc(
                        "tools/call", {"name": "counted", "arguments": arguments}, "counted"
                    )
                    assert answer["result"]["resultType"] == "task", answer
                    task_ids[tag] = answer["result"]["taskId"]
                with anyio.fail_after(scaled(15)):
                    await started.wait()
                    # A task is answered before its tool starts: each must have started on A
                    # before the kill, or its one run (on B) is rightly its only one.
                    while any([await runs(prefix, tag) < 1 for tag in task_ids]):
                        await anyio.sleep(0.05)
                a.kill()
                killed_at = time.monotonic()
                proxy.backend_ports = [port_of(b)]
                working = dict(task_ids)
                while working:  # each task polled in turn, as a client polling them all does
                    for tag, task_id in list(working.items()):
                        task, _ = await raw.get(task_id, b)
                        if task["status"] != "working":
                            assert task["status"] == "completed", task
                            results[tag] = task["result"]["content"][0]["text"]
                            del working[tag]
                    await anyio.sleep(0.1)
            took = time.monotonic() - killed_at
        ran = {tag: await runs(prefix, tag) for tag in results}
    print(
        f"\n{count} calls and {count} tasks: all done {took:.2f}s after the kill; runs {sorted(set(ran.values()))}"
    )
    assert results == {tag: f"counted {tag}" for tag in [*progress, *(f"task-{i}" for i in range(count))]}
    assert ran == dict.fromkeys(results, 2), "each once lost with node A, once re-run on node B"
