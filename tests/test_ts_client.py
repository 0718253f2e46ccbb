"""A second real client: the official TypeScript MCP SDK against a wrapped stock ``mcp`` server.

``tests/ts_client/client.mjs`` (``@modelcontextprotocol/sdk``, the exact version pinned in
``tests/ts_client/package.json`` and its lock) connects with ``StreamableHTTPClientTransport``
and its stock reconnection behaviour (it honours ``retry:`` and resumes with ``GET /mcp`` +
``Last-Event-ID``), calls the tools and prints one JSON summary line.  The server is the
stock ``MCPServer`` app, which does nothing for resumability; every resume is the
middleware's doing.

The npm packages are installed into ``tests/ts_client/node_modules`` with ``npm ci`` the
first time (skipped while the installed tree matches ``package-lock.json``).  Without
``node``/``npm`` the tests skip -- unless ``CI=true``, where they fail instead.

Run only these:  pytest tests/test_ts_client.py
Debug by hand:   node tests/ts_client/client.mjs http://127.0.0.1:PORT/mcp --trace trace.jsonl
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_resume_asgi import Policy, resumable
from tests.support.npm import NpmPeer
from tests.support.server import load_app, serve_in_thread

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # the first run includes `npm ci`

TS_DIR = Path(__file__).resolve().parent / "ts_client"
CLIENT_SCRIPT = TS_DIR / "client.mjs"
SDK_PACKAGE = "@modelcontextprotocol/sdk"
APP = "tests.apps.mcpserver_app:create_app"
CLIENT_TIMEOUT_S = 60.0
PEER = NpmPeer(TS_DIR, (SDK_PACKAGE,), min_node_major=18)  # the SDK's "engines"


@dataclass(frozen=True)
class TsClient:
    node: str
    sdk_version: str
    npm_install_s: float | None  # None: already installed


@pytest.fixture(scope="module")
def ts_client() -> TsClient:
    node, install_s = PEER.prepare()
    return TsClient(node, PEER.pinned_versions()[SDK_PACKAGE], install_s)


class RequestLog:
    """An outer ASGI layer recording every HTTP request that reaches the middleware."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Last-Event-ID)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            last = headers.get(b"last-event-id")
            self.requests.append((scope["method"], scope["path"], last.decode("latin-1") if last else None))
        await self.app(scope, receive, send)

    def resumes(self) -> list[tuple[str, str]]:
        """``(path, Last-Event-ID)`` of every GET that carried a Last-Event-ID."""
        return [(path, last) for method, path, last in self.requests if method == "GET" and last]


@dataclass
class Run:
    summary: dict[str, Any]
    returncode: int
    stderr: str
    trace: Path
    elapsed_s: float
    problems: list[str] = field(default_factory=list)

    def explain(self) -> str:
        """Everything needed to see what the TS client expected and what it got."""
        lines = self.trace.read_text().splitlines() if self.trace.exists() else []
        return (
            f"exit {self.returncode}; summary: {json.dumps(self.summary, indent=1)}\n"
            f"stderr:\n{self.stderr[-4000:]}\n"
            f"raw HTTP exchange ({self.trace}, last 80 of {len(lines)} records):\n" + "\n".join(lines[-80:])
        )


def run_client(client: TsClient, url: str, trace: Path, *args: str) -> Run:
    summary, returncode, stderr, elapsed = PEER.run_script(
        client.node, CLIENT_SCRIPT, [url, "--trace", str(trace), *args], trace, CLIENT_TIMEOUT_S
    )
    return Run(summary, returncode, stderr, trace, elapsed)


def _assert_common(run: Run, client: TsClient, log: RequestLog) -> None:
    s = run.summary
    assert run.returncode == 0 and s["ok"], run.explain()
    assert s["sdkVersion"] == client.sdk_version
    # The TS SDK 1.x offers 2025-11-25 (its LATEST_PROTOCOL_VERSION), so it gets priming events.
    assert s["protocolVersion"] == "2025-11-25", run.explain()
    assert s["stats"]["primingEvents"] >= 1, run.explain()
    assert s["stats"]["retryValues"] == [50], run.explain()
    # Every resume is a plain GET on the endpoint with Last-Event-ID: the TS client ignores Link.
    assert all(path == "/mcp" for path, _ in log.resumes()), log.requests
    assert not [r for r in log.requests if "/streams/" in r[1]], log.requests
    # Every resume the client sent reached the server (none was refused or lost).
    assert s["stats"]["statuses"].get("GET resume 200", 0) == s["reconnections"]["total"], run.explain()


