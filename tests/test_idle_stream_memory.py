"""What a request holds while it waits (issue 21's memory bar, `bench/engine.py memory`).

An idle detached stream's app is its task's coroutine (no frame of ours over it: the task's done
callback starts what follows it) and awaits its `receive` with no coroutine frame of ours under it
(the disconnect flag's future itself, or `_then_disconnect`'s one frame once its burst is written), and
hears `http.disconnect` from it; a request whose call watches its client holds none of the
front's frames that sorted and prepared it (nor, through them, its parsed JSON). Both hold
for every stream at once, so a frame there is memory times the streams (asyncio only: the
paths are asyncio's).
"""

from __future__ import annotations

import asyncio
import gc
import types
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from mcp_resume_asgi import MemoryStore, Policy, ResumeMiddleware
from mcp_resume_asgi.core.lifecycle import Run
from mcp_resume_asgi.core.stream import _NO_TIMING
from mcp_resume_asgi.engine.hosted import _RARELY, AppDisconnect, HostedStream, _AppChannel, _then_disconnect
from mcp_resume_asgi.engine.port import Delivery
from mcp_resume_asgi.engine.scheduler import APP_TASK_NAME
from mcp_resume_asgi.store.base import _META_DEFAULTS
from mcp_resume_asgi.wire.asgi import Message, Receive, Scope, Send

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

SESSION = b"idle-session-0000000000000001"
REQUEST = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"idle","arguments":{}}}'
EVENT = (
    b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress",'
    b'"params":{"progressToken":"t","progress":1}}\n\n'
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def post_scope() -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"host", b"127.0.0.1:8000"),
            (b"accept", b"application/json, text/event-stream"),
            (b"content-type", b"application/json"),
            (b"mcp-session-id", SESSION),
            (b"mcp-protocol-version", b"2025-11-25"),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }


