"""The app's request runs on a task of the engine's, not on the POST's (issue 21 step 8).

Under real servers - uvicorn, hypercorn on trio, granian - a POST whose client leaves
mid-call returns its ASGI call (an ASGI layer outside the middleware sees it return)
while the tool goes on, and its result is then resumable; a context variable set by an
outer layer reaches the tool; the lifespan's shutdown waits for a running tool, or
stops it once `drain_s` is over (its stream ends with an error event); an app mounted
where the lifespan never reaches the middleware still works, and says so once.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.types import ASGIApp

from mcp_resume_asgi.http.middleware import ResumeMiddleware
from mcp_resume_asgi.store.memory import MemoryStore
from tests.apps.detach_app import Outer, State, create_app
from tests.support.raw import RawSession, Reply
from tests.support.server import serve_granian, serve_in_loop
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

FAST = {"retry_ms": 20}
LOOSE = "outside the server's lifespan"


async def until(condition: Callable[[], bool], what: str) -> None:
    with anyio.fail_after(scaled(10)):
        while not condition():
            await anyio.sleep(0.02)
    assert condition(), what


async def leave_mid_call(s: RawSession, tag: str) -> Reply:
    """POST the `wait` tool; drop the connection after its first (progress) event."""
    call = s.tool_call("wait", {"tag": tag}, progress=True)
    reply = await s.exchange("POST", "/mcp", call, headers=s.headers(x_tag=tag), stop_after=1)
    assert reply.status == 200 and reply.last_id is not None
    assert reply.messages()[0]["method"] == "notifications/progress"
    return reply


async def resumed_result(s: RawSession, last_id: str) -> str:
    rest = await s.exchange("GET", "/mcp", headers=s.headers(last_event_id=last_id))
    text: str = rest.messages()[-1]["result"]["content"][0]["text"]
    return text


async def tool_sees(s: RawSession, value: str) -> str:
    reply = await s.exchange("POST", "/mcp", s.tool_call("ctx"), headers=s.headers(x_tag=value))
    text: str = reply.messages()[-1]["result"]["content"][0]["text"]
    return text


async def detached_then_resumed(client: httpx.AsyncClient, state: State) -> None:
    """The POST's call returns while its tool waits; released, the tool's result is resumable."""
    s = RawSession(client)
    first = await leave_mid_call(s, "a")
    await until(lambda: "a" in state.returned, "the POST's call returned after its client left")
    assert state.running == ["a"] and not state.finished, "the tool goes on after its POST returned"
    state.release()
    assert first.last_id is not None
    assert await resumed_result(s, first.last_id) == "released"
    assert state.finished == ["a"]


def middleware_of(app: Outer) -> ResumeMiddleware:
    middleware = app.app
    assert isinstance(middleware, ResumeMiddleware)
    return middleware


# ---------------------------------------------------------------------------------------- uvicorn
async def test_uvicorn_a_post_whose_client_left_returns_while_its_tool_goes_on() -> None:
    state = State()
    async with (
        serve_in_loop(create_app(state=state, policy=FAST)) as info,
        httpx.AsyncClient(base_url=info.base_url, timeout=10) as client,
    ):
        await detached_then_resumed(client, state)


async def test_uvicorn_the_tool_sees_a_context_variable_set_outside_the_middleware() -> None:
    async with (
        serve_in_loop(create_app(policy=FAST)) as info,
        httpx.AsyncClient(base_url=info.base_url, timeout=10) as client,
    ):
        assert await tool_sees(RawSession(client), "outer-value") == "outer-value"


async def test_an_app_failing_before_its_answer_is_a_500_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The server never sees the app's exception now (its request is not on the server's task):
    the middleware answers the 500 itself, and logs the failure once."""
    caplog.set_level(logging.ERROR, logger="mcp_resume_asgi")
    async with (
        serve_in_loop(create_app(policy=FAST)) as info,
        httpx.AsyncClient(base_url=info.base_url, timeout=10) as client,
    ):
        s = RawSession(client)
        reply = await s.exchange("POST", "/mcp", s.tool_call("boom"))
    assert reply.status == 500
    failures = [r for r in caplog.records if r.exc_info and "failed before answering" in r.getMessage()]
    assert len(failures) == 1, [r.getMessage() for r in caplog.records]


