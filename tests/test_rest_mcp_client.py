"""The REST face's MCP client (`rest/mcp_client.py`) against a wrapped stock `MCPServer`, in process:
the era it picks, single exchanges on 2026-07-28, a session it opens on a 2025-only app
(and opens again when the app forgets it), a call that becomes a task and runs on in the
background after its answer."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from mcp_resume_asgi import Policy, resumable
from mcp_resume_asgi.rest.mcp_client import LEGACY, MODERN, Wire
from tests.apps.rest_app import RUNS, create_app, legacy
from tests.support.timing import scaled

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
            "confirm_twice",
            "regional",
        }


@pytest.mark.parametrize("old", [False, True])
@pytest.mark.slow
async def test_a_call_becomes_a_task_that_runs_on_after_its_answer(old: bool) -> None:
    tag = f"wire-{old}"
    async with wire_to(old) as wire, anyio.create_task_group() as background:
        params = {"name": "slow", "arguments": {"steps": 2, "tag": tag, "step_s": 0.2}}
        with anyio.fail_after(scaled(5)):
            answer = await wire.call(SCOPE, "tools/call", params, background=background)
        assert answer.result is not None and answer.result["resultType"] == "task", answer
        task_id = answer.result["taskId"]
        with anyio.fail_after(scaled(10)):
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


async def _asgi(app: Any, method: str, path: str, body: bytes = b"", **headers: str) -> tuple[int, Any]:
    """One request to `app` in process: its status and JSON body."""
    scope = {**SCOPE, "method": method, "path": path, "raw_path": path.encode()}
    scope["headers"] = [
        *SCOPE["headers"],
        *((k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()),
    ]
    status, chunks, done, sent = 0, [], anyio.Event(), False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        else:
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                done.set()

    async with anyio.create_task_group() as tg:  # (the call's work may outlive its answer)
        tg.start_soon(app, scope, receive, send)
        await done.wait()
    return status, json.loads(b"".join(chunks))


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_the_face_runs_on_trio(anyio_backend: str) -> None:
    """uvicorn runs only on asyncio: in process, the face on trio, a call settled within its PUT."""
    inner = create_app()
    app = resumable(inner, policy=Policy(task_poll_interval_ms=100), rest=True)
    async with inner.router.lifespan_context(inner):
        status, fast = await _asgi(
            app, "PUT", "/mcp/tools/echo/calls/t1", b'{"text": "trio"}', idempotency_key="k"
        )
        assert status == 201 and fast["status"] == "success", fast
        body = b'{"steps": 2, "tag": "trio", "step_s": 0.1}'
        status, slow = await _asgi(app, "PUT", "/mcp/tools/slow/calls/t2", body, idempotency_key="k")
        assert status == 201 and slow["status"] == "success", "it ended within the PUT's wait"
        status, again = await _asgi(app, "GET", "/mcp/tools/slow/calls/t2")
        assert status == 200 and again == slow
