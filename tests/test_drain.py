"""Rolling deploys lose nothing (issue 22, part 1): the drain on a real server's SIGTERM.

Two uvicorn nodes on Redis behind the round-robin proxy (`tests.test_multinode`'s
harness): every call is started on node A, A gets SIGTERM one second in, and the
balancer drops A (as its readiness check would). A closes every attached connection
after `retry:`; each client resumes on B, which serves the stream from Redis while
A's app goes on recording; A exits once its calls are over, within `drain_s`.
Single nodes of hypercorn and granian with the memory store get the same signal:
their connections end with `retry:`, the work finishes, the process exits.

Nothing here is timed to pass only on a quiet machine: every wait is bounded by
`scaled(...)` far above what a loaded machine needs, and what is asserted is what
the clients got (every event once, in order) and how the node ended.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from mcp.shared.exceptions import MCPError

from mcp_resume_asgi.client import McpError, ResumableSession
from tests.support.mcp_client import result_text, stock_session
from tests.support.proxy import CutProxy
from tests.support.server import SubprocessServer
from tests.support.stores import require_redis
from tests.support.timing import scaled
from tests.test_multinode import (
    Recorder,
    cluster,
    helper_http_client,
    owner_of,
    pid_of,
    port_of,
    prefix,
    text,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120), pytest.mark.slow]

__all__ = ["prefix"]  # the fixture, used by name

CALLS = 20
STEPS = 40
SECONDS = 4.0
DRAIN_S = 30.0
SIGTERM_AFTER_S = 1.0


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

    async def run_call(session: Any, i: int) -> None:
        async def on_progress(p: float, total: float | None = None, message: str | None = None) -> None:
            progress[i].append(p)

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
            async with contextlib.AsyncExitStack() as stack:
                session: Any
                if client == "stock":
                    http2 = await stack.enter_async_context(recorder.httpx2_client())
                    session = await stack.enter_async_context(
                        stock_session(proxy.mcp_url, http_client=http2, terminate_on_close=False)
                    )
                else:
                    http = await stack.enter_async_context(helper_http_client(recorder))
                    session = await stack.enter_async_context(ResumableSession(proxy.mcp_url, http_client=http))
                assert owner_of(recorder) == pid_of(a)
                if client == "stock":
                    # (the stock client lists the tools after a call's result when it has not yet:
                    # a request of A's session, which needs A; a client lists them first)
                    await session.list_tools()
                async with anyio.create_task_group() as tg:
                    for i in range(CALLS):
                        tg.start_soon(run_call, session, i)
                    await anyio.sleep(SIGTERM_AFTER_S)
                    assert all(not progress[i] or len(progress[i]) < STEPS for i in progress)
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
