"""A stream's whole state (`core/lifecycle.py`, `StreamCore.state`) as one printable value: the
enums' moves without an event loop, then a stream hosted by the middleware, printed at each step
of its life (a request answered, a request cancelled)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from mcp_resume_asgi import MemoryStore, Policy, ResumeMiddleware
from mcp_resume_asgi.core.answer_mode import Answer
from mcp_resume_asgi.core.lifecycle import Origin, Record, Run, Stop, StreamState, raised
from mcp_resume_asgi.core.stream import Phase
from mcp_resume_asgi.engine.hosted import HostedStream
from mcp_resume_asgi.wire.asgi import Message, Receive, Scope, Send
from tests.test_idle_stream_memory import EVENT, SESSION, post_scope, settle
from tests.test_stream_core import SINGLE, answer, make, note

# ---------------------------------------------------------------------- no event loop


#: The states a stream answered at once goes through, as `StreamCore.state()` prints them.
ANSWERED = [
    "new record=none run=starting",
    "new record=none run=running",
    "open record=due run=running",
    "open record=open run=running",
    "answered record=open run=running",
    "done record=open run=over",
]


def test_a_new_core_prints_where_it_starts() -> None:
    core = make()
    assert core.state() == StreamState(Phase.NEW, Record.NONE, Run.STARTING, Stop.NONE, False, False)
    assert str(core.state()) == "new record=none run=starting"


def test_the_state_prints_the_stop_and_the_marks_only_when_set() -> None:
    state = StreamState(Phase.CANCELLING, Record.OPEN, Run.OVER, Stop.FENCED, True, True)
    assert str(state) == "cancelling record=open run=over stop=fenced expired indexed"


def test_a_rerun_says_so_from_where_its_record_goes_on() -> None:
    """A re-run continues the record of a run lost with its node (`continue_from`): its origin
    is part of its state, and a stream hosted for a request here is `LOCAL`."""
    core = make()
    assert core.origin is Origin.LOCAL
    core.continue_from(41)
    assert core.origin is Origin.RERUN and core.seq == 41
    assert str(core.state()) == "new record=none run=starting rerun"


def test_the_opt_in_is_kept_by_the_core_that_decides_from_it() -> None:
    assert make(version=SINGLE, opted_in=True).opted_in
    assert not make(version=SINGLE).opted_in


@pytest.mark.parametrize(
    ("now", "to", "then"),
    [
        (Stop.NONE, Stop.STOPPED, Stop.STOPPED),
        (Stop.NONE, Stop.HANDED_OVER, Stop.HANDED_OVER),
        (Stop.HANDED_OVER, Stop.STOPPED, Stop.HANDED_OVER),  # (hand_over stops the app too)
        (Stop.STOPPED, Stop.FENCED, Stop.FENCED),
        (Stop.HANDED_OVER, Stop.FENCED, Stop.FENCED),
        (Stop.FENCED, Stop.HANDED_OVER, Stop.FENCED),  # a fenced run stays fenced
        (Stop.FENCED, Stop.STOPPED, Stop.FENCED),
    ],
)
def test_a_stop_only_rises(now: Stop, to: Stop, then: Stop) -> None:
    assert raised(now, to) is then


def test_a_cores_state_follows_what_its_host_says() -> None:
    """The moves a host makes on its core, in the order a recorded request makes them."""
    core = make()
    seen = [str(core.state())]
    core.run = Run.RUNNING
    seen.append(str(core.state()))
    assert core.response_started(200, b"text/event-stream", upgraded=False, held=False) is Answer.STREAM
    core.store_record = Record.DUE
    seen.append(str(core.state()))
    core.store_record = Record.OPENING
    assert core.record([note(1)]) is not None
    core.store_record = Record.OPEN
    seen.append(str(core.state()))
    assert core.record([answer()]) is not None
    seen.append(str(core.state()))
    core.app_finished()
    core.run = Run.OVER
    seen.append(str(core.state()))
    assert seen == ANSWERED


# ---------------------------------------------------------------------- hosted by the middleware

START: Message = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"text/event-stream"), (b"mcp-session-id", SESSION)],
}
START_ALONE: Message = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"text/event-stream")],
}
"""An answer outside a session: its cancel tells the app at once (no `notifications/cancelled`
first, `cancel_plan`)."""
ANSWER = b'event: message\ndata: {"jsonrpc":"2.0","id":1,"result":{}}\n\n'


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Client:
    """One client connection: sends the request's body, keeps what it is sent, leaves when told."""

    def __init__(self) -> None:
        self.body_sent = False
        self.gone = asyncio.Event()
        self.received = b""

    async def receive(self) -> Message:
        if not self.body_sent:
            self.body_sent = True
            return {"type": "http.request", "body": _REQUEST, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.body":
            self.received += message.get("body", b"")


_REQUEST = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"steps","arguments":{}}}'


