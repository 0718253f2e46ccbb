"""The REST face's MCP client (`rest/wire.py`) against a wrapped stock `MCPServer`, in process:
the era it picks, single exchanges on 2026-07-28, a session it opens on a 2025-only app
(and opens again when the app forgets it), a call that becomes a task and runs on in the
background after its answer."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from mcp_resume_asgi import Policy, resumable
from mcp_resume_asgi.rest.wire import LEGACY, MODERN, Wire
from tests.apps.rest_app import RUNS, create_app, legacy

pytestmark = pytest.mark.anyio

SCOPE: dict[str, Any] = {
    "type": "http",
    "http_version": "1.1",
    "method": "GET",
    "scheme": "http",
    "path": "/mcp/tools",
    "raw_path": b"/mcp/tools",
    "query_string": b"",
    "root_path": "",
    "headers": [(b"host", b"127.0.0.1:8000")],
    "client": ("127.0.0.1", 1),
    "server": ("127.0.0.1", 8000),
}


@contextlib.asynccontextmanager
async def wire_to(old: bool, policy: Policy | None = None) -> AsyncIterator[Wire]:
    inner = create_app()
    policy = policy or Policy(task_after_s=0)
    app = resumable(legacy(inner) if old else inner, policy=policy, tasks=True)
    async with inner.router.lifespan_context(inner):
        yield Wire(app, path="/mcp")


@pytest.mark.parametrize(("old", "era"), [(False, MODERN), (True, LEGACY)])
async def test_the_wire_picks_the_apps_era_and_lists_its_tools(old: bool, era: str) -> None:
    async with wire_to(old) as wire:
        answer = await wire.call(SCOPE, "tools/list", {})
        assert wire.era == era and answer.status == 200
        assert answer.result is not None
        assert {t["name"] for t in answer.result["tools"]} == {
            "echo",
            "fail",
            "refuse",
            "slow",
            "confirm",
            "regional",
        }


@pytest.mark.parametrize("old", [False, True])
async def test_a_call_becomes_a_task_that_runs_on_after_its_answer(old: bool) -> None:
    tag = f"wire-{old}"
    async with wire_to(old) as wire, anyio.create_task_group() as background:
        params = {"name": "slow", "arguments": {"steps": 2, "tag": tag, "step_s": 0.2}}
        with anyio.fail_after(5):
            answer = await wire.call(SCOPE, "tools/call", params, background=background)
        assert answer.result is not None and answer.result["resultType"] == "task", answer
        task_id = answer.result["taskId"]
        with anyio.fail_after(10):
            while True:
                got = await wire.call(SCOPE, "tasks/get", {"taskId": task_id})
                assert got.result is not None, got
                if got.result["status"] == "completed":
                    break
                await anyio.sleep(0.05)
        assert got.result["result"]["content"][0]["text"] == f"done {tag}" and RUNS[tag] == 1


async def test_a_forgotten_session_is_opened_again() -> None:
    async with wire_to(True) as wire:
        assert (await wire.call(SCOPE, "tools/list", {})).status == 200
        (key,) = list(wire._sessions)
        wire._sessions[key] = "no-such-session"
        answer = await wire.call(SCOPE, "tools/list", {})
        assert answer.status == 200 and answer.result is not None
        assert wire._sessions[key] != "no-such-session"


async def test_the_apps_errors_come_back_as_problems() -> None:
    async with wire_to(False, Policy()) as wire:  # (no tasks: the app's own answer)
        answer = await wire.call(SCOPE, "tools/call", {"name": "refuse", "arguments": {}})
        assert answer.result is None and answer.error == {"code": -32042, "message": "the server refused it"}
        failure = answer.problem("tool 'refuse'")
        assert failure is not None and failure.status == 400 and failure.extra["error"] == answer.error
        missing = await wire.call(SCOPE, "no/such/method", {})
        assert (problem := missing.problem("x")) is not None and problem.status == 404, missing
