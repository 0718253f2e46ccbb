"""A real Tasks client other than ours: the TypeScript ``@modelcontextprotocol/ext-tasks`` package.

``tests/ts_tasks_client/client.mjs`` connects with ``@modelcontextprotocol/client`` 2.x
(``versionNegotiation: auto``: the server answers ``server/discover``, so 2026-07-28) and
wraps it in ext-tasks' ``createTaskSessionFromClient`` (exact versions pinned in
``tests/ts_tasks_client/package.json`` and its lock). Against the stock ``MCPServer`` tasks
app (its tools know nothing of tasks) wrapped with ``resumable(app, tasks=True)`` and
``task_after_s=0``, it

1. calls ``slow``, gets a ``CreateTaskResult`` and follows it with ``tasks/get`` to its result;
2. calls ``confirm``, whose task turns ``input_required`` with an ``elicitation/create``
   (the app's ``InputRequiredResult``); the client's elicitation handler answers it and
   ext-tasks sends the answer with ``tasks/update``; the task completes with the app's result;
3. calls ``slow`` for 30 s and cancels it (``tasks/cancel``): the tool stops on the server.

It prints one JSON summary line: every JSON-RPC message it POSTed (method, ``Mcp-Method`` /
``Mcp-Name``), what its raw dispatch got back, the statuses ext-tasks reported, the
``tasks/update`` params, the results.

ext-tasks sends its 2026-07-28 task traffic through a host-supplied ``rawDispatch`` (the
SDK's result codecs reject ``resultType: "task"``); the script's is a plain one-POST-per-request
coordinator with the standard headers. The SDK itself does ``server/discover`` and ``tools/list``.

The npm packages are installed into ``tests/ts_tasks_client/node_modules`` with ``npm ci`` the
first time. Without a Node >= 20 (the system one, else the Node 22 the conformance harness
installs into ``.cache/conformance``) or npm the tests skip -- unless ``CI=true``, where they fail.

Run only these:  pytest tests/test_ts_tasks_client.py
Debug by hand:   node tests/ts_tasks_client/client.mjs http://127.0.0.1:PORT/mcp --trace trace.jsonl
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mcp_resume_asgi import Policy, resumable
from tests.apps import tasks_app
from tests.support.npm import NpmPeer
from tests.support.server import load_app, serve_in_thread

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # the first run includes `npm ci`

TS_DIR = Path(__file__).resolve().parent / "ts_tasks_client"
CLIENT_SCRIPT = TS_DIR / "client.mjs"
PACKAGES = ("@modelcontextprotocol/client", "@modelcontextprotocol/ext-tasks")
PEER = NpmPeer(TS_DIR, PACKAGES, min_node_major=20)  # @modelcontextprotocol/client 2.x "engines"
APP = "tests.apps.tasks_app:create_app"
POLICY = Policy(retry_ms=None, task_after_s=0, task_ttl_s=60, task_poll_interval_ms=50)
CLIENT_TIMEOUT_S = 60.0
MODERN = "2026-07-28"
CANCEL_TAG = "ts-tasks-cancel"


@dataclass(frozen=True)
class TsTasksClient:
    node: str
    versions: dict[str, str]


@pytest.fixture(scope="module")
def ts_tasks_client() -> TsTasksClient:
    node, _ = PEER.prepare()
    return TsTasksClient(node, PEER.pinned_versions())


@dataclass
class Run:
    summary: dict[str, Any]
    returncode: int
    stderr: str
    trace: Path
    elapsed_s: float
    server_cancelled: list[str]

    def explain(self) -> str:
        lines = self.trace.read_text().splitlines() if self.trace.exists() else []
        return (
            f"exit {self.returncode}; summary: {json.dumps(self.summary, indent=1)}\n"
            f"stderr:\n{self.stderr[-4000:]}\n"
            f"raw exchange ({self.trace}, last 60 of {len(lines)} records):\n" + "\n".join(lines[-60:])
        )

    def sent(self, method: str) -> list[dict[str, Any]]:
        return [w for w in self.summary["wire"] if w["method"] == method]

    def answers(self, method: str) -> list[dict[str, Any]]:
        return [a for a in self.summary["rawAnswers"] if a["method"] == method]


def _run_client(client: TsTasksClient, url: str, trace: Path) -> tuple[dict[str, Any], int, str, float]:
    return PEER.run_script(client.node, CLIENT_SCRIPT, [url, "--trace", str(trace)], trace, CLIENT_TIMEOUT_S)


@pytest.fixture(scope="module")
def run(ts_tasks_client: TsTasksClient, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """One run of the script (three calls) against the wrapped tasks app, shared by the tests."""
    trace = tmp_path_factory.mktemp("ts_tasks") / "trace.jsonl"
    tasks_app.SEEN.cancelled.clear()
    with serve_in_thread(resumable(load_app(APP), policy=POLICY, tasks=True)) as info:
        summary, returncode, stderr, elapsed = _run_client(ts_tasks_client, info.mcp_url, trace)
        deadline = time.monotonic() + 5  # the cancelled tool's cancellation lands a moment later
        while CANCEL_TAG not in tasks_app.SEEN.cancelled and time.monotonic() < deadline:
            time.sleep(0.05)
    result = Run(summary, returncode, stderr, trace, elapsed, list(tasks_app.SEEN.cancelled))
    s = result.summary
    print(
        f"TS client {s['sdkVersion']} + ext-tasks {s['extTasksVersion']} (node {s['node']}): "
        f"protocol {s['protocolVersion']}, client {result.elapsed_s:.2f}s, "
        f"{len(s['wire'])} requests: {json.dumps(_method_counts(s))}"
    )
    yield result


def _method_counts(summary: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for w in summary["wire"]:
        counts[w["method"]] = counts.get(w["method"], 0) + 1
    return counts


def test_the_ts_client_negotiates_2026_07_28_and_sees_the_tasks_extension(
    run: Run, ts_tasks_client: TsTasksClient
) -> None:
    s = run.summary
    assert run.returncode == 0 and s["ok"] and s["error"] is None, run.explain()
    assert s["sdkVersion"] == ts_tasks_client.versions["@modelcontextprotocol/client"]
    assert s["extTasksVersion"] == ts_tasks_client.versions["@modelcontextprotocol/ext-tasks"]
    assert (s["protocolVersion"], s["era"]) == (MODERN, "modern"), run.explain()
    # The app advertises nothing; the middleware's server/discover answer carries the extension.
    assert s["serverTasksExtension"] == {}, run.explain()
    assert s["sessionCapabilities"]["execution"] and s["sessionCapabilities"]["inputResponses"], run.explain()
    assert s["sessionCapabilities"]["cancellation"], run.explain()
    assert run.sent("server/discover") and not run.sent("initialize"), run.explain()
    # Every request was accepted at the HTTP level; task requests carry Mcp-Name = task id.
    assert all(w["status"] == 200 for w in s["wire"]), run.explain()
    for method in ("tasks/get", "tasks/update", "tasks/cancel"):
        for w in run.sent(method):
            assert w["mcpMethod"] == method and w["mcpName"], run.explain()
    task_ids = {c["taskId"] for c in s["calls"].values()}
    assert {w["mcpName"] for w in s["wire"] if w["method"].startswith("tasks/")} <= task_ids, run.explain()
    assert not s.get("backgroundErrors"), run.explain()


def test_a_slow_call_is_a_task_polled_with_tasks_get_to_its_result(run: Run) -> None:
    slow = run.summary["calls"]["slow"]
    assert slow["kind"] == "task" and slow["taskId"], run.explain()
    # The tools/call answer was a CreateTaskResult (resultType "task"), not a plain result.
    created = run.answers("tools/call")
    assert [(a["resultType"], a["taskStatus"]) for a in created] == [("task", "working")] * 3, run.explain()
    assert created[0]["taskId"] == slow["taskId"], run.explain()
    polls = [a for a in run.answers("tasks/get") if a["taskId"] == slow["taskId"]]
    assert len(polls) >= 2, run.explain()  # 0.6 s of work polled every 50 ms
    assert all(a["resultType"] == "complete" for a in polls), run.explain()
    assert [a["taskStatus"] for a in polls][-1] == "completed", run.explain()
    assert set(a["taskStatus"] for a in polls[:-1]) == {"working"}, run.explain()
    assert slow["statuses"] == ["working", "completed"], run.explain()
    assert (slow["outcome"], slow["text"], slow["isError"]) == ("completed", "slept ts-tasks", False)


def test_an_elicitation_is_answered_by_the_clients_handler_through_tasks_update(run: Run) -> None:
    s = run.summary
    confirm = s["calls"]["confirm"]
    assert confirm["kind"] == "task", run.explain()
    assert confirm["statuses"] == ["working", "input_required", "working", "completed"], run.explain()
    polls = [a for a in run.answers("tasks/get") if a["taskId"] == confirm["taskId"]]
    asking = [a for a in polls if a["taskStatus"] == "input_required"]
    assert asking, run.explain()
    (key,) = asking[0]["inputRequestKeys"]
    # The elicitation reached the client's handler once, by way of ext-tasks (a task's input).
    assert s["elicitations"] == [{"via": "ext-tasks", "message": "Delete ts.txt?"}], run.explain()
    # One tasks/update carried the handler's answer under the server's key; it was acknowledged.
    assert len(s["updates"]) == 1, run.explain()
    (update,) = s["updates"]
    assert update["taskId"] == confirm["taskId"]
    assert update["inputResponses"] == {key: {"action": "accept", "content": {"confirm": True}}}, (
        run.explain()
    )
    assert update["_meta"]["io.modelcontextprotocol/clientCapabilities"]["extensions"] == {
        "io.modelcontextprotocol/tasks": {}
    }
    assert [a.get("error") for a in run.answers("tasks/update")] == [None], run.explain()
    assert [a["resultType"] for a in run.answers("tasks/update")] == ["complete"], run.explain()
    # The app's answer to the re-issued call (inputResponses + requestState) is the task's result.
    assert (confirm["outcome"], confirm["text"], confirm["isError"]) == ("completed", "deleted ts.txt", False)
    # The client sent each of its three calls once: the answer went by tasks/update, with no
    # client-side MRTR retry of tools/call (the middleware re-issued the call to the app itself).
    assert len(run.sent("tools/call")) == 3 and all(w["via"] == "rawDispatch" for w in run.sent("tools/call"))


def test_cancelling_the_task_sends_tasks_cancel_and_stops_the_tool(run: Run) -> None:
    cancelled = run.summary["calls"]["cancelled"]
    assert cancelled["kind"] == "task" and cancelled["cancelAcknowledged"], run.explain()
    assert cancelled["outcome"] == "cancelled", run.explain()
    sent = run.sent("tasks/cancel")
    assert [w["mcpName"] for w in sent] == [cancelled["taskId"]], run.explain()
    assert [a["resultType"] for a in run.answers("tasks/cancel")] == ["complete"], run.explain()
    assert CANCEL_TAG in run.server_cancelled, (run.server_cancelled, run.explain())
