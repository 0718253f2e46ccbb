"""A draining node hands its 2026-07-28 calls over through MRTR (`core/mrtr.py`, `engine/mrtr.py`).

Two uvicorn nodes on one Redis behind the round-robin proxy (`tests.support.cluster`), node A
with `--timeout-graceful-shutdown 2`. Ten stock `mcp` `Client`s in their default mode (2026-07-28:
a call's close is its cancel, and its stream cannot be resumed) each make a call that streams
progress for longer than A's graceful timeout; once every call streams, A gets SIGTERM and the
balancer drops it. A answers each of its calls `input_required` with a sealed `requestState`,
the client retries at once (a new id, a new progress token), and B serves the retry the rest of
the call's recorded stream, which A's app goes on writing. What must hold: 10/10 results, every
progress event once and in order as each client's progress callback saw it, and a second call
that succeeds. And a hostile retry: a forged state, or another caller's, is a JSON-RPC error and
the app never runs.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mcp_resume_asgi.core import mrtr
from tests.support.cluster import cluster, pid_of, port_of, prefix, steer
from tests.support.exchanges import Recorder
from tests.support.mcp_client import result_text
from tests.support.proxy import CutProxy
from tests.support.stores import require_redis
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(150), pytest.mark.slow]

__all__ = ["prefix"]  # the fixture, used by name

CLIENTS = 10
STEPS = 20
SECONDS = 3.0
GRACEFUL_S = 2.0
MODERN = "2026-07-28"
HANDED_OVER = r"stream (\S+): handed over at \d+ \(input_required\)"
"""What a node logs (DEBUG) of each connection it hands over (`engine/mrtr.py`)."""


async def _logs(folder: Path) -> str:
    return await anyio.to_thread.run_sync(lambda: "\n".join(p.read_text() for p in folder.glob("node-*.log")))


async def test_a_draining_node_hands_its_2026_calls_over(prefix: str, tmp_path: Path) -> None:
    require_redis()
    recorder = Recorder()
    progress: dict[int, list[float]] = {i: [] for i in range(CLIENTS)}
    first: dict[int, str] = {}
    then: dict[int, str] = {}
    versions: dict[int, str] = {}
    signalled = anyio.Event()
    opened = 0
    all_opened = anyio.Event()

    async with (
        cluster(
            2,
            prefix,
            policy={"retry_ms": 50},
            options={"node_timeout_s": 2.0},
            graceful_shutdown=GRACEFUL_S,
            log_dir=tmp_path,
        ) as (a, b),
        CutProxy([port_of(a), port_of(b)]) as proxy,
    ):

        async def one_client(i: int) -> None:
            nonlocal opened

            async def on_progress(p: float, total: float | None = None, message: str | None = None) -> None:
                progress[i].append(p)

            try:
                async with (
                    recorder.httpx2_client() as http,
                    Client(streamable_http_client(proxy.mcp_url, http_client=http)) as client,
                ):
                    versions[i] = client.protocol_version
                    await client.list_tools()
                    opened += 1
                    if opened == CLIENTS:
                        all_opened.set()
                    await all_opened.wait()
                    args = {"seconds": SECONDS, "steps": STEPS}
                    try:
                        result = await client.call_tool(
                            "slow_progress",
                            args,
                            progress_callback=on_progress,
                            read_timeout_seconds=scaled(60),
                        )
                        first[i] = result_text(result)
                    except MCPError as exc:
                        first[i] = f"error: {exc}"
                    await signalled.wait()
                    try:
                        result = await client.call_tool(
                            "slow_progress", {"seconds": 0.1, "steps": 2}, read_timeout_seconds=scaled(30)
                        )
                        then[i] = result_text(result)
                    except MCPError as exc:
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
                a.signal(signal.SIGTERM)
                signalled.set()
    logs = await _logs(tmp_path)
    handed_over = len(set(re.findall(HANDED_OVER, logs)))
    calls = recorder.where(method="POST", rpc="tools/call")
    on_a = [e for e in calls if e.node == pid_of(a)]
    print(
        f"\n{len(calls)} tools/call POSTs ({len(on_a)} answered by A); "
        f"{handed_over} calls handed over through MRTR"
    )
    assert versions == {i: MODERN for i in range(CLIENTS)}, versions
    assert first == {i: f"done {STEPS}" for i in range(CLIENTS)}, first
    for i in range(CLIENTS):
        assert progress[i] == [float(n) for n in range(1, STEPS + 1)], (i, progress[i])
    assert then == {i: "done 2" for i in range(CLIENTS)}, then
    assert handed_over > 0, "no call ran on A"


def _call(request_id: int, token: str | None = None, *, seconds: float = SECONDS) -> dict[str, Any]:
    """A 2026-07-28 `tools/call` of the auth app's `whoami`, as a client sends it."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "hostile", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
        "progressToken": f"p{request_id}",
    }
    params: dict[str, Any] = {
        "name": "whoami",
        "arguments": {"seconds": seconds, "steps": STEPS},
        "_meta": meta,
    }
    if token is not None:
        params["requestState"] = token
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "mcp-protocol-version": MODERN,
    "mcp-method": "tools/call",
    "mcp-name": "whoami",
}