class _ReleaseWhenDraining(logging.Handler):
    """Releases the tool once the drain has begun (so the tool ends during it, not before)."""

    def __init__(self, state: State) -> None:
        super().__init__(logging.INFO)
        self.state = state
        self.draining = False

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("drain: waiting up to"):
            self.draining = True
            self.state.release()


async def test_lifespan_shutdown_waits_for_a_running_tool_before_the_app_hears_of_it() -> None:
    state, store = State(), MemoryStore()
    app = create_app(state=state, store=store, policy=FAST, drain_s=scaled(30))
    engine_log = logging.getLogger("mcp_resume_asgi.engine.engine")
    handler = _ReleaseWhenDraining(state)
    engine_log.addHandler(handler)
    level = engine_log.level
    engine_log.setLevel(logging.INFO)
    try:
        async with (
            serve_in_loop(app) as info,
            httpx.AsyncClient(base_url=info.base_url, timeout=10) as client,
        ):
            first = await leave_mid_call(RawSession(client), "a")
            await until(lambda: "a" in state.returned, "the POST's call returned")
        # (the server stopped here: its lifespan shutdown drained first)
    finally:
        engine_log.removeHandler(handler)
        engine_log.setLevel(level)
    assert handler.draining, "the shutdown drained the running request"
    assert state.finished == ["a"] and state.running_at_shutdown == [], (
        "the app heard of the shutdown only once its tool was done"
    )
    assert first.last_id is not None
    parsed = middleware_of(app).engine.signer.parse_event_id(first.last_id)
    assert parsed is not None
    events = await store.read(parsed[0], 0, 100)
    assert b'"released"' in events[-1][1], "the tool's result is in the store"


async def test_lifespan_shutdown_stops_a_tool_still_running_after_drain_s() -> None:
    state, store = State(), MemoryStore()
    app = create_app(state=state, store=store, policy=FAST, drain_s=0.2)
    async with (
        serve_in_loop(app) as info,
        httpx.AsyncClient(base_url=info.base_url, timeout=10) as client,
    ):
        first = await leave_mid_call(RawSession(client), "a")
        await until(lambda: "a" in state.returned, "the POST's call returned")
    assert state.cancelled == ["a"] and state.running_at_shutdown == [], (
        "the tool was stopped before the app heard of the shutdown"
    )
    assert first.last_id is not None
    parsed = middleware_of(app).engine.signer.parse_event_id(first.last_id)
    assert parsed is not None
    events = await store.read(parsed[0], 0, 100)
    assert b'"error"' in events[-1][1] and b"the server shut down" in events[-1][1], (
        "the stream ends with an error event its client can read"
    )


async def test_a_mounted_app_whose_lifespan_never_comes_still_works_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="mcp_resume_asgi.engine.scheduler")
    state = State()
    mounted = Starlette(routes=[Mount("/", app=create_app(state=state, policy=FAST))])
    async with (
        serve_in_loop(mounted) as info,
        httpx.AsyncClient(base_url=info.base_url, timeout=10) as client,
    ):
        await detached_then_resumed(client, state)
        assert await tool_sees(RawSession(client), "mounted") == "mounted"
    warnings = [r for r in caplog.records if LOOSE in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]


async def test_no_warning_when_the_lifespan_reaches_the_middleware(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="mcp_resume_asgi.engine.scheduler")
    state = State()
    async with (
        serve_in_loop(create_app(state=state, policy=FAST)) as info,
        httpx.AsyncClient(base_url=info.base_url, timeout=10) as client,
    ):
        await detached_then_resumed(client, state)
    assert not [r for r in caplog.records if LOOSE in r.getMessage()]


