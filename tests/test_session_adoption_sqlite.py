"""One node on `SQLiteStore`, stopped (SIGTERM) or killed (SIGKILL, `rerun_on_loss`) mid-call and
started again on the same file: the client helper gets the call's result once and its session
goes on.

A real uvicorn process (`tests.apps.wrapped_app`, `--timeout-graceful-shutdown 5`: a lone
node keeps its client's connection while the call finishes) behind the test proxy, so the
client's URL outlives the process. While no process answers, the helper keeps trying (`reconnect_s`). The
new process is a new node of the same store: it finds the call's stream (finished during the
drain, or run again after the kill) and takes the session over from its earlier life
(`engine/adoption.py`), replaying it into its own app.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_resume_asgi.client import ResumableSession
from tests.support.exchanges import Recorder, helper_http_client
from tests.support.mcp_client import text
from tests.support.proxy import CutProxy
from tests.support.server import SubprocessServer
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(120)]

APP = "tests.apps.wrapped_app:create_app"
STEPS = 20


def node(path: Path) -> SubprocessServer:
    options: dict[str, Any] = {
        "store": f"sqlite://{path}",
        "node_timeout_s": 2.0,
        "policy": {"retry_ms": 50, "rerun_on_loss": True},
    }
    return SubprocessServer(APP, factory_kwargs=options, graceful_shutdown=5.0)


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["stopped", "killed"])
async def test_a_restarted_node_on_sqlite_keeps_the_call_and_the_session(
    tmp_path: Path, how: signal.Signals
) -> None:
    path = tmp_path / "store.db"
    first, second = node(path), node(path)
    progress: list[float] = []
    outcome: dict[str, str] = {}
    try:
        info = await anyio.to_thread.run_sync(first.start)
        async with CutProxy([info.port]) as proxy:
            with anyio.fail_after(scaled(90)):
                async with (
                    helper_http_client(Recorder()) as http,
                    ResumableSession(proxy.mcp_url, http_client=http) as session,
                ):

                    async def call() -> None:
                        async def on_progress(
                            p: float, total: float | None = None, m: str | None = None
                        ) -> None:
                            progress.append(p)

                        answer = await session.call_tool(
                            "slow_progress", {"seconds": 3, "steps": STEPS}, on_progress=on_progress
                        )
                        outcome["first"] = text(answer)

                    async with anyio.create_task_group() as tg:
                        tg.start_soon(call)
                        while len(progress) < 3:
                            await anyio.sleep(0.05)
                        first.signal(how)
                        await anyio.to_thread.run_sync(first.wait, scaled(40))
                        restarted = await anyio.to_thread.run_sync(second.start)
                        proxy.backend_ports = [restarted.port]
                    listed = await session.request("tools/list")
                    assert any(tool["name"] == "slow_progress" for tool in listed["tools"])
                    outcome["then"] = text(
                        await session.call_tool("slow_progress", {"seconds": 0.1, "steps": 2})
                    )
    finally:
        for server in (first, second):
            server.kill()
    print(f"\nsqlite {how.name}: {outcome}, progress {progress}")
    assert outcome == {"first": f"done {STEPS}", "then": "done 2"}, outcome
    assert progress[-STEPS:] == [float(n) for n in range(1, STEPS + 1)], progress