class Client:
    """One client connection: the request's body, then waits until told to leave."""

    def __init__(self) -> None:
        self.body_sent = False
        self.gone = asyncio.Event()
        self.events = 0

    async def receive(self) -> Message:
        if not self.body_sent:
            self.body_sent = True
            return {"type": "http.request", "body": REQUEST, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.body":
            self.events += message.get("body", b"").count(b"data: {")


async def open_answer(receive: Receive, send: Send, events: int) -> None:
    """What the test apps do first: read the request, open an SSE answer, send `events` events."""
    await receive()
    headers = [(b"content-type", b"text/event-stream"), (b"mcp-session-id", SESSION)]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    for _ in range(events):
        await send({"type": "http.response.body", "body": EVENT, "more_body": True})


def idle_app(events: int, heard: list[str]) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """Streams `events` progress notifications without yielding, then idles on `receive`."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        await open_answer(receive, send, events)
        heard.append((await receive())["type"])

    return app


def awaited_chain(coro: Any) -> tuple[list[str], Any]:
    """The coroutines `coro` awaits through (their names), and what the innermost awaits."""
    names = []
    while isinstance(coro, types.CoroutineType):
        names.append(coro.__qualname__)
        coro = coro.cr_await
    return names, coro


async def leave_after(middleware: ResumeMiddleware, events: int) -> None:
    """POST one request, take its first `events` events and leave: its stream goes on detached.
    The POST's call returns once its client left."""
    client = Client()
    call = asyncio.ensure_future(middleware(post_scope(), client.receive, client.send))
    await settle(lambda: client.events >= events)
    client.gone.set()
    await asyncio.wait_for(call, 10)


def waits_on_the_flag(coro: Any) -> bool:
    """The app's task waits on a future right under the app or `_then_disconnect` (its burst written)."""
    names, innermost = awaited_chain(coro)
    return type(innermost).__name__ == "FutureIter" and names[-1] in (
        "idle_app.<locals>.app",
        "_then_disconnect",
    )


async def settle(condition: Callable[[], bool]) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    assert condition()


@pytest.mark.parametrize("events", [1, 10])
async def test_an_idle_detached_streams_app_awaits_the_flags_future(events: int) -> None:
    heard: list[str] = []
    middleware = ResumeMiddleware(
        idle_app(events, heard), policy=Policy(max_wait_s=3600, keepalive_s=3600), store=MemoryStore()
    )
    await leave_after(middleware, events)
    (hosted,) = middleware.engine.live.values()
    assert not middleware.engine.services.scheduler.apps._tasks  # (its stream holds it: `app_call`)
    task = hosted.app_call
    assert isinstance(task, asyncio.Task)
    await settle(lambda: waits_on_the_flag(task.get_coro()))

    names, _ = awaited_chain(task.get_coro())
    # the task's coroutine is the app's own call; the flag's future (its iterator) under it, or
    # under `_then_disconnect` when a burst was written first
    assert names in (
        ["idle_app.<locals>.app"],
        ["idle_app.<locals>.app", "_then_disconnect"],
    ), names
    # what follows the app is started by the task's done callback: the app's channel, no object
    # of its own (nor a frame of ours waiting for the app)
    assert isinstance(task._callbacks[0][0], _AppChannel), task._callbacks  # type: ignore[attr-defined]
    assert not heard
    hosted.disconnect_app()
    await settle(lambda: bool(heard))
    assert heard == ["http.disconnect"]


def receive_and_send(events: int, heard: list[str], seen: list[tuple[Receive, Send]]) -> Any:
    """`idle_app`, noting the `receive` and `send` it was called with."""
    inner = idle_app(events, heard)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append((receive, send))
        await inner(scope, receive, send)

    return app


async def test_an_idle_detached_stream_holds_one_channel_and_shared_defaults() -> None:
    """What every idle stream holds once: one object as the app's `receive` and `send`, one frame
    of ours (`_then_disconnect`) over the flag's future, the shared defaults of what few streams write (`_Rarely`,
    `_Timing`), a task named once for all, and its session id shared with its session's streams."""
    heard: list[str] = []
    seen: list[tuple[Receive, Send]] = []
    middleware = ResumeMiddleware(
        receive_and_send(10, heard, seen),
        policy=Policy(max_wait_s=3600, keepalive_s=3600),
        store=MemoryStore(),
    )
    for _ in range(2):
        await leave_after(middleware, 10)
    streams = list(middleware.engine.live.values())
    tasks = [hosted.app_call for hosted in streams]
    assert len(streams) == 2 and all(isinstance(task, asyncio.Task) for task in tasks)
    for task in tasks:
        assert isinstance(task, asyncio.Task)
        await settle(lambda: waits_on_the_flag(task.get_coro()))  # noqa: B023 (awaited at once)
        names, _ = awaited_chain(task.get_coro())
        assert names[0] == "receive_and_send.<locals>.app", names  # (the app's own call)
        assert names[-1] == "_then_disconnect" and names.count("_then_disconnect") == 1, names
        assert task.get_name() == APP_TASK_NAME
    assert all(receive is send for receive, send in seen), seen
    for hosted in streams:
        assert hosted._more is _RARELY and hosted.core._timing is _NO_TIMING
    assert streams[0].session_id is streams[1].session_id  # (interned)
    for hosted in streams:
        hosted.disconnect_app()
    await settle(lambda: len(heard) == 2)
    assert heard == ["http.disconnect"] * 2


async def test_a_request_in_flight_holds_none_of_the_fronts_preparing_frames() -> None:
    heard: list[str] = []
    middleware = ResumeMiddleware(idle_app(1, heard), store=MemoryStore())
    client = Client()
    call = asyncio.ensure_future(middleware(post_scope(), client.receive, client.send))
    await settle(lambda: client.events >= 1)
    names, _ = awaited_chain(call.get_coro())
    assert names[0] == "ResumeMiddleware.__call__" and "HostedStream.watch_first" in names, names
    for preparing in (
        "ResumeMiddleware._dispatch",
        "ResumeMiddleware._post_here",
        "ResumeMiddleware._request",
        "RetriedPosts.host",
        "Engine.handle_request",
    ):
        assert preparing not in names, names
    client.gone.set()
    await asyncio.wait_for(call, 10)


class AwaitableApp:
    """An ASGI app whose call returns an awaitable that is not a coroutine (awaited by a coroutine
    of ours, `_awaited`, the app task's)."""

    def __init__(self, inner: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.inner = inner

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        return asyncio.ensure_future(self.inner(scope, receive, send))


async def test_an_app_whose_call_returns_another_awaitable_runs_and_ends_as_a_coroutine_does() -> None:
    heard: list[str] = []
    middleware = ResumeMiddleware(
        AwaitableApp(idle_app(2, heard)),
        policy=Policy(max_wait_s=3600, keepalive_s=3600),
        store=MemoryStore(),
    )
    apps = middleware.engine.services.scheduler.apps
    await leave_after(middleware, 2)
    (hosted,) = middleware.engine.live.values()
    assert apps.running == 1 and isinstance(hosted.app_call, asyncio.Task)
    hosted.disconnect_app()
    await settle(lambda: hosted.core.run is Run.OVER and apps.running == 0)
    assert heard == ["http.disconnect"] and not apps._tasks  # (let go of once over)
    meta = await middleware.engine.services.store.get_stream(hosted.stream_id)
    assert meta is not None and meta.final_seq is not None  # its end recorded (`app_over`)


async def test_an_idle_streams_record_shares_the_defaults_of_its_rarely_set_fields() -> None:
    heard: list[str] = []
    store = MemoryStore()
    middleware = ResumeMiddleware(
        idle_app(3, heard), policy=Policy(max_wait_s=3600, keepalive_s=3600), store=store
    )
    await leave_after(middleware, 3)
    (hosted,) = middleware.engine.live.values()
    meta = await store.get_stream(hosted.stream_id)
    assert meta is not None and meta._rare is _META_DEFAULTS
    assert (meta.first_seq, meta.turn, meta.route, meta.resumable_opt_in, meta.trace) == (
        1,
        0,
        -1,
        False,
        None,
    )
    hosted.disconnect_app()
    await settle(lambda: bool(heard))


async def first_step(steps: list[str], release: asyncio.Event) -> None:
    try:
        await release.wait()
    except asyncio.CancelledError:
        steps.append("cancelled")
        raise
    steps.append("written")


async def awaiting(awaitable: Awaitable[Message]) -> Message:
    return await awaitable


class Waiting:
    """What `_then_disconnect` needs of its stream: the flag, and `rest` (told once it waits)."""

    def __init__(self, flag: AppDisconnect) -> None:
        self.app_disconnect = flag
        self.rested = 0

    def rest(self) -> None:
        self.rested += 1


async def test_then_disconnect_awaits_its_first_step_then_the_flag() -> None:
    flag, steps, release = AppDisconnect(), [], asyncio.Event()
    stream = Waiting(flag)
    waiting = asyncio.ensure_future(awaiting(_then_disconnect(lambda: first_step(steps, release), stream)))
    await settle(lambda: release._waiters is not None and bool(release._waiters))
    assert not stream.rested
    release.set()
    await settle(lambda: steps == ["written"])
    assert not waiting.done()
    assert stream.rested == 1  # it waits for the flag now, its burst written: the stream may rest
    flag.set()
    assert await asyncio.wait_for(waiting, 10) == {"type": "http.disconnect"}


async def test_then_disconnect_when_the_flag_was_set_during_its_first_step() -> None:
    flag, steps, release = AppDisconnect(), [], asyncio.Event()
    waiting = asyncio.ensure_future(
        awaiting(_then_disconnect(lambda: first_step(steps, release), Waiting(flag)))
    )
    await settle(lambda: bool(release._waiters))
    flag.set()
    release.set()
    assert await asyncio.wait_for(waiting, 10) == {"type": "http.disconnect"}
    assert steps == ["written"]


@pytest.mark.parametrize("during", ["first step", "flag"])
async def test_then_disconnect_is_cancelled_where_it_waits(during: str) -> None:
    flag, steps, release = AppDisconnect(), [], asyncio.Event()
    waiting = asyncio.ensure_future(
        awaiting(_then_disconnect(lambda: first_step(steps, release), Waiting(flag)))
    )
    await settle(lambda: bool(release._waiters))
    if during == "flag":
        release.set()
        await settle(lambda: flag._waiters is not None)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert steps == (["cancelled"] if during == "first step" else ["written"])
    if during == "flag":
        held = flag._waiters
        assert isinstance(held, asyncio.Future) and held.cancelled()


def later_app(
    first: int, more: asyncio.Event, then: int
) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """Streams `first` events, waits for `more` (a task of its own listens for the disconnect,
    as the SDK's apps do), then streams `then` more and ends."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        await receive()
        listening = asyncio.ensure_future(receive())
        headers = [(b"content-type", b"text/event-stream"), (b"mcp-session-id", SESSION)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for _ in range(first):
            await send({"type": "http.response.body", "body": EVENT, "more_body": True})
        await more.wait()
        for _ in range(then):
            await send({"type": "http.response.body", "body": EVENT, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        await listening

    return app


@pytest.mark.parametrize("events", [1, 10])
async def test_an_idle_detached_stream_lets_go_of_its_recorder_and_makes_one_when_it_writes(
    events: int,
) -> None:
    store = MemoryStore()
    more = asyncio.Event()
    middleware = ResumeMiddleware(
        later_app(events, more, 3), policy=Policy(max_wait_s=3600, keepalive_s=3600), store=store
    )
    await leave_after(middleware, events)
    (hosted,) = middleware.engine.live.values()
    # detached, its app quiet: neither a recorder nor a writer held
    await settle(lambda: hosted._recorder is None and hosted._writer is None)
    assert hosted.answer_start is None  # (its record exists: the app's start is not kept for it)
    more.set()
    await settle(lambda: not middleware.engine.live)
    # What the app wrote later is recorded after the rest, ids in order; then, as ever for a request
    # whose app ended without its answer, the error saying so, and the stream is completed.
    meta = await store.get_stream(hosted.stream_id)
    assert meta is not None and meta.last_seq == events + 4 and meta.state.value == "completed"
    read = await store.read(hosted.stream_id, 0, 100)
    assert [seq for seq, _ in read] == list(range(1, events + 5))
    assert read[-1][1].count(b"without") == 1 and b"notifications/progress" in read[-2][1]


def stoppable_app(steps: list[str], *, swallow: bool) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """`idle_app`'s stream, then waits on its `receive`; cancelled there, it notes it and raises
    on (or, `swallow`, returns)."""
    inner = idle_app(1, [])

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await inner(scope, receive, send)
        except asyncio.CancelledError:
            steps.append("cancelled")
            if not swallow:
                raise
        steps.append("returned")

    return app


async def detached(app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> tuple[Any, Any, MemoryStore]:
    store = MemoryStore()
    middleware = ResumeMiddleware(app, policy=Policy(max_wait_s=3600, keepalive_s=3600), store=store)
    await leave_after(middleware, 1)
    (hosted,) = middleware.engine.live.values()
    return middleware, hosted, store


@pytest.mark.parametrize("swallow", [False, True])
async def test_stop_app_ends_an_idle_app_and_its_request_goes_on_as_if_it_had_returned(swallow: bool) -> None:
    """The cancel of ours (`stop_app`) is taken back, whether the app raises it or swallows it:
    what follows the app runs whole (its end recorded, its delivery's `after_app`), its task held meanwhile."""
    steps: list[str] = []
    middleware, hosted, store = await detached(stoppable_app(steps, swallow=swallow))
    apps = middleware.engine.services.scheduler.apps
    task = hosted.app_call
    assert isinstance(task, asyncio.Task) and apps.running == 1
    after: list[str] = []

    async def after_app() -> None:
        after.append("after")

    hosted.delivery = Delivery(after_app=after_app)  # (what follows the app runs it)
    hosted.stop_app()
    assert task in apps._tasks  # (held while it stops: its stream no longer holds it)
    await settle(lambda: hosted.core.run is Run.OVER and apps.running == 0)
    assert steps == (["cancelled", "returned"] if swallow else ["cancelled"])
    assert after == ["after"] and not apps._tasks and not middleware.engine.live
    assert task.cancelled() is not swallow
    meta = await store.get_stream(hosted.stream_id)
    assert meta is not None and meta.final_seq is not None and meta.state.value == "completed"


async def test_a_cancel_not_ours_is_raised_on_after_the_apps_end_is_recorded() -> None:
    """A cancel of the app's task that `stop_app` did not make (a server stopping) is not taken
    back: the app's end is recorded, what would follow it does not run, and the request is over."""
    steps: list[str] = []
    middleware, hosted, store = await detached(stoppable_app(steps, swallow=False))
    apps = middleware.engine.services.scheduler.apps
    task = hosted.app_call
    assert isinstance(task, asyncio.Task)
    after: list[str] = []

    async def after_app() -> None:
        after.append("after")

    hosted.delivery = Delivery(after_app=after_app)  # (what follows the app runs it)
    made: list[asyncio.Task[Any]] = []
    loop = asyncio.get_running_loop()

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        made.append(asyncio.Task(coro, loop=loop, **kwargs))
        return made[-1]

    loop.set_task_factory(factory)  # type: ignore[arg-type]
    try:
        task.cancel()
        await settle(lambda: hosted.core.run is Run.OVER and apps.running == 0)
    finally:
        loop.set_task_factory(None)
    assert steps == ["cancelled"] and after == [] and not apps._tasks
    (follow_up,) = [t for t in made if t.get_coro().__qualname__ == "HostedStream.app_over"]
    assert follow_up.cancelled()  # raised on
    meta = await store.get_stream(hosted.stream_id)
    assert meta is not None and meta.final_seq is not None  # (its end recorded: `app_finished`)


async def test_an_app_failing_while_idle_is_logged_once_and_its_request_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        await open_answer(receive, send, 1)
        await release.wait()
        raise RuntimeError("boom")

    middleware, hosted, store = await detached(app)
    apps = middleware.engine.services.scheduler.apps
    release.set()
    await settle(lambda: hosted.core.run is Run.OVER and apps.running == 0)
    failed = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(failed) == 1 and "app failed while streaming" in failed[0].getMessage(), failed
    read = await store.read(hosted.stream_id, 0, 100)
    assert read[-1][1].count(b"without") == 1  # the stream's error answer


async def test_an_app_that_keeps_its_send_in_a_cycle_keeps_none_of_the_request() -> None:
    """A framework may leave the app's `send` in a reference cycle that outlives the call
    (sse-starlette's response does, through a cancelled task's traceback): once the call is over,
    what it kept holds none of the request's stream (freed at once, not by the collector), hears
    `http.disconnect`, and may not send."""
    kept: list[Any] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        await open_answer(receive, send, 1)
        await send({"type": "http.response.body", "body": EVENT, "more_body": False})
        cycle: list[Any] = [receive, send]
        cycle.append(cycle)
        kept.append(cycle)

    middleware = ResumeMiddleware(app, store=MemoryStore())
    client = Client()
    client.gone.set()
    await asyncio.wait_for(middleware(post_scope(), client.receive, client.send), 10)
    await settle(lambda: not middleware.engine.live)
    receive, send = kept[0][0], kept[0][1]
    assert not [o for o in gc.get_referents(send) if isinstance(o, HostedStream)]
    assert await receive() == {"type": "http.disconnect"}
    with pytest.raises(RuntimeError, match="after its call had returned"):
        await send({"type": "http.response.body", "body": b"", "more_body": False})
