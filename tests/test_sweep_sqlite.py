"""A lone node on `SQLiteStore`, killed mid-call and started again: its sweep ends what its earlier
life left running, though no client comes back for it.

A real uvicorn process (`tests.apps.wrapped_app`, no `rerun_on_loss`) runs a 2025 call whose
client leaves after three events; the process is killed (SIGKILL) and a new one started on the
same file: a new node of the same store, to which the earlier life is a node whose heartbeat
lapsed. Its sweep (at startup, then every `node_timeout_s`) ends the call - its log says the
sweep found it, before anyone asks - and a resume afterwards gets the error at once.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from mcp_resume_asgi.core.orphans import ORPHAN_TEXT
from tests.support.raw import RawSession
from tests.support.server import HOST, SubprocessServer
from tests.support.timing import scaled
from tests.test_sweep_ends import ended_by_sweep

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(120)]

APP = "tests.apps.wrapped_app:create_app"


def node(path: Path) -> SubprocessServer:
    options: dict[str, Any] = {
        "store": f"sqlite://{path}",
        "node_timeout_s": 2.0,
        "policy": {"retry_ms": 50},
    }
    return SubprocessServer(APP, factory_kwargs=options)


async def test_a_restarted_node_on_sqlite_ends_its_earlier_lifes_call(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "store.db"
    first, second = node(path), node(path)
    err = ""
    try:
        info = await anyio.to_thread.run_sync(first.start)
        async with httpx.AsyncClient(base_url=f"http://{HOST}:{info.port}", timeout=scaled(30)) as client:
            caller = RawSession(client)
            assert (await caller.initialize()).status == 200
            call = caller.tool_call("slow_progress", {"seconds": 60, "steps": 600}, progress=True)
            started = await caller.exchange("POST", "/mcp", call, stop_after=3)
            assert started.status == 200 and started.last_id is not None
        await anyio.sleep(0.5)  # (a few more events recorded, which nobody has seen)
        first.signal(signal.SIGKILL)
        await anyio.to_thread.run_sync(first.wait, scaled(10))
        restarted = await anyio.to_thread.run_sync(second.start)
        with anyio.fail_after(scaled(30)):
            while not ended_by_sweep(err):
                await anyio.sleep(0.1)
                err += capfd.readouterr().err
        async with httpx.AsyncClient(
            base_url=f"http://{HOST}:{restarted.port}", timeout=scaled(30)
        ) as client:
            resumer = RawSession(client)
            resumer.session_id = caller.session_id
            with anyio.fail_after(scaled(10)):
                resumed = await resumer.exchange(
                    "GET", "/mcp", None, headers=resumer.headers(last_event_id=started.last_id)
                )
    finally:
        for server in (first, second):
            server.kill()
    err += capfd.readouterr().err
    print(f"\nsqlite SIGKILL, restarted: resumed with {len(resumed.messages())} message(s)")
    assert len(ended_by_sweep(err)) == 1, err
    assert resumed.status == 200, resumed.raw
    progress = [m for m in resumed.messages() if m.get("method") == "notifications/progress"]
    assert progress, "what the first life recorded after the client left comes first"
    assert resumed.messages()[-1] == {
        "jsonrpc": "2.0",
        "id": call["id"],
        "error": {"code": -32000, "message": ORPHAN_TEXT},
    }, resumed.messages()