# ---------------------------------------------------------------------------------- hypercorn, trio
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@asynccontextmanager
async def hypercorn_on_trio(app: ASGIApp) -> AsyncIterator[httpx.AsyncClient]:
    port = _free_port()
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.loglevel = "WARNING"
    shutdown = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: hypercorn_serve(app, config, shutdown_trigger=shutdown.wait))  # type: ignore[arg-type]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            with anyio.fail_after(scaled(10)):
                while True:
                    try:
                        await client.get("/probe")
                        break
                    except httpx.ConnectError:
                        await anyio.sleep(0.05)
            yield client
        shutdown.set()


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_hypercorn_trio_a_post_whose_client_left_returns_while_its_tool_goes_on() -> None:
    state = State()
    async with hypercorn_on_trio(create_app(state=state, policy=FAST)) as client:
        await detached_then_resumed(client, state)
        assert await tool_sees(RawSession(client), "trio-value") == "trio-value"


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_hypercorn_trio_mounted_without_lifespan_system_tasks_keep_the_context() -> None:
    state = State()
    mounted = Starlette(routes=[Mount("/", app=create_app(state=state, policy=FAST))])
    async with hypercorn_on_trio(mounted) as client:
        await detached_then_resumed(client, state)
        assert await tool_sees(RawSession(client), "system-task") == "system-task"


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_hypercorn_trio_shutdown_waits_for_the_running_tool() -> None:
    state = State()
    handler = _ReleaseWhenDraining(state)
    engine_log = logging.getLogger("mcp_resume_asgi.engine.engine")
    engine_log.addHandler(handler)
    level = engine_log.level
    engine_log.setLevel(logging.INFO)
    try:
        async with hypercorn_on_trio(create_app(state=state, policy=FAST, drain_s=scaled(30))) as client:
            await leave_mid_call(RawSession(client), "a")
            await until(lambda: "a" in state.returned, "the POST's call returned")
    finally:
        engine_log.removeHandler(handler)
        engine_log.setLevel(level)
    assert handler.draining and state.finished == ["a"] and state.running_at_shutdown == []


# ------------------------------------------------------------------------------------------ granian
@pytest.mark.slow
async def test_granian_a_post_whose_client_left_returns_while_its_tool_goes_on() -> None:
    pytest.importorskip("granian", reason="granian is not installed (it is in the `test` extra)")
    async with (
        serve_granian("tests.apps.detach_app:create_app", factory_kwargs={"policy": FAST}) as info,
        httpx.AsyncClient(base_url=info.base_url, timeout=10) as client,
    ):
        s = RawSession(client)
        first = await leave_mid_call(s, "a")
        seen: dict[str, Any] = {}

        async def probe() -> None:
            seen.update((await client.get("/probe")).json())

        with anyio.fail_after(scaled(10)):
            while "a" not in seen.get("returned", []):
                await probe()
                await anyio.sleep(0.02)
        assert seen["running"] == ["a"] and not seen["finished"], "the tool goes on after its POST returned"
        await client.post("/release")
        assert first.last_id is not None
        assert await resumed_result(s, first.last_id) == "released"
        assert await tool_sees(s, "granian-value") == "granian-value"


# ---------------------------------------------------------------------------------- drain() (issue 22)
async def test_an_explicit_drain_lets_the_tool_finish_and_answer_on_its_connection() -> None:
    """`await middleware.drain()` on the memory store (no other node can serve a resume): the
    attached connection is kept, the tool goes on and finishes within `drain_s`, its result goes
    on that connection and is resumable too; a request arriving meanwhile is served (a quick one
    completes on its own connection)."""
    state = State()
    app = create_app(state=state, policy=FAST, drain_s=scaled(30))
    middleware = middleware_of(app)
    async with (
        serve_in_loop(app) as info,
        httpx.AsyncClient(base_url=info.base_url, timeout=10) as client,
    ):
        s = RawSession(client)
        call = s.tool_call("wait", {"tag": "a"}, progress=True)
        drained: list[Any] = []

        async def drain() -> None:
            drained.append(await middleware.drain())

        async with anyio.create_task_group() as tg:
            async with s.open("POST", "/mcp", call, s.headers(x_tag="a")) as (response, reader):
                assert response.status_code == 200
                events = []
                with anyio.fail_after(scaled(10)):
                    async for event in reader:
                        events.append(event)
                        if len(events) == 2:  # (the priming event, the first progress)
                            tg.start_soon(drain)
                            while middleware.engine.services.draining is None:
                                await anyio.sleep(0.01)  # (the drain began)
                            assert state.running == ["a"] and not state.finished, "the tool goes on"
                            assert await tool_sees(s, "during-the-drain") == "during-the-drain", (
                                "a new request is served"
                            )
                            state.release()
            assert all(e.retry is None for e in events[1:]), f"never closed with retry: {events}"
            answers = [m for m in (e.message for e in events if e.data) if "result" in m]
            assert len(answers) == 1 and answers[0]["result"]["content"][0]["text"] == "released", events
        assert drained and drained[0].finished == 1 and drained[0].stopped == 0, drained
        assert state.finished == ["a"]
        assert events[0].id is not None
        assert await resumed_result(s, events[0].id) == "released"
        assert (await middleware.drain()) is drained[0], "a second drain is the first's"