def _messages(body: str) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an SSE answer, or the one of a JSON answer."""
    if body.lstrip().startswith("{"):
        return [json.loads(body)]
    return [
        json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:") and line[5:].strip()
    ]


async def test_a_hostile_retry_never_runs_the_app(prefix: str, tmp_path: Path) -> None:
    """A call handed over by A's drain; its `requestState` tampered with, or presented on other
    params, or as another caller (the auth app: alice's state, bob's token), is refused with a
    JSON-RPC error and no event of the call; the genuine one, as alice, gets the rest of the call;
    a `requestState` that is not ours goes to the app, which judges it (this one refuses it)."""
    require_redis()
    alice = {"authorization": "Bearer token-alice"}
    bob = {"authorization": "Bearer token-bob"}
    async with (
        cluster(
            2,
            prefix,
            policy={"retry_ms": 50},
            options={"node_timeout_s": 2.0},
            graceful_shutdown=GRACEFUL_S,
            log_dir=tmp_path,
            app="auth",
        ) as (a, b),
        CutProxy([port_of(a), port_of(b)]) as proxy,
        # (a connection per request: the proxy balances connections)
        httpx.AsyncClient(timeout=scaled(30), limits=httpx.Limits(max_keepalive_connections=0)) as http,
    ):
        await steer(proxy, port_of(a))
        events: list[dict[str, Any]] = []
        async with http.stream("POST", proxy.mcp_url, json=_call(1), headers={**HEADERS, **alice}) as answer:
            assert answer.status_code == 200, await answer.aread()
            buffer = ""
            async for chunk in answer.aiter_text():
                buffer += chunk.replace("\r\n", "\n")
                while "\n\n" in buffer:
                    frame, buffer = buffer.split("\n\n", 1)
                    data = "".join(
                        line[5:].strip() for line in frame.splitlines() if line.startswith("data:")
                    )
                    if data:
                        events.append(json.loads(data))
                        if len(events) == 2:
                            proxy.backend_ports = [port_of(b)]
                            a.signal(signal.SIGTERM)
        *streamed, last = events
        assert all(e.get("method") == "notifications/progress" for e in streamed), events
        assert last["id"] == 1 and last["result"]["resultType"] == "input_required", last
        assert "inputRequests" not in last["result"]
        state = last["result"]["requestState"]
        assert state.startswith(mrtr.STATE_PREFIX)

        async def retry(body: dict[str, Any], who: dict[str, str]) -> tuple[int, list[dict[str, Any]]]:
            reply = await http.post(proxy.mcp_url, json=body, headers={**HEADERS, **who})
            return reply.status_code, _messages(reply.text)

        forged = state[:-3] + ("AAA" if not state.endswith("AAA") else "BBB")
        for body, who, says in [
            (_call(2, forged), alice, "invalid requestState"),
            (_call(3, state, seconds=SECONDS + 1), alice, "another request"),
            (_call(4, state), bob, "not issued to this caller"),
        ]:
            status, messages = await retry(body, who)
            assert len(messages) == 1, messages
            assert messages[0]["id"] == body["id"] and messages[0]["error"]["code"] == -32602, messages
            assert says in messages[0]["error"]["message"], messages
            assert status == 400
        status, messages = await retry(_call(5, state), alice)
        assert status == 200
        *rest, final = messages
        seen = [e["params"]["progress"] for e in streamed] + [e["params"]["progress"] for e in rest]
        assert seen == [float(n) for n in range(1, STEPS + 1)], seen
        assert all(e["params"]["progressToken"] == "p5" for e in rest), rest
        assert final["id"] == 5 and final["result"]["content"][0]["text"] == "the secret of alice", final
        # Not ours: the app's own to judge (this one refuses it, in its own words).
        status, messages = await retry(_call(6, "the-apps-own-state", seconds=0.1), alice)
        assert messages[-1]["id"] == 6, messages
        assert messages[-1]["error"].get("data") == {"reason": "invalid_request_state"}, messages
    logs = await _logs(tmp_path)
    assert len(set(re.findall(HANDED_OVER, logs))) == 1, "one call handed over, and only by A's drain"
