"""`ResumableSession` speaking 2026-07-28 end to end, against a stock `MCPServer`
(tests/apps/tasks_app.py) wrapped with `resumable(app, tasks=True)` under uvicorn, on the
memory store and on Redis: `server/discover` instead of `initialize`, no session, the
per-request `_meta` and headers on every request (checked on what the server received);
a plain call; a call that became a task, polled to its result; a task's elicitation
answered through `on_request` and `tasks/update`; the caller's cancellation sending
`tasks/cancel`; a plain call answered with an `InputRequiredResult` (multi round-trip
requests) answered and re-issued; a plain slow call resumed across at-will closes (the
resumable-streams extension the session declares); auto mode against a modern server, and
its fallback to a 2025-11-25 session against 2025-only servers: the stock server's 2025 path,
and the stock `mcp` 1.x server in a venv of its own."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_resume_asgi import Policy, resumable
from mcp_resume_asgi.client import (
    RESUMABLE_STREAMS_EXTENSION,
    TASKS_EXTENSION,
    McpError,
    ResumableSession,
    ResumableTransport,
)
from tests.apps.tasks_app import SEEN, create_app
from tests.support.server import ServerInfo, SubprocessServer, ThreadedServer, serve, serve_in_loop
from tests.support.stores import redis_prefix, redis_url, require_redis
from tests.support.timing import scaled

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"
VERSION_META = "io.modelcontextprotocol/protocolVersion"
INFO_META = "io.modelcontextprotocol/clientInfo"
CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"
POLICY = Policy(retry_ms=20, task_after_s=0.3, task_ttl_s=60, task_poll_interval_ms=50)
AT_ONCE = POLICY.replace(task_after_s=0)
NEVER_A_TASK = Policy(retry_ms=20, task_after_s=None)
HANDSHAKE_VERSIONS = {b"2024-11-05", b"2025-03-26", b"2025-06-18", b"2025-11-25"}


@pytest.fixture(params=["memory", "redis"])
def store_kind(request: pytest.FixtureRequest) -> str:
    if request.param == "redis":
        require_redis()
    return str(request.param)


@dataclass
class Request:
    """One HTTP request as the server received it (outside the middleware)."""

    verb: str
    headers: dict[str, str]
    body: Any

    @property
    def method(self) -> str | None:
        return self.body.get("method") if isinstance(self.body, dict) else None

    @property
    def params(self) -> dict[str, Any]:
        params = self.body.get("params") if isinstance(self.body, dict) else None
        return params if isinstance(params, dict) else {}


class Recorder:
    """Records every request the server receives (verb, headers, JSON body), then passes it on."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.requests: list[Request] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        body = b""
        if scope["method"] == "POST":
            more = True
            while more:
                message = await receive()
                if message["type"] != "http.request":
                    break
                body += message.get("body", b"")
                more = message.get("more_body", False)
        self.requests.append(Request(scope["method"], headers, json.loads(body) if body else None))
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if scope["method"] == "POST" and not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def posts(self, method: str | None = None) -> list[Request]:
        return [r for r in self.requests if r.verb == "POST" and (method is None or r.method == method)]

    def methods(self) -> list[str | None]:
        return [r.method for r in self.posts()]