def test_ts_sdk_client_gets_every_progress_notification_across_at_will_disconnects(
    ts_client: TsClient, tmp_path: Path
) -> None:
    policy = Policy(retry_ms=50, max_connection_s=0.3)
    log = RequestLog(resumable(load_app(APP), policy=policy))
    with serve_in_thread(log) as info:
        run = run_client(ts_client, info.mcp_url, tmp_path / "trace.jsonl", "--scenario", "progress")
    s = run.summary
    print(
        f"TS SDK {s['sdkVersion']} (node {s['node']}): protocol {s['protocolVersion']}, "
        f"client {run.elapsed_s:.2f}s, reconnections {json.dumps(s['reconnections'])}, "
        f"server saw {len(log.resumes())} GET resumes"
    )
    _assert_common(run, ts_client, log)
    assert s["result"] == "done 30", run.explain()
    assert s["progress"] == list(range(1, 31)), "lost, duplicated or reordered progress\n" + run.explain()
    assert s["progressMessages"] == [f"step {i}" for i in range(1, 31)], run.explain()
    assert s["progressTotals"] == [30] * 30, run.explain()
    # 3 s of work, a connection lasts 0.3 s: the tool call's stream must have been resumed often,
    # and the server must have seen exactly those Last-Event-IDs on GET /mcp.
    tool_resumes = s["resumeIds"]["tools/call#1"]
    assert len(tool_resumes) >= 5, run.explain()
    server_ids = {last for _, last in log.resumes()}
    assert set(tool_resumes) <= server_ids, (tool_resumes, log.resumes())
    # The at-will closes are graceful (retry: then end of stream), never a broken connection.
    assert s["stats"]["streamEnds"]["errored"] == 0, run.explain()


def test_ts_sdk_client_answers_an_elicitation_across_the_input_request_disconnect(
    ts_client: TsClient, tmp_path: Path
) -> None:
    policy = Policy(retry_ms=50, disconnect_on_input_request=True)
    log = RequestLog(resumable(load_app(APP), policy=policy))
    with serve_in_thread(log) as info:
        run = run_client(
            ts_client, info.mcp_url, tmp_path / "trace.jsonl", "--scenario", "elicit", "--name", "carol"
        )
    s = run.summary
    print(f"elicitation: client {run.elapsed_s:.2f}s, reconnections {json.dumps(s['reconnections'])}")
    _assert_common(run, ts_client, log)
    assert s["elicitResult"] == "hello carol", run.explain()
    assert s["elicitations"] == 1, run.explain()
    # The middleware closed the tool call's stream right after elicitation/create; the client
    # answered with a POST and resumed the stream with GET /mcp + Last-Event-ID for the result.
    tool_resumes = s["resumeIds"]["tools/call#1"]
    assert len(tool_resumes) >= 1, run.explain()
    assert set(tool_resumes) <= {last for _, last in log.resumes()}, (tool_resumes, log.resumes())


def test_ts_sdk_client_stops_resuming_a_stream_that_ended_in_an_error(
    ts_client: TsClient, tmp_path: Path
) -> None:
    """SDK 1.x treats only a *result* as the end of a stream and resumes after an error;
    the middleware answers such a resume with 204, so the client stops instead of polling."""
    policy = Policy(retry_ms=50, max_connection_s=0.3)
    log = RequestLog(resumable(load_app(APP), policy=policy))
    with serve_in_thread(log) as info:
        run = run_client(
            ts_client,
            info.mcp_url,
            tmp_path / "trace.jsonl",
            "--scenario",
            "rpc-error",
            "--linger-ms",
            "1000",
        )
    by_stream = run.summary["reconnections"]["byStream"]
    print(f"rpc-error: reconnections {json.dumps(run.summary['reconnections'])}")
    assert by_stream.get("prompts/get#1", 0) <= 1, run.explain()
