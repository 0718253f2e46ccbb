"""The TypeScript SDK client's sessions outlive their node, as the Python clients' do
(`test_session_adoption.py`).

Two uvicorn nodes on one Redis behind the round-robin proxy, node A with
`--timeout-graceful-shutdown 2`. One node process (`tests/ts_client/sessions.mjs`, the
`@modelcontextprotocol/sdk` pinned in `tests/ts_client/package.json`) runs ten sessions, each
with its own client and transport (stock reconnection options), each request on a connection
of its own. Each session makes a call streaming progress; once every call streams, A gets
SIGTERM and the balancer drops it. Then each session lists the tools, makes a second call, and
asks the server for a log message on the session's GET stream. What must hold: 10/10 first
calls complete with every progress event once and in order, 10/10 sessions go on, and each
session's GET stream brings its log message (it carried on from the node that took the
session over).

The npm packages are installed as for `test_ts_client.py` (`tests/support/npm.py`): skipped
without node/npm unless `CI=true`.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process

from tests.support.cluster import cluster, pid_of, port_of, prefix
from tests.support.npm import NpmPeer
from tests.support.proxy import CutProxy
from tests.support.stores import require_redis
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300), pytest.mark.slow]  # with `npm ci`

__all__ = ["prefix"]  # the fixture, used by name

TS_DIR = Path(__file__).resolve().parent / "ts_client"
SCRIPT = TS_DIR / "sessions.mjs"
PEER = NpmPeer(TS_DIR, ("@modelcontextprotocol/sdk",), min_node_major=18)
SESSIONS = 10
STEPS = 20
SECONDS = 3.0


async def _line(process: Process, buffer: bytearray) -> str:
    """The script's next line on stdout ("" at its end)."""
    assert process.stdout is not None
    while b"\n" not in buffer:
        try:
            buffer.extend(await process.stdout.receive())
        except anyio.EndOfStream:
            line = buffer.decode()
            buffer.clear()
            return line
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line.decode()


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["stopped", "killed"])
async def test_ts_sdk_sessions_outlive_a_node_that_leaves_mid_call(
    prefix: str, tmp_path: Path, how: signal.Signals
) -> None:
    """SIGTERM: the node drains and its calls finish there; SIGKILL (`rerun_on_loss`): its calls
    are run again on the other node, whose progress each client then sees from 1."""
    require_redis()
    policy: dict[str, Any] = {"retry_ms": 50}
    if how is signal.SIGKILL:
        policy["rerun_on_loss"] = True
    node, _ = await anyio.to_thread.run_sync(PEER.prepare)
    summary: dict[str, Any] = {}
    lines: list[str] = []
    async with (
        cluster(
            2,
            prefix,
            policy=policy,
            options={"node_timeout_s": 2.0},
            graceful_shutdown=2.0,
            log_dir=tmp_path,
        ) as (a, b),
        CutProxy([port_of(a), port_of(b)]) as proxy,
    ):
        command = [node, str(SCRIPT), proxy.mcp_url, "--sessions", str(SESSIONS)]
        command += ["--seconds", str(SECONDS), "--steps", str(STEPS)]
        with (tmp_path / "stderr.txt").open("wb") as stderr:
            process = await anyio.open_process(command, cwd=TS_DIR, stderr=stderr)
        async with process:
            assert process.stdin is not None
            buffer = bytearray()
            with anyio.fail_after(scaled(120)):
                line = await _line(process, buffer)
                lines.append(line)
                if line == "STREAMING":
                    await anyio.sleep(0.5)
                    proxy.backend_ports = [port_of(b)]  # A is not ready any more: the balancer drops it
                    a.signal(how)
                    await process.stdin.send(b"GO\n")
                    line = await _line(process, buffer)
                    lines.append(line)
                await process.wait()
            if line.startswith("{"):
                summary = json.loads(line)
    assert summary, (lines, (tmp_path / "stderr.txt").read_text()[-4000:])
    sessions = summary["sessions"]
    on_a = [s for s in sessions if s["node"] == pid_of(a)]
    go_ms = summary["goAtMs"] or 0
    answered = [(s["secondAtMs"] - go_ms) / 1000 for s in sessions if s["secondAtMs"] is not None]
    failed = sum(
        1 for s in sessions for v in (s["first"], s["second"]) if v not in (f"done {STEPS}", "done 2")
    )
    logs = await anyio.to_thread.run_sync(lambda: [log.read_text() for log in tmp_path.glob("node-*.log")])
    replays = sorted(float(t) for log in logs for t in re.findall(r"replayed in ([0-9.]+) s", log))
    print(
        f"\nTS SDK {how.name}: {len(on_a)} of {SESSIONS} sessions opened on A; calls failed: {failed}; "
        f"second call answered {min(answered, default=0):.2f}-{max(answered, default=0):.2f}s after the signal; "
        f"{len(replays)} sessions taken over, replayed in "
        f"{replays[0] if replays else 0:.3f}-{replays[-1] if replays else 0:.3f}s"
    )
    assert on_a, "the round robin put no session on A"
    for s in sessions:
        assert s["first"] == f"done {STEPS}", s
        if how is signal.SIGTERM:
            assert s["progress"] == list(range(1, STEPS + 1)), s
        else:  # the first run's progress, then the re-run's from 1: each in order
            assert s["progress"][-STEPS:] == list(range(1, STEPS + 1)), s
        assert s["tools"] and "slow_progress" in s["tools"], s
        assert s["second"] == "done 2", s
        assert s["logs"] == ["tick 1"], s  # the session's GET stream carried on from its adopter
        assert not s["errors"], s