def legacy_only(app: ASGIApp) -> ASGIApp:
    """The stock server as a 2025-only one: a request naming a revision after 2025-11-25 reaches
    its 2025 path (the stock server picks its era by this header), which answers `server/discover`
    without a session as any 2025 server does: `400`, -32600 "Missing session ID"."""

    async def wrapper(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = [
                (k, v)
                for k, v in scope["headers"]
                if not (k == b"mcp-protocol-version" and v not in HANDSHAKE_VERSIONS)
            ]
            scope = {**scope, "headers": headers}
        await app(scope, receive, send)

    return wrapper


@contextlib.asynccontextmanager
async def server(
    store_kind: str, policy: Policy = POLICY, app: Callable[[], ASGIApp] = create_app
) -> AsyncIterator[tuple[ServerInfo, Recorder]]:
    if store_kind == "memory":
        recorder = Recorder(resumable(app(), policy=policy, tasks=True))
        async with serve(recorder) as info:
            yield info, recorder
        return
    from mcp_resume_asgi.store import RedisStore

    store = RedisStore(redis_url(), prefix=redis_prefix("test-client-modern"))
    recorder = Recorder(
        resumable(app(), policy=policy, store=store, secret="client-modern-tests", tasks=True)
    )
    try:
        async with serve_in_loop(recorder) as info:
            yield info, recorder
    finally:
        await store.clear()
        await store.aclose()


def text(result: dict[str, Any]) -> str:
    return "".join(block.get("text", "") for block in result.get("content", []))


async def until(condition: Callable[[], bool], timeout: float = 10) -> None:
    with anyio.fail_after(scaled(timeout)):
        while not condition():
            await anyio.sleep(0.02)


def assert_modern(request: Request, *, extensions: set[str]) -> None:
    """What the 2026-07-28 transport requires of every POST, and what this client declares."""
    headers, meta = request.headers, request.params.get("_meta", {})
    assert "mcp-session-id" not in headers, request
    assert headers["mcp-protocol-version"] == meta[VERSION_META] == MODERN, request
    assert headers["mcp-method"] == request.method, request
    assert meta[INFO_META] == {"name": "mcp-resume-asgi", "version": "0.1.0"}, request
    assert set(meta[CAPABILITIES_META].get("extensions", {})) == extensions, request


BOTH = {TASKS_EXTENSION, RESUMABLE_STREAMS_EXTENSION}


# -- 2026-07-28 against the wrapped stock server ----------------------------------------------------


@pytest.mark.slow
async def test_a_plain_call_goes_after_server_discover_with_no_session_and_the_per_request_meta(
    store_kind: str,
) -> None:
    async with (
        server(store_kind) as (info, recorder),
        ResumableSession(info.mcp_url, protocol_version=MODERN) as session,
    ):
        with anyio.fail_after(scaled(15)):
            result = await session.call_tool("echo", {"text": "plain"})
            seen_by_app = await session.call_tool("declared_extensions", {})
        assert session.protocol_version == MODERN and session.session_id is None
        assert session.server_info == {"name": "tasks-test-app", "version": "0.0.1"}
        assert TASKS_EXTENSION in session.server_capabilities["extensions"]
        assert session.initialize_result == {} and session.discover_result["supportedVersions"] == [MODERN]
    assert text(result) == "plain" and result["isError"] is False
    assert "tasks" not in text(seen_by_app), "the middleware took its extension out of what the app sees"
    # tools/list once, before the first call: which parameters go in `Mcp-Param-*` headers.
    assert recorder.methods() == ["server/discover", "tools/list", "tools/call", "tools/call"], (
        recorder.methods()
    )
    assert [r.verb for r in recorder.requests] == ["POST"] * 4, "no DELETE: there is no session"
    for request in recorder.posts():
        assert_modern(request, extensions=BOTH)
    assert [r.headers["mcp-name"] for r in recorder.posts("tools/call")] == ["echo", "declared_extensions"]
    assert len({r.body["id"] for r in recorder.posts()}) == 4


@pytest.mark.slow
async def test_a_slow_call_becomes_a_task_polled_to_its_result_with_the_task_id_as_mcp_name(
    store_kind: str,
) -> None:
    async with (
        server(store_kind) as (info, recorder),
        ResumableSession(info.mcp_url, protocol_version=MODERN) as session,
    ):
        with anyio.fail_after(scaled(15)):
            slow = await session.call_tool("slow", {"seconds": 1.2, "tag": "modern-slow"})
    assert text(slow) == "slept modern-slow" and slow["isError"] is False
    assert slow.get("resultType") != "task" and "taskId" not in slow
    polls = recorder.posts("tasks/get")
    assert len(polls) >= 5, recorder.methods()  # 0.9 s of polling at 50 ms
    task_ids = {r.params["taskId"] for r in polls}
    assert len(task_ids) == 1
    for poll in polls:
        assert_modern(poll, extensions=BOTH)
        assert poll.headers["mcp-name"] == poll.params["taskId"]
    assert recorder.posts("tasks/cancel") == [] and recorder.posts("initialize") == []


@pytest.mark.slow
async def test_a_tasks_tool_error_is_returned_and_its_json_rpc_error_raised(store_kind: str) -> None:
    async with (
        server(store_kind, AT_ONCE) as (info, recorder),
        ResumableSession(info.mcp_url, protocol_version=MODERN) as session,
    ):
        with anyio.fail_after(scaled(15)):
            tool_error = await session.call_tool("tool_error", {"seconds": 0.2})
            with pytest.raises(McpError) as failed:
                await session.call_tool("rpc_error", {"seconds": 0.2})
    assert tool_error["isError"] is True and "could not do it" in text(tool_error)
    assert (failed.value.code, failed.value.message) == (-32042, "the server refused it")
    assert len(recorder.posts("tasks/get")) >= 2


@pytest.mark.slow
async def test_a_tasks_elicitations_are_answered_through_on_request_and_tasks_update(store_kind: str) -> None:
    asked: list[str] = []

    async def on_request(method: str, params: dict[str, Any]) -> dict[str, Any]:
        asked.append(f"{method}: {params['message']}")
        if params["message"].startswith("Delete"):
            return {"action": "accept", "content": {"confirm": True}}
        return {"action": "accept", "content": {"name": params["message"].split()[0].lower()}}

    async with (
        server(store_kind, AT_ONCE) as (info, recorder),
        ResumableSession(info.mcp_url, protocol_version=MODERN, on_request=on_request) as session,
    ):
        with anyio.fail_after(scaled(20)):
            confirmed = await session.call_tool("confirm", {"filename": "a.txt"})
            both = await session.call_tool("two_questions", {})
    assert text(confirmed) == "deleted a.txt" and text(both) == "first and second"
    assert asked[0] == "elicitation/create: Delete a.txt?"
    assert sorted(asked[1:]) == ["elicitation/create: First name?", "elicitation/create: Second name?"]
    updates = recorder.posts("tasks/update")
    assert [len(u.params["inputResponses"]) for u in updates] == [1, 2], "each task's answers in one update"
    for update in updates:
        assert_modern(update, extensions=BOTH)
        assert update.headers["mcp-name"] == update.params["taskId"]
    calls = recorder.posts("tools/call")
    assert len(calls) == 2 and all("inputResponses" not in c.params for c in calls), "no MRTR retry"


@pytest.mark.slow
async def test_cancelling_the_call_sends_tasks_cancel_and_the_tool_stops(store_kind: str) -> None:
    tag = f"modern-cancelled-{store_kind}"
    async with (
        server(store_kind, AT_ONCE) as (info, recorder),
        ResumableSession(info.mcp_url, protocol_version=MODERN) as session,
    ):
        async with anyio.create_task_group() as tg:
            tg.start_soon(session.call_tool, "slow", {"seconds": 30, "tag": tag})
            await until(lambda: len(recorder.posts("tasks/get")) >= 2)
            tg.cancel_scope.cancel()
        await until(lambda: tag in SEEN.cancelled)
    (cancel,) = recorder.posts("tasks/cancel")
    assert_modern(cancel, extensions=BOTH)
    assert (
        cancel.headers["mcp-name"]
        == cancel.params["taskId"]
        == recorder.posts("tasks/get")[0].params["taskId"]
    )
    assert tag not in SEEN.finished


@pytest.mark.slow
async def test_a_plain_call_answered_input_required_is_answered_and_sent_again(store_kind: str) -> None:
    """Multi round-trip requests: no task (the session declares no tasks), so the app's
    `InputRequiredResult` reaches the client, which answers it through `on_request` and sends
    the call again - a new id, `inputResponses` under the server's keys, its `requestState`."""
    asked: list[str] = []

    async def on_request(method: str, params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params["message"])
        if params["message"].startswith("Delete"):
            return {"action": "accept", "content": {"confirm": False}}
        return {"action": "accept", "content": {"name": params["message"].split()[0].lower()}}

    async with (
        server(store_kind) as (info, recorder),
        ResumableSession(
            info.mcp_url, protocol_version=MODERN, on_request=on_request, tasks=False
        ) as session,
    ):
        with anyio.fail_after(scaled(15)):
            kept = await session.call_tool("confirm", {"filename": "b.txt"})
            both = await session.call_tool("two_questions", {})
    assert text(kept) == "kept b.txt" and text(both) == "first and second"
    assert asked[0] == "Delete b.txt?" and sorted(asked[1:]) == ["First name?", "Second name?"]
    first, again, first_two, again_two = recorder.posts("tools/call")
    for call in (first, first_two):
        assert "inputResponses" not in call.params and "requestState" not in call.params
    assert again.params["inputResponses"] == {
        key: {"action": "accept", "content": {"confirm": False}} for key in again.params["inputResponses"]
    }
    assert len(again_two.params["inputResponses"]) == 2
    for call in (again, again_two):
        assert isinstance(call.params["requestState"], str) and call.params["requestState"]
        assert_modern(call, extensions={RESUMABLE_STREAMS_EXTENSION})
    assert again.params["arguments"] == {"filename": "b.txt"} and again.headers["mcp-name"] == "confirm"
    assert first.body["id"] != again.body["id"]
    assert not [r for r in recorder.posts() if (r.method or "").startswith("tasks/")]


@pytest.mark.slow
async def test_a_streaming_call_is_resumed_across_at_will_closes_it_opted_into(store_kind: str) -> None:
    """The session declares `resumable-streams` only over a transport that resumes: then the
    server closes the call's stream at will and the transport resumes it; over a plain httpx
    client it declares nothing, and the server keeps the stream whole, as 2026-07-28 says.
    The stock low-level server's `progress` tool (tests/apps/probe_app.py) streams progress."""
    from tests.apps.probe_app import create_app as probe_app

    policy = NEVER_A_TASK.replace(max_connection_s=0.3)
    resumed_progress: list[float] = []
    whole_progress: list[float] = []
    async with server(store_kind, policy, app=probe_app) as (info, recorder):
        async with ResumableSession(info.mcp_url, protocol_version=MODERN, tasks=False) as session:
            with anyio.fail_after(scaled(15)):
                resumed = await session.call_tool(
                    "progress", {"steps": 10, "seconds": 1.5}, lambda p, t, m: resumed_progress.append(p)
                )
        resumes = [r for r in recorder.requests if r.verb == "GET"]
        async with (
            httpx.AsyncClient(timeout=15) as plain,
            ResumableSession(
                info.mcp_url, http_client=plain, protocol_version=MODERN, tasks=False
            ) as session,
        ):
            with anyio.fail_after(scaled(15)):
                whole = await session.call_tool(
                    "progress", {"steps": 10, "seconds": 1.5}, lambda p, t, m: whole_progress.append(p)
                )
    assert text(resumed) == text(whole) == "done 10"
    assert resumed_progress == whole_progress == [float(i) for i in range(1, 11)], "each once, in order"
    assert len(resumes) >= 2, [r.verb for r in recorder.requests]
    assert all(r.headers.get("last-event-id") for r in resumes)
    assert [r.verb for r in recorder.requests].count("GET") == len(resumes), "the plain client never resumed"
    first_call, plain_call = recorder.posts("tools/call")
    assert_modern(first_call, extensions={RESUMABLE_STREAMS_EXTENSION})
    assert_modern(plain_call, extensions=set())


# -- auto mode ----------------------------------------------------------------------------------


@pytest.mark.slow
async def test_auto_mode_speaks_2026_to_a_modern_server(store_kind: str) -> None:
    async with (
        server(store_kind) as (info, recorder),
        ResumableSession(info.mcp_url, protocol_version="auto") as session,
    ):
        with anyio.fail_after(scaled(15)):
            result = await session.call_tool("slow", {"seconds": 0.8, "tag": "auto-modern"})
        assert session.protocol_version == MODERN and session.session_id is None
    assert text(result) == "slept auto-modern"
    assert recorder.methods()[0] == "server/discover" and "initialize" not in recorder.methods()
    assert recorder.posts("tasks/get"), "a task, declared per request"


@pytest.mark.slow
async def test_auto_mode_falls_back_to_a_2025_session_on_the_stock_servers_2025_path(store_kind: str) -> None:
    async with server(store_kind, app=lambda: legacy_only(create_app())) as (info, recorder):
        async with ResumableSession(info.mcp_url, protocol_version="auto") as session:
            with anyio.fail_after(scaled(15)):
                result = await session.call_tool("slow", {"seconds": 1.0, "tag": "auto-legacy"})
            assert session.protocol_version == "2025-11-25" and session.session_id is not None
            assert session.discover_result == {} and session.server_info["name"] == "tasks-test-app"
        with pytest.raises(McpError) as refused:
            async with ResumableSession(info.mcp_url, protocol_version=MODERN):
                pass
    assert text(result) == "slept auto-legacy"
    assert refused.value.code == -32600 and "session" in refused.value.message.lower()
    methods = recorder.methods()
    assert methods[:4] == ["server/discover", "initialize", "notifications/initialized", "tools/call"], (
        methods
    )
    assert methods[-1] == "server/discover"
    polls = recorder.posts("tasks/get")
    assert polls, "the 2025 session declared tasks at initialize"
    for request in recorder.posts()[1:-1]:
        assert request.headers.get("mcp-protocol-version", "2025-11-25") == "2025-11-25"
        assert VERSION_META not in request.params.get("_meta", {}), "no per-request meta on 2025"
    assert all(
        p.headers["mcp-session-id"] == recorder.posts("tools/call")[0].headers["mcp-session-id"]
        for p in polls
    )
    assert [r.verb for r in recorder.requests][-2] == "DELETE", "the 2025 session was ended"


@pytest.mark.timeout(180)  # the first run builds the mcp 1.x venv, as tests/test_mcp1_client.py does
@pytest.mark.slow
async def test_auto_mode_falls_back_against_the_stock_mcp1_server() -> None:
    """A real 2025-only server: mcp 1.x knows no `server/discover` (it answers 400 without a
    session). Skips without the venv's network install, except under CI=true."""
    from tests.test_mcp1_client import mcp1_python

    sent: list[str] = []

    async def record(request: httpx.Request) -> None:
        sent.append(
            request.headers.get("mcp-method") or json.loads(request.content or b"{}").get("method", "")
        )

    child = SubprocessServer("tests.apps.mcp1_app:create_app")
    child.PYTHON = str(await anyio.to_thread.run_sync(mcp1_python))  # the stock mcp 1.x, not this venv's 2.x
    info = await anyio.to_thread.run_sync(child.start)
    try:
        http = httpx.AsyncClient(
            transport=ResumableTransport(), timeout=15, event_hooks={"request": [record]}
        )
        async with http, ResumableSession(info.mcp_url, http_client=http, protocol_version="auto") as session:
            assert session.protocol_version == "2025-11-25" and session.session_id is not None
            assert session.server_info["name"] == "mcp1-app"
            with anyio.fail_after(scaled(15)):
                echoed = await session.call_tool("echo", {"text": "from 1.x"})
                slept = await session.call_tool("slow", {"seconds": 1.0})
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(child.stop)
            child.kill()
    assert text(echoed) == "from 1.x" and text(slept) == "slept 1.0"
    assert sent[:2] == ["server/discover", "initialize"], sent
    assert "tasks/get" in sent, "the 1.x app's slow call became a task of the middleware"


def recorded_tasks_app(at_once: bool = False) -> Recorder:
    """The wrapped tasks app, recorded; built by the server thread's own loop (`ThreadedServer`
    with an import string), so that the app's anyio primitives are asyncio's under a trio test."""
    return Recorder(resumable(create_app(), policy=AT_ONCE if at_once else POLICY, tasks=True))


@contextlib.asynccontextmanager
async def threaded(at_once: bool) -> AsyncIterator[tuple[ServerInfo, Recorder]]:
    child = ThreadedServer(f"{__name__}:recorded_tasks_app", factory_kwargs={"at_once": at_once})
    info = await anyio.to_thread.run_sync(child.start)
    try:
        app = child.app
        assert isinstance(app, Recorder)
        yield info, app
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(child.stop)


@pytest.mark.parametrize("anyio_backend", ["trio"])
@pytest.mark.slow
async def test_the_2026_client_runs_on_trio() -> None:
    """The client side on trio (the server keeps its own asyncio loop in a thread): auto mode's
    discover, a task with an elicitation, a cancelled task, and a multi round-trip call."""
    tag = "modern-trio-cancelled"

    async def on_request(method: str, params: dict[str, Any]) -> dict[str, Any]:
        return {"action": "accept", "content": {"confirm": True}}

    async with (
        threaded(at_once=True) as (info, recorder),
        ResumableSession(info.mcp_url, protocol_version="auto", on_request=on_request) as session,
    ):
        with anyio.fail_after(scaled(20)):
            in_a_task = await session.call_tool("confirm", {"filename": "t.txt"})
            polls_before = len(recorder.posts("tasks/get"))
            async with anyio.create_task_group() as tg:
                tg.start_soon(session.call_tool, "slow", {"seconds": 30, "tag": tag})
                await until(lambda: len(recorder.posts("tasks/get")) >= polls_before + 2)
                tg.cancel_scope.cancel()
            await until(lambda: tag in SEEN.cancelled)
    assert session.protocol_version == MODERN and len(recorder.posts("tasks/cancel")) == 1
    async with (
        threaded(at_once=False) as (info, recorder),
        ResumableSession(
            info.mcp_url, protocol_version=MODERN, on_request=on_request, tasks=False
        ) as session,
    ):
        with anyio.fail_after(scaled(20)):
            rounds = await session.call_tool("confirm", {"filename": "u.txt"})
    assert text(in_a_task) == "deleted t.txt" and text(rounds) == "deleted u.txt"
    assert len(recorder.posts("tools/call")) == 2


async def test_a_tool_parameter_marked_x_mcp_header_goes_in_its_mcp_param_header(store_kind: str) -> None:
    """The stock server refuses a 2026-07-28 call of such a tool without the header (HeaderMismatch);
    the session lists the tools once to learn which parameters, then repeats them there."""
    from tests.apps.rest_app import create_app as create_rest_app

    async with (
        server(store_kind, NEVER_A_TASK, app=create_rest_app) as (info, recorder),
        ResumableSession(info.mcp_url, protocol_version=MODERN) as session,
    ):
        for region in ("eu-west", "région sud"):
            result = await session.call_tool("regional", {"region": region})
            assert result["content"][0]["text"] == f"served in {region}"
        result = await session.call_tool("echo", {"text": "plain"})
        assert result["content"][0]["text"] == "plain"
    calls = [r for r in recorder.requests if r.method == "tools/call"]
    lists = [r for r in recorder.requests if r.method == "tools/list"]
    assert len(lists) == 1, "listed once, for the first call"
    assert calls[0].headers["mcp-param-region"] == "eu-west"
    assert calls[1].headers["mcp-param-region"] == "=?base64?csOpZ2lvbiBzdWQ=?="
    assert "mcp-param-region" not in calls[2].headers
