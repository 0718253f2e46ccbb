"""The client helper following tasks (SEP-2663) end to end, against a wrapped stock `MCPServer`
(tests/apps/tasks_app.py) under uvicorn: `ResumableSession` on a 2025-11-25 session (the
extension declared at `initialize`) and the stock SDK `Client` in auto mode, 2026-07-28 (declared
per request) with `sdk_tasks_extension()`. A slow tool becomes a task and the caller gets its
result; a failing job raises; cancelling the caller sends `tasks/cancel` and the tool stops;
connections cut while the task is polled change nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_resume_asgi import Policy, resumable
from mcp_resume_asgi.client import (
    McpError,
    ResumableSession,
    ResumableTransport,
    sdk_http_client,
    sdk_tasks_extension,
)
from tests.apps.tasks_app import SEEN, create_app
from tests.support.proxy import CutProxy
from tests.support.server import serve
from tests.support.timing import scaled

pytestmark = pytest.mark.anyio

POLICY = Policy(retry_ms=20, task_after_s=0.3, task_ttl_s=60, task_poll_interval_ms=50)
AT_ONCE = POLICY.replace(task_after_s=0)


class Methods:
    """Records the `Mcp-Method` header of every POST (the client sends it with each `tasks/*`)."""

    def __init__(self, app: ASGIApp, on_method: Callable[[str], None] | None = None) -> None:
        self.app = app
        self.seen: list[str] = []
        self.on_method = on_method

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            method = dict(scope["headers"]).get(b"mcp-method", b"").decode()
            self.seen.append(method)
            if self.on_method is not None:
                self.on_method(method)
        await self.app(scope, receive, send)

    def count(self, method: str) -> int:
        return self.seen.count(method)


def text(result: dict[str, Any]) -> str:
    return "".join(block.get("text", "") for block in result.get("content", []))


def wrapped(policy: Policy = POLICY, on_method: Callable[[str], None] | None = None) -> Methods:
    return Methods(resumable(create_app(), policy=policy, tasks=True), on_method)


async def until(condition: Callable[[], bool], timeout: float = 10) -> None:
    with anyio.fail_after(scaled(timeout)):
        while not condition():
            await anyio.sleep(0.02)


# -- ResumableSession, 2025-11-25 ----------------------------------------------------------------


@pytest.mark.slow
async def test_the_session_gets_the_result_of_a_slow_call_that_became_a_task() -> None:
    app = wrapped()
    async with serve(app) as info, ResumableSession(info.mcp_url) as session:
        with anyio.fail_after(scaled(15)):
            slow = await session.call_tool("slow", {"seconds": 1.2, "tag": "session-slow"})
            fast = await session.call_tool("echo", {"text": "plain"})
    assert text(slow) == "slept session-slow" and slow["isError"] is False
    assert "taskId" not in slow and slow.get("resultType") != "task"
    assert text(fast) == "plain"
    assert app.count("tasks/get") >= 5, app.seen  # 0.9 s of polling at 50 ms
    assert app.count("tasks/cancel") == 0


@pytest.mark.slow
async def test_the_session_raises_a_failed_tasks_error_and_returns_a_tool_error() -> None:
    async with serve(wrapped(AT_ONCE)) as info, ResumableSession(info.mcp_url) as session:
        with anyio.fail_after(scaled(15)):
            tool_error = await session.call_tool("tool_error", {"seconds": 0.2})
            with pytest.raises(McpError) as failed:
                await session.call_tool("rpc_error", {"seconds": 0.2})
    assert tool_error["isError"] is True and "could not do it" in text(tool_error)
    assert (failed.value.code, failed.value.message) == (-32042, "the server refused it")


@pytest.mark.slow
async def test_cancelling_the_session_call_sends_tasks_cancel_and_the_tool_stops() -> None:
    tag = "session-cancelled"
    app = wrapped(AT_ONCE)
    async with serve(app) as info, ResumableSession(info.mcp_url) as session:
        async with anyio.create_task_group() as tg:
            tg.start_soon(session.call_tool, "slow", {"seconds": 30, "tag": tag})
            await until(lambda: app.count("tasks/get") >= 2)
            tg.cancel_scope.cancel()
        await until(lambda: tag in SEEN.cancelled)
    assert app.count("tasks/cancel") == 1 and tag not in SEEN.finished


@pytest.mark.slow
async def test_the_session_keeps_polling_through_cut_connections() -> None:
    tag = "session-cut"
    proxy_box: list[CutProxy] = []

    def cut_from_the_first_poll(method: str) -> None:
        proxy = proxy_box[0]
        if method == "tasks/get" and proxy.cut_after_bytes is None:
            proxy.max_cuts = 4
            proxy.cut_after_bytes = (20, 300)  # in the headers or the body of a tasks/get answer

    app = wrapped(AT_ONCE, cut_from_the_first_poll)
    async with serve(app) as info, CutProxy(info.port, seed=3) as proxy:
        proxy_box.append(proxy)
        # One connection per request, so every poll meets the proxy's cut decision afresh.
        inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))
        client = httpx.AsyncClient(transport=ResumableTransport(inner, default_retry_ms=20), timeout=10)
        async with client, ResumableSession(proxy.mcp_url, http_client=client) as session:
            with anyio.fail_after(scaled(20)):
                result = await session.call_tool("slow", {"seconds": 1.5, "tag": tag})
    assert text(result) == "slept session-cut"
    assert proxy.stats.cuts == 4, proxy.stats
    assert SEEN.started.count(tag) == 1 and app.count("tasks/cancel") == 0


# -- the stock SDK client, auto mode (2026-07-28) -------------------------------------------------


def sdk_client(url: str, http: Any) -> Any:
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    return Client(streamable_http_client(url, http_client=http), extensions=[sdk_tasks_extension()])


@pytest.mark.slow
async def test_the_sdk_client_with_the_extension_gets_the_result_of_a_task() -> None:
    from mcp.shared.exceptions import MCPError

    app = wrapped()
    async with serve(app) as info, sdk_http_client() as http, sdk_client(info.mcp_url, http) as client:
        assert client.protocol_version == "2026-07-28"
        with anyio.fail_after(scaled(15)):
            slow = await client.call_tool("slow", {"seconds": 1.2, "tag": "sdk-slow"})
            tool_error = await client.call_tool("tool_error", {"seconds": 0.4})
            with pytest.raises(MCPError) as failed:
                await client.call_tool("rpc_error", {"seconds": 0.4})
    assert slow.content[0].text == "slept sdk-slow" and not slow.is_error  # type: ignore[union-attr]
    assert tool_error.is_error
    assert failed.value.error.code == -32042
    assert app.count("tasks/get") >= 5, app.seen


@pytest.mark.slow
async def test_cancelling_the_sdk_call_sends_tasks_cancel_and_the_tool_stops() -> None:
    tag = "sdk-cancelled"
    app = wrapped(AT_ONCE)
    async with serve(app) as info, sdk_http_client() as http, sdk_client(info.mcp_url, http) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "slow", {"seconds": 30, "tag": tag})
            await until(lambda: app.count("tasks/get") >= 2)
            tg.cancel_scope.cancel()
        await until(lambda: tag in SEEN.cancelled)
    assert app.count("tasks/cancel") == 1 and tag not in SEEN.finished


# -- input_required (the server side: tasks/inputs.py, tasks/update.py) ----------------------------


@pytest.mark.slow
async def test_the_session_answers_a_tasks_input_requests_with_its_elicitation_callback() -> None:
    """2025-11-25: the app's `elicitation/create` makes the task `input_required`; the helper
    hands each entry to `on_request` and sends the answers with `tasks/update`."""
    asked: list[str] = []

    async def on_request(method: str, params: dict[str, Any]) -> dict[str, Any]:
        asked.append(f"{method}: {params['message']}")
        return {"action": "accept", "content": {"confirm": True}}

    app = wrapped(AT_ONCE)
    async with serve(app) as info, ResumableSession(info.mcp_url, on_request=on_request) as session:
        with anyio.fail_after(scaled(15)):
            result = await session.call_tool("confirm", {"filename": "a.txt"})
    assert text(result) == "deleted a.txt"
    assert asked == ["elicitation/create: Delete a.txt?"]
    assert app.count("tasks/update") == 1 and app.count("tasks/get") >= 1


@pytest.mark.slow
async def test_the_sdk_client_answers_a_tasks_input_requests_with_its_elicitation_callback() -> None:
    """2026-07-28: the app's `InputRequiredResult` (two questions) makes the task `input_required`;
    the SDK's own elicitation callback answers both, in one `tasks/update`."""
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.types import ElicitResult

    asked: list[str] = []

    async def elicit(context: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"name": params.message.split()[0].lower()})

    app = wrapped(AT_ONCE)
    async with (
        serve(app) as info,
        sdk_http_client() as http,
        Client(
            streamable_http_client(info.mcp_url, http_client=http),
            extensions=[sdk_tasks_extension()],
            elicitation_callback=elicit,
        ) as client,
    ):
        with anyio.fail_after(scaled(15)):
            result = await client.call_tool("two_questions", {})
    assert result.content[0].text == "first and second"  # type: ignore[union-attr]
    assert sorted(asked) == ["First name?", "Second name?"]
    assert app.count("tasks/update") == 1