class Steps:
    """An app that prints its stream's state as it goes, and waits for the test between steps."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.middleware: ResumeMiddleware | None = None
        self.seen: list[str] = []
        self.go_on = asyncio.Event()
        self.heard: list[str] = []
        self.returned = asyncio.Event()

    def hosted(self) -> HostedStream:
        assert self.middleware is not None
        (hosted,) = self.middleware.engine.live.values()
        return hosted

    def note(self) -> None:
        self.seen.append(str(self.hosted().core.state()))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        self.note()
        await receive()
        self.note()
        await send(START if self.answer else START_ALONE)
        self.note()
        await send({"type": "http.response.body", "body": EVENT, "more_body": True})
        await self.go_on.wait()
        if self.answer:
            await send({"type": "http.response.body", "body": ANSWER, "more_body": True})
            self.note()
            return
        self.heard.append((await receive())["type"])  # (cancelled: told `http.disconnect`)
        self.note()
        self.returned.set()


def hosted_by(app: Steps) -> ResumeMiddleware:
    middleware = ResumeMiddleware(app, policy=Policy(max_wait_s=3600, keepalive_s=3600), store=MemoryStore())
    app.middleware = middleware
    return middleware


async def until(app: Steps, condition: Callable[[HostedStream], bool]) -> None:
    assert app.middleware is not None
    live = app.middleware.engine.live
    await settle(lambda: len(live) == 1 and condition(app.hosted()))
    app.note()


@pytest.mark.anyio
@pytest.mark.timeout(30)
async def test_an_answered_requests_state_at_each_step_of_its_life() -> None:
    app = Steps(answer=True)
    middleware = hosted_by(app)
    client = Client()
    call = asyncio.ensure_future(middleware(post_scope(), client.receive, client.send))
    await until(app, lambda hosted: hosted.core.store_record is Record.OPEN)  # (its first event written)
    hosted = app.hosted()
    app.go_on.set()
    await asyncio.wait_for(call, 10)  # (its answer complete: the POST's call returns)
    await settle(lambda: hosted.core.run is Run.OVER)
    app.seen.append(str(hosted.core.state()))
    print("\n".join(app.seen))
    assert app.seen == ANSWERED
    assert b'"result":{}' in client.received


@pytest.mark.anyio
@pytest.mark.timeout(30)
async def test_a_cancelled_requests_state_at_each_step_of_its_life() -> None:
    app = Steps(answer=False)
    middleware = hosted_by(app)
    client = Client()
    # Outside a session (`START_ALONE`).
    scope = post_scope()
    scope["headers"] = [(name, value) for name, value in scope["headers"] if name != b"mcp-session-id"]
    call = asyncio.ensure_future(middleware(scope, client.receive, client.send))
    await until(app, lambda hosted: hosted.core.store_record is Record.OPEN)
    hosted = app.hosted()
    assert middleware.engine.stop(hosted.stream_id, "the test cancels it")  # (`cancellation.cancel_app`)
    await until(app, lambda hosted: hosted.core.expired)
    app.go_on.set()
    await asyncio.wait_for(app.returned.wait(), 10)
    await settle(lambda: hosted.core.run is Run.OVER)
    app.seen.append(str(hosted.core.state()))
    client.gone.set()
    await asyncio.wait_for(call, 10)
    print("\n".join(app.seen))
    assert app.heard == ["http.disconnect"]
    assert app.seen == [
        "new record=none run=starting",
        "new record=none run=running",
        "open record=due run=running",
        "open record=open run=running",
        "cancelling record=open run=running expired",
        "cancelling record=open run=running expired",
        "done record=open run=over expired",
    ]


def test_a_hosted_stream_keeps_no_boolean_of_its_own() -> None:
    """Where a hosted stream is in its life is its core's state: neither the stream nor the side
    object of what it rarely needs holds a flag (a bool) of its own."""
    from mcp_resume_asgi.engine.hosted import _RARELY, _Rarely
    from mcp_resume_asgi.store.base import StreamKind

    hosted = HostedStream(
        ResumeMiddleware(Steps(answer=True)).engine.services,
        kind=StreamKind.REQUEST,
        scope={"type": "http", "path": "/mcp", "headers": []},
        body=b"",
        route=0,
        policy=Policy(),
        version="2025-11-25",
        session_id=None,
        principal=None,
    )
    for owner, names in ((hosted, HostedStream.__slots__), (_RARELY, _Rarely.__slots__)):
        for name in names:
            if name != "__weakref__":
                assert not isinstance(getattr(owner, name), bool), name
