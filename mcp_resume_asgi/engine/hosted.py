"""A request of the app, hosted here: its app call, what it sends, and who is told.

The app runs on a task of the engine's (`scheduler.AppTasks`), not on the task of
the ASGI call that brought the request, with a `receive` that never reads the
server's and a `send` that lands in `on_app_send`: each SSE event the app sends
is given an id by the stream's core, recorded in the store and written, from that
same `send`, to whichever client connection is attached now (zero or one; see
`delivery.py`). The ASGI call that brought the request only watches its client
(`watch_first`): it returns once its connection is let go - its answer complete,
its client gone, a resume took over - while the app goes on, recorded, so a
detached stream holds only the app's own coroutine and its record. The app hears
`http.disconnect` only when its response is complete, its client left a JSON
answer, or a cancel says so.

What the app answers decides the mode: an SSE stream is recorded (`STREAM`);
anything else passes through untouched (`PASSTHROUGH`); a request whose stream
had to exist before the app answered (an `Idempotency-Key`, SEP-975, resume
tokens, `upgrade_json_after_s`) is `UPGRADED`: the client's answer is an SSE
stream of the engine's own, and a JSON answer of the app becomes its one event.
That decision is `core/answer_mode.py`'s, taken through the stream's core when the
app's response starts (`on_response_start`); acting on it is here too.

A hosted stream is one object that owns its parts: its `StreamCore` (state and
decisions: where the stream is in its life - its answer's phase, its record, its app's
call, its stop - is the core's `state()`, never a flag of the host's), its `Recorder`
(the store side, `recorder.py`) and its `Writer` (connections and timers, `delivery.py`), and,
for a request whose client's answer waits for the app, its `UpgradedAnswer` (`upgraded.py`).
The parts know it only through narrow Protocols (`RecordedStream`, `WriterHost`,
`UpgradingHost`, `cancellation.CancellableStream`). It is made by one constructor per way a
stream comes to be: a client's request (`request`), a session's GET stream (`standalone`), a
request run again after its node was lost (`rerun`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import operator
import sys
import time
from collections.abc import Awaitable, Callable
from types import CoroutineType
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from starlette.types import Message, Scope

from mcp_resume_asgi.core.answer_mode import Answer, Mode, answer_head, session_id
from mcp_resume_asgi.core.ending import End, next_step
from mcp_resume_asgi.core.lifecycle import Origin, Record, Run, Stop, raised
from mcp_resume_asgi.core.mrtr import may_hand_over
from mcp_resume_asgi.core.orphans import after_loss
from mcp_resume_asgi.core.stream import Due, FirstGone, StreamCore
from mcp_resume_asgi.engine import cancellation, mrtr, rerun, sweep
from mcp_resume_asgi.engine.connection import Connection, Flag
from mcp_resume_asgi.engine.delivery import Writer
from mcp_resume_asgi.engine.event_loop import running_asyncio_loop
from mcp_resume_asgi.engine.port import Delivery, RequestContext, ServeOptions
from mcp_resume_asgi.engine.recorder import Recorder
from mcp_resume_asgi.engine.scheduler import Timer, spawn
from mcp_resume_asgi.engine.services import ENDED_WITHOUT_RESPONSE, SHUT_DOWN, Drain
from mcp_resume_asgi.engine.upgraded import UpgradedAnswer
from mcp_resume_asgi.policy import Policy, running_ttl
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import StreamKind, StreamMeta
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.headers import Headers
from mcp_resume_asgi.wire.replies import UNAVAILABLE_HEADER, send_bytes
from mcp_resume_asgi.wire.side_slots import SideAttribute, side_attribute
from mcp_resume_asgi.wire.sse import SSEError, SSEEvent, SSEParser, single_event_frame
from mcp_resume_asgi.wire.tokens import new_stream_id

if TYPE_CHECKING:
    from mcp_resume_asgi.engine.services import StreamServices

__all__ = ["STATUS_HOLD_S", "HostedStream"]


logger = logging.getLogger(__name__)

# The states the paths every request takes compare and set, as globals: on Python 3.11 an enum
# member read through its class costs a few times a global's.
_OPEN = Record.OPEN
_DUE = Record.DUE
_STARTING = Run.STARTING
_RUNNING = Run.RUNNING
_OVER = Run.OVER
_NOT_STOPPED = Stop.NONE
_LOCAL = Origin.LOCAL
_REQUEST = StreamKind.REQUEST
_STANDALONE = StreamKind.STANDALONE
_RERUN = Origin.RERUN
_FENCED = Stop.FENCED

#: How much of the app's answer to `initialize` is read for its session (`learn_session`).
_SESSION_ANSWER_BYTES = 65536

#: A request whose stream opens before the app answers (Idempotency-Key, SEP-975...)
#: holds its client's answer this long for the app's status, so that the app's own
#: refusal (404, 400) reaches the client as that status.
STATUS_HOLD_S = 1.0


class AppDisconnect(Flag):
    """Set when the app is to hear `http.disconnect`: its futures resolve to that message
    (`HostedStream.app_receive` hands one to the app as the awaitable of its `receive`)."""

    __slots__ = ()

    def _result(self) -> Message:
        return {"type": "http.disconnect"}


_ALREADY_SET = Flag()
"""A flag set for good, shared: what `HostedStream.done` and `opened` are once set before anyone
asked for them (a set flag never changes again, and waiting on it returns at once)."""
_ALREADY_SET.set()


class _Waiting(Protocol):
    """What `_then_disconnect` needs of its stream (a `HostedStream`)."""

    @property
    def app_disconnect(self) -> AppDisconnect: ...
    def rest(self) -> None: ...


async def _then_disconnect(burst: Callable[[], Awaitable[None]], hosted: _Waiting) -> Message:
    """(asyncio) The app's `receive` once it waits with its burst still to be written: `burst`
    (its recorder's `before_wait`) first, then the stream's `app_disconnect` future, which
    resolves to `http.disconnect`. An idle app holds this frame, so it keeps no local it no
    longer needs (the burst's coroutine went with its `await`)."""
    await burst()
    del burst
    flag = hosted.app_disconnect
    waiter = flag.future()
    if waiter is None:  # (set meanwhile)
        return flag._result()
    hosted.rest()  # (the app waits, its burst written)
    del hosted, flag
    message: Message = await waiter
    return message


class _AppChannel:
    """The app's `receive` and `send`, one object for both (two bound methods held by every app
    for as long as it runs cost more): called with no message, it receives; with one, it sends.
    On asyncio it is its app task's done callback too (called with the task: `app_done`), which
    costs no object of its own either.

    Once the app's call is over the channel lets go of its stream (`close`): an app's framework
    may keep its `send` in a reference cycle that outlives the request (sse-starlette's response
    does, through a cancelled task's traceback), and the stream, and all it holds, would then wait
    for the garbage collector instead of being freed at once."""

    __slots__ = ("_hosted",)

    def __init__(self, hosted: HostedStream) -> None:
        self._hosted: HostedStream | None = hosted

    def close(self) -> None:
        """The app's call is over: from now on it receives `http.disconnect` and may not send."""
        self._hosted = None

    def __call__(self, message: Message | asyncio.Task[Any] | None = None) -> Awaitable[Any]:
        hosted = self._hosted
        if hosted is None:
            return _after_call(message)
        if message is None:
            return hosted.app_receive()
        if isinstance(message, asyncio.Task):  # (the app's task is done)
            self._hosted = None
            hosted.app_done(message)
            return None  # type: ignore[return-value]  # (a done callback's result is not read)
        # The app's `send` (not a coroutine itself: `on_app_send`'s is the one per message, but
        # for the response's last, and an event written to an attached connection: `send_event`).
        if message["type"] == "http.response.body":
            if not message.get("more_body", False):
                return hosted.last_send(message)
            return hosted.send_event(message)
        return hosted.on_app_send(message)


def _after_call(message: Message | asyncio.Task[Any] | None) -> Awaitable[Message]:
    """What the app's `receive` or `send` does once its call has returned (a task it left behind
    calls them): it receives `http.disconnect`; a message sent is refused, as ASGI servers do."""
    if message is None or isinstance(message, asyncio.Task):
        return _disconnected()
    raise RuntimeError(f"the app sent {message.get('type')!r} after its call had returned")


async def _disconnected() -> Message:
    return {"type": "http.disconnect"}


async def _nothing() -> None:
    """What the app's `send` of an event returns when it joined the burst under way (nothing of
    its recording is left to wait for)."""


async def _awaited(app: Awaitable[None]) -> None:
    """(asyncio) An app call that returned an awaitable other than a coroutine: awaited by a
    coroutine, which its task runs (rare: a frame of ours there is no concern)."""
    await app


class _Rarely:
    """What a hosted stream rarely needs (an upgraded or passed-through answer, features), apart: most streams never write any of it, and one idle detached
    stream lives on for its resume window, thousands at a time."""

    __slots__ = (
        "delivery",
        "first_messages",
        "idempotency_key",
        "passthrough_body",
        "upgraded",
    )

    def __init__(self) -> None:
        self.delivery: Delivery | None = None
        self.first_messages: tuple[dict[str, Any], ...] = ()
        self.idempotency_key: str | None = None
        self.passthrough_body: list[bytes] | None = None
        self.upgraded: UpgradedAnswer | None = None


_RARELY = _Rarely()
"""The defaults, shared by every stream that wrote none of them (never written itself)."""


def _rarely(name: str) -> Any:
    """A `HostedStream` attribute kept in its `_Rarely` (`side_slots`)."""
    return side_attribute("_more", _RARELY, _Rarely, name)


class HostedStream:
    """One request (or standalone GET) of the app, hosted on this node."""

    # Slots, not a dict: a detached stream lives on for its resume window, thousands at a time.
    __slots__ = (
        "__weakref__",
        "_done",
        "_more",
        "_opened",
        "_recorder",
        "_writer",
        "answer_start",
        "app_call",
        "app_disconnect",
        "body",
        "core",
        "first",
        "kind",
        "method",
        "mode",
        "parser",
        "prefix",
        "principal",
        "route",
        "scope",
        "services",
        "session_id",
        "stream_id",
        "timer",
        "version",
    )

    def __init__(
        self,
        services: StreamServices[HostedStream],
        *,
        kind: StreamKind,
        scope: Scope,
        body: bytes,
        route: int,
        policy: Policy,
        version: str,
        session_id: str | None,
        principal: str | None,
        request_id: Any = None,
        method: str | None = None,
        stream_id: str | None = None,
        opted_in: bool = False,
    ) -> None:
        """`principal`: who sends the request, as read from `scope` before the app ran (the
        front reads it once per request; the app's own auth may name someone later)."""
        self.services = services
        """The engine's services to its streams."""
        self.kind = kind
        self.scope = scope
        self.body = body
        self.route = route
        # Interned: a stream outlives its request's parsed headers and JSON, whose copies go then
        # (a session's idle streams share one copy of its id).
        self.version = version = sys.intern(version)
        self.session_id = sys.intern(session_id) if session_id is not None else None
        self.principal = principal
        self.method = sys.intern(method) if method is not None else None
        self.stream_id = stream_id or new_stream_id()
        self.core = StreamCore(
            policy,
            version=version,
            is_request=kind is StreamKind.REQUEST,
            request_id=request_id,
            now=time.monotonic(),
            opted_in=opted_in,
        )
        self._recorder: Recorder | None = None
        """Made when first needed; let go while the stream is detached and its app quiet (`rest`)."""
        self._writer: Writer | None = None
        """Made when first needed; let go while the stream is detached and quiet (`rest`)."""
        self._more = _RARELY
        """What the stream rarely needs (`_Rarely`), shared defaults until one is written."""
        self.timer = Timer(self)  # (called as `on_timer`: no bound method held per stream)
        """The stream's place in the scheduler (its writer acts on what comes due)."""
        self.mode: Mode | None = None
        self.answer_start: Message | None = None
        """The app's response start while the record is due (passed through if it cannot be
        created: `unrecorded`)."""
        self.prefix: bytes | None = b""
        self.first: Connection | None = None
        """The connection that brought the request (its answer is the app's response)."""
        self.app_disconnect = AppDisconnect()
        self.app_call: asyncio.Task[Any] | anyio.CancelScope | None = None
        """What `stop_app` cancels while the app's call runs (`call_app`)."""
        # `done` and `opened`, made when first asked for (an idle stream's are never waited on).
        self._done: Flag | None = None
        self._opened: Flag | None = None
        self.parser: SSEParser | None = None
        """Made for the first chunk that is not one whole event (`single_event_frame`: the SDK's
        apps send events in pieces)."""

    # ------------------------------------------------------------------ made: one constructor per way a stream comes to be
    @classmethod
    def request(
        cls,
        services: StreamServices[HostedStream],
        ctx: RequestContext,
        options: ServeOptions,
        claimed_key: str | None = None,
    ) -> HostedStream:
        """A client's JSON-RPC request, as the layers hand it to the engine (`Engine.handle_request`):
        served as `options` say, and holding `claimed_key`, the store key of its `Idempotency-Key`
        the front claimed for it (freed if the app refuses)."""
        message = ctx.message
        opted_in = p.asks_resumable_streams(message)
        hosted = cls(
            services,
            kind=StreamKind.REQUEST,
            scope=ctx.scope,
            body=p.body_for_app(ctx.body, message) if opted_in else ctx.body,  # (read once)
            route=ctx.route,
            policy=options.policy or ctx.policy,
            version=ctx.version,
            session_id=ctx.session_id,
            principal=ctx.principal,
            request_id=message["id"],
            method=ctx.method,
            stream_id=ctx.stream_id,
            opted_in=opted_in,
        )
        if claimed_key is not None:
            hosted.idempotency_key = claimed_key
        if options.first_messages:
            hosted.first_messages = tuple(options.first_messages)
        if options.delivery is not None:
            hosted.delivery = options.delivery
        return hosted

    @classmethod
    def standalone(
        cls,
        services: StreamServices[HostedStream],
        scope: Scope,
        *,
        route: int,
        policy: Policy,
        version: str,
        session_id: str,
    ) -> HostedStream:
        """A session's GET stream, opened by the app (`Engine.handle_standalone`): the app sees the
        GET without its `Last-Event-ID` (resuming is the engine's, from the store: the app opens
        a new stream)."""
        app_scope = dict(scope)
        app_scope["headers"] = [(k, v) for k, v in scope["headers"] if k != b"last-event-id"]
        return cls(
            services,
            kind=StreamKind.STANDALONE,
            scope=app_scope,
            body=b"",
            route=route,
            policy=policy,
            version=version,
            session_id=session_id,
            principal=services.principal(app_scope),
        )

    @classmethod
    def rerun(
        cls,
        services: StreamServices[HostedStream],
        meta: StreamMeta,
        scope: Scope,
        body: bytes,
        policy: Policy,
        *,
        round_: int,
    ) -> HostedStream:
        """A request run again on the record `meta` of a run lost with its node (`Engine.rerun`,
        which took the record over): its request (`scope`, `body`) as it was kept, its ids going
        on past every one the lost node can have handed out, its first event the re-run's marker,
        and no client of its own (its clients follow the record; its close is nobody's)."""
        hosted = cls(
            services,
            kind=StreamKind.REQUEST,
            scope=scope,
            body=body,
            route=meta.route,
            policy=policy,
            version=meta.protocol_version,
            session_id=meta.session_id,
            principal=meta.principal,
            request_id=meta.request_id,
            method=meta.method,
            stream_id=meta.stream_id,
            opted_in=meta.resumable_opt_in,
        )
        hosted.core.continue_from(after_loss(meta.last_seq) - 1)
        hosted.delivery = Delivery(at_will=False, survives_close=True, refusal_recorded=True)
        hosted.first_messages = (rerun.marker(round_),)
        return hosted

    # Read and written as attributes; kept in `_more` (`_rarely`).
    delivery: SideAttribute[Delivery | None] = _rarely("delivery")
    first_messages: SideAttribute[tuple[dict[str, Any], ...]] = _rarely("first_messages")
    idempotency_key: SideAttribute[str | None] = _rarely("idempotency_key")
    passthrough_body: SideAttribute[list[bytes] | None] = _rarely("passthrough_body")
    """The app's answer to `initialize`, passed through, as read for its session (`learn_session`)."""
    upgraded: SideAttribute[UpgradedAnswer | None] = _rarely("upgraded")
    """The answer of a stream opened before, or instead of, the app's (`upgraded.py`): made
    when the client's answer is held for the app (`host`)."""

    @property
    def held(self) -> Connection | None:
        """The first connection while its answer waits for the app's decision (UPGRADED)."""
        upgraded = self._more.upgraded
        return None if upgraded is None else upgraded.held

    # What its services and core hold already (not kept twice).
    store = property(operator.attrgetter("services.store"))
    policy = property(operator.attrgetter("core.policy"))
    request_id = property(operator.attrgetter("core.request_id"))
    opted_in = property(operator.attrgetter("core.opted_in"))
    """The client asked for a resumable stream (`protocol.RESUMABLE_STREAMS_EXTENSION`)."""

    @property
    def path(self) -> str:
        return self.scope["path"]  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        """The stream's id and whole state (`StreamCore.state`): a hosted stream keeps no flag of
        its own about where it is in its life."""
        return f"<HostedStream {self.stream_id} {self.core.state()}>"

    @property
    def done(self) -> Flag:
        """Set once the app's request is over (its stream concluded)."""
        done = self._done
        if done is None:
            done = self._done = Flag()
        return done

    @property
    def opened(self) -> Flag:
        """Set once the stream's record exists (a retried POST waits for it), or its request is
        over without one."""
        opened = self._opened
        if opened is None:
            opened = self._opened = Flag()
        return opened

    @property
    def recorder(self) -> Recorder:
        """The store side of the stream (`recorder.py`), made on demand: a detached stream whose
        app is quiet holds none (`rest`)."""
        recorder = self._recorder
        if recorder is None:
            recorder = self._recorder = Recorder(self)
        return recorder

    @property
    def storing_from(self) -> int | None:
        """The first seq of a store write under way (`Recorder.storing_from`), or None."""
        recorder = self._recorder
        return None if recorder is None else recorder.storing_from

    @property
    def writer(self) -> Writer:
        """Writes the stream to the connection attached to it, and acts on its timers
        (`delivery.py`); made on demand: a detached quiet stream holds none (`rest`)."""
        writer = self._writer
        if writer is None:
            writer = self._writer = Writer(
                self,
                self.services,
                self.core,
                self.core.policy,
                self.timer,
                telemetry=self.services.telemetry.active(),
                stream_id=self.stream_id,
                request_id=self.request_id,
            )
        return writer

    def rest(self) -> None:
        """If no connection is attached, let go of the writer and the recorder, each if nothing
        of it is under way or held (made again when next needed: an idle detached stream lives
        on for its resume window, thousands at a time)."""
        writer = self._writer
        if writer is not None:
            if writer.conn is not None:
                return
            if writer.at_rest():
                self._writer = None
        recorder = self._recorder
        if recorder is not None and recorder.at_rest():
            self._recorder = None

    def on_timer(self, now: float) -> float | None:
        """What comes due on the stream's timer (`Writer.on_timer`; without a writer, nothing is
        attached: what needs no connection, without making one for a deadline gone stale)."""
        writer = self._writer
        if writer is not None:
            return writer.on_timer(now)
        for due in self.core.due(now):
            if due is Due.DECIDE:
                spawn(self.decide)
            elif due is Due.CHECK_EXPIRY:
                spawn(self.check_expiry)
        return self.core.next_deadline()

    __call__ = on_timer
    """The stream is its own `Timer` callback (`on_timer`)."""

    def mark_opened(self) -> None:
        """The stream's record exists: set `opened`, and let go of the app's response start kept
        in case the record could not be created (`unrecorded`: it is not needed from now on)."""
        opened = self._opened
        if opened is None:
            self._opened = _ALREADY_SET  # nobody waits on it yet: the shared set flag
        else:
            opened.set()
        self.answer_start = None

    # ------------------------------------------------------------------ hosting
    def _opens_before(self) -> float | None:
        """How long the client's answer waits for the app before the stream opens without it:
        0 where the stream must exist before the app runs (an Idempotency-Key: the client may
        lose its answer; messages recorded first; a feature layer's `Delivery`), the route's
        `upgrade_json_after_s` for another request but `initialize`, None (never) for a GET."""
        more = self._more
        if more is not _RARELY and (
            more.idempotency_key is not None or more.first_messages or more.delivery is not None
        ):
            return 0.0
        if self.kind is _REQUEST and self.method != "initialize":
            return self.core.policy.upgrade_json_after_s
        return None

    def host(self, client: Connection) -> Awaitable[tuple[str, int] | None]:
        """Start the app's request for `client` on a task of the engine's, and watch `client`
        until its connection is let go; returns how it ended (see `serve`), or None.

        Not a coroutine unless the stream opens ahead: the call's frame is then `watch_first`'s
        alone (every request in flight holds it, and a burst of them all at once)."""
        self.services.live[self.stream_id] = self
        self.first = client
        open_before_s = self._opens_before()
        if open_before_s == 0:
            return self._host_opened_ahead(client)
        try:
            if self.delivery is not None and self.delivery.deadline_s is not None:
                self.core.answer_within(self.delivery.deadline_s)
            if open_before_s is not None:
                self.upgraded = UpgradedAnswer(client)
                self.core.hold(time.monotonic(), open_before_s)
                self.arm()
        except BaseException:
            self._unhost()
            raise
        self.services.scheduler.apps.start(self.run, self.begin_app)
        return self.watch_first(client)

    async def _host_opened_ahead(self, client: Connection) -> tuple[str, int] | None:
        try:
            if self.delivery is not None and self.delivery.deadline_s is not None:
                self.core.answer_within(self.delivery.deadline_s)
            upgraded = self.upgraded = UpgradedAnswer(client)
            self.core.open_ahead()
            # Open the stream's record before the app runs (a retry or a resume can find it
            # at once), but not the client's answer: that waits for the app's status.
            await upgraded.open_record(self)
            if self.first_messages:
                await self.recorder.record_events(
                    [SSEEvent(data=p.dumps(m), event=b"message") for m in self.first_messages]
                )
            self.core.hold(time.monotonic(), STATUS_HOLD_S)
            self.arm()
        except BaseException:
            self._unhost()
            raise
        self.services.scheduler.apps.start(self.run, self.begin_app)
        return await self.watch_first(client)

    def _unhost(self) -> None:
        """Hosting failed before the app started."""
        self.timer.cancel()
        self.services.live.pop(self.stream_id, None)

    def begin_app(self, context: contextvars.Context) -> None:
        """(asyncio, run in `context`: a copy of the request's, `AppTasks.start`) Start the app's
        call as a task whose coroutine is the app's own (no frame of ours held while the app
        idles); its done callback (`app_done`) starts what follows it. Stopped (`stop_app`) by
        cancelling that task."""
        apps = self.services.scheduler.apps
        try:
            # (the task's context. No SDK configured: nothing to join.)
            self.services.telemetry.active().join(self.scope, self.body)
            if self.core.stop is _NOT_STOPPED:
                channel = _AppChannel(self)
                app: Any = self.services.app(self.scope, channel, channel)
                if type(app) is not CoroutineType:
                    app = _awaited(app)
                task = self.app_call = apps.task(app, context)
                task.add_done_callback(channel, context=context)  # (`app_done`)
                return
            exc = None  # stopped before it started: what follows it still runs
        except BaseException as error:  # (the app's call failed: `app_over` sorts it out)
            exc = error
        apps.then(self.app_over(exc))

    def app_done(self, task: asyncio.Task[Any]) -> None:
        """(asyncio) The app's task is done (its done callback, through `_AppChannel`, in its
        context): what follows it (`app_over`), counted as the app's request still. The cancel of
        ours (`stop_app` cleared `app_call` and cancelled once) is taken back: the request goes
        on as if the app had returned.

        Most requests end with nothing to await (their answer recorded and complete, their
        client's call over): their end is taken here, each step as `app_over` takes it; else
        what must be awaited runs as a task of its own (`AppTasks.then`)."""
        exc: BaseException | None
        if task.cancelled():
            if self.app_call is None and task.uncancel() == 0:
                exc = None
            else:  # not (only) ours: raised on by what follows
                try:
                    task.result()
                except asyncio.CancelledError as cancelled:
                    exc = cancelled
        else:
            exc = task.exception()
        self.app_call = None
        apps = self.services.scheduler.apps
        if self.core.stop is not _NOT_STOPPED:
            apps.let_go(task)  # (held since `stop_app`)
        if exc is not None or not self._ends_at_once():
            apps.then(self.app_over(exc))
            return
        later = False
        try:
            self._app_ended()  # (`app_finished`'s end: nothing before it to await)
            if self._after_due():
                apps.then(self._after_then_over())
                later = True
        except Exception:
            logger.exception("the app's request task failed")  # (as `AppTasks` logs a task's)
        finally:
            if not later:
                self._over_now()
                apps.ended()

    async def run(self) -> None:
        """(trio) The app's request and what follows it (`app_over`), on the engine's task."""
        exc = None
        try:
            # (This task's context: a copy of its request's. No SDK configured: nothing to join.)
            self.services.telemetry.active().join(self.scope, self.body)
            if self.core.stop is _NOT_STOPPED:
                channel = _AppChannel(self)
                try:
                    await self._call_scoped(self.services.app(self.scope, channel, channel))
                finally:
                    channel.close()
        except BaseException as error:  # (sorted out by `app_over`)
            exc = error
        await self.app_over(exc, trio=True)

    async def app_over(self, exc: BaseException | None, *, trio: bool = False) -> None:
        """What follows the app's call (`exc`: how it failed), each step once: the stream concluded,
        the first connection finished, what the request's features wait for. On asyncio a task of
        its own (`app_done`); on trio the app's."""
        try:
            try:
                if exc is not None:
                    if isinstance(exc, Exception):
                        self._app_failed(exc)
                    else:
                        raise exc  # (a cancel not ours, among them)
            finally:
                self.app_call = None
                if trio:
                    # trio: the nursery's cancel (the server stopping) must not cut it short.
                    with anyio.CancelScope(shield=True):
                        await self.app_finished()
                else:
                    # asyncio: a loop task of its own, under no cancel scope of anyio's, so a
                    # shield has nothing to hold off.
                    await self.app_finished()
            await self._after()
        finally:
            self._over_now()

    async def _after(self) -> None:
        """What follows the app's end (`app_finished`): the first connection finished, the record
        freed, what the request's features wait for (when `_after_due`)."""
        upgraded = self._more.upgraded  # (`held`, without a call: most streams hold none)
        if (
            self._writer is not None
            or self.first is not None
            or (upgraded is not None and upgraded.held is not None)
        ):
            await self.writer.finish_first()  # (else nothing to serve: no writer made for it)
        if cancellation.frees_record(self):
            await cancellation.forget(self)
        delivery = self.delivery
        if delivery is not None and delivery.after_app is not None:
            await delivery.after_app()
        if self.kind is _STANDALONE:
            await self._forget_standalone_key()

    async def _forget_standalone_key(self) -> None:
        """A session's GET stream is over (its app let it go; not when its client left): a GET of
        the session from now on opens a new one, unless it is another's already."""
        session_id = self.session_id
        if session_id is None or self.core.store_record is not _OPEN:
            return
        key = keys.standalone(session_id)
        store = self.services.store
        if await store.get_key(key) == self.stream_id:
            await store.delete_key(key)

    def _after_due(self) -> bool:
        """Whether `_after` has anything to do."""
        delivery = self.delivery
        upgraded = self._more.upgraded  # (`held`, without a call: most streams hold none)
        return (
            self._writer is not None
            or (upgraded is not None and upgraded.held is not None)
            or self.first is not None
            or cancellation.frees_record(self)
            or (delivery is not None and delivery.after_app is not None)
            or self.kind is _STANDALONE
        )

    async def _after_then_over(self) -> None:
        """(asyncio) `_after`, then the request's end, when the app's end was taken at once (`app_done`)."""
        try:
            await self._after()
        finally:
            self._over_now()

    def _over_now(self) -> None:
        """The request is over (the last step of `app_over`)."""
        self.timer.cancel()
        self.services.live.pop(self.stream_id, None)
        self.core.run = _OVER
        if self.first is not None:
            self.first.stop_listening()  # its call may be waiting for this

    def _app_failed(self, exc: Exception) -> None:
        if self.mode is Mode.STREAM or self.mode is Mode.UPGRADED:
            logger.error("app failed while streaming %s", self.stream_id, exc_info=exc)
        elif not self.core.responded:
            # As unwrapped, its client gets a 500 (`app_finished`); the server never sees it.
            logger.error("app failed before answering %s", self.stream_id, exc_info=exc)
        else:
            logger.error("app failed after starting its response", exc_info=exc)

    async def watch_first(self, first: Connection) -> tuple[str, int] | None:
        """The ASGI call of the request: watch its client until its connection is let go.

        Its answer complete (or passed through whole), its client gone, a resume taken over,
        or the app's task over: the call returns, with nothing in flight on the connection
        (a write under way is awaited) and nothing sent on it afterwards."""
        ended = False
        try:
            while not (first.finished or first.released.is_set() or self.core.run is _OVER):
                await first.listen()  # (stopped by whoever lets it go)
                if first.gone:
                    if not first.finished:  # (a client leaving a complete answer changes nothing)
                        await self.first_gone(first)
                    break
            if first.attachment is not None and first.gone:
                await first.released.wait()  # its writer was under way: it lets go next
            if first.sending:
                await first.idle()
            ended = True
        finally:
            gone = first.gone
            first.close()  # the call is over: nobody to write to, nothing of the server's kept
            if self.first is first:
                self.first = None  # (nor kept by a detached stream: its buffers, headers, flags)
            if not ended and not gone and not first.finished:
                spawn(self.first_gone, first)  # cancelled (the server stops): the client is as good as gone
        # Handed to the call, not kept by the stream (a detached one holds it for its resume window).
        writer = self._writer
        if writer is None:
            return None
        outcome, writer.outcome = writer.outcome, None
        self.rest()  # (let go, its stream may be quiet now)
        return outcome

    def app_receive(self) -> Awaitable[Message]:
        """The app's `receive` (through `_AppChannel`: no closure held for as long as the app runs).

        Once the app has read its request and has nothing left to write, on asyncio, it is the
        flag's future itself, which resolves to `http.disconnect`: an idle app awaits it with no
        coroutine of ours held (every idle detached stream's app waits here)."""
        if self.core.run is not _STARTING and running_asyncio_loop() is not None:
            recorder = self._recorder
            if recorder is not None and recorder.due_before_wait():  # (its burst is written first)
                return _then_disconnect(recorder.before_wait, self)
            waiter = self.app_disconnect.future()
            if waiter is not None:
                self.rest()
                return waiter
        return self._receive()

    async def _receive(self) -> Message:
        core = self.core
        if core.run is _STARTING:
            core.run = _RUNNING
            pending = self.request_taken()
            if pending is not None:
                await pending
            if self.core.request_read(time.monotonic()):
                self.arm()
            # (kept: the record's trace and a session's `initialize` read it later)
            return {"type": "http.request", "body": self.body, "more_body": False}
        recorder = self._recorder
        if recorder is not None:
            await recorder.before_wait()  # (what the app sent without yielding: written now)
            self.rest()
        # Never the server's `receive`: the request's own call watches its client. On asyncio the
        # flag's future itself is awaited: no coroutine of `Flag.wait` held while the app idles.
        waiter = self.app_disconnect.future()
        await (self.app_disconnect.wait() if waiter is None else waiter)
        return {"type": "http.disconnect"}

    async def last_send(self, message: Message) -> None:
        """The app's last message of its response (the app's `send` is `_AppChannel`'s)."""
        await self.on_app_send(message)
        # What a server tells an app whose response is complete: its disconnect
        # listener ends normally instead of being cancelled.
        self.disconnect_app()

    def hand_over(self) -> None:
        """The drain's budget ran out on a call that may run again (`Policy.rerun_on_loss`): stop
        the app, and leave its record running, owned by no live node, for another node to run it
        again (`Engine.rerun`) instead of ending it with an error."""
        self.core.stop = raised(self.core.stop, Stop.HANDED_OVER)
        self.stop_app()

    def fenced_by(self, owner: str | None) -> None:
        """A write of its events found the record owned by `owner`: this node was taken for lost
        (paused past its timeout, cut off from the store) and that node runs the request again.
        The app's work here is orphaned: told its client is gone and its call cancelled at once
        (another node runs it: no grace is owed), with nothing more written of it (no event, no
        error, no end: the record is the other node's), and said once. (An app that runs its
        tool apart from its HTTP call, as the `mcp` SDK's stateless mode does, is stopped only
        as far as its call: its tool's later events are dropped.)"""
        if self.core.stop is _FENCED:
            return
        self.core.stop = Stop.FENCED
        logger.warning(
            "stream %s: this node (%s) was taken for lost and node %s runs its request now; "
            "its run here stops",
            self.stream_id,
            self.services.node_id,
            owner,
        )
        self.disconnect_app()
        self.stop_app()

    def stop_app(self) -> None:
        """Stop the app's call (a cancel it ignored, or the server's drain ran out)."""
        self.core.stop = raised(self.core.stop, Stop.STOPPED)
        call, self.app_call = self.app_call, None
        if call is not None:
            if isinstance(call, asyncio.Task):
                self.services.scheduler.apps.hold(call)  # (its stream no longer does)
            call.cancel()

    async def _call_scoped(self, app: Awaitable[None]) -> None:
        """The app's call under a cancel scope (trio), which `stop_app` cancels."""
        with anyio.CancelScope() as scope:
            self.app_call = scope
            try:
                await app
            finally:
                self.app_call = None

    async def first_gone(self, first: Connection) -> None:
        """The first connection's client left: what that means is the core's (`first_gone`)."""
        actions = self.core.first_gone(
            attached=first.attachment is not None,
            busy=first.busy,
            released=first.released.is_set(),
            mode=self.mode,
            survives_close=self.delivery is not None and self.delivery.survives_close,
        )
        for action in actions:
            if action is FirstGone.RELEASE:
                await self.writer.release(first)  # the resume window starts now (or the app is cancelled)
            elif action is FirstGone.CANCEL:
                spawn(self.closed_by_client)  # before its answer opened
            else:  # a JSON answer: the client leaving means what it does unwrapped
                self.app_disconnect.set()

    def request_taken(self) -> Awaitable[None] | None:
        """The app reads the request: its auth has let it through and said who is calling,
        which the stream's record (opened before the app ran) learns now. Returns what is left
        to do in the store, if anything (no coroutine for a request that needs none)."""
        principal = self.services.principal(self.scope)
        stored = principal != self.principal and self.core.store_record is _OPEN
        self.principal = principal
        if stored or self.services.cancel_bindings.may_bind(self):
            return self._store_taken(stored)
        return None

    async def _store_taken(self, principal_changed: bool) -> None:
        if principal_changed:
            try:
                await self.services.store.update_stream(self.stream_id, principal=self.principal)
            except Exception as exc:
                if not self.services.store_outage(exc):
                    raise
        await self.services.cancel_bindings.taken(self)  # a notice may cancel it from now on

    async def serve(self, conn: Connection, *, gen: int, after_seq: int, priming: bool) -> tuple[str, int]:
        """Serve a resuming connection from this stream (`Writer.serve`)."""
        return await self.writer.serve(conn, gen=gen, after_seq=after_seq, priming=priming)

    def deliver(self, batch: list[tuple[int, bytes]]) -> Awaitable[None] | None:
        """Events were just recorded: write them to the attached connection (`Writer.deliver`,
        itself: one coroutine fewer per event). None: nothing to wait for."""
        writer = self._writer
        return None if writer is None else writer.deliver(batch)

    def arm(self) -> None:
        """The core's next deadline may have moved: tell the scheduler."""
        self.services.scheduler.arm(self.timer, self.core.next_deadline())

    async def closed_by_client(self) -> None:
        await cancellation.closed_by_client(self)

    async def check_expiry(self) -> None:
        await cancellation.check(self)

    async def cancel(self, reason: str) -> None:
        """Stop the app's work the way its protocol revision expects (`cancellation.cancel_app`)."""
        await cancellation.cancel_app(self, reason)

    def disconnect_app(self) -> None:
        """Tell the app its request is over (`http.disconnect` on its `receive`)."""
        self.app_disconnect.set()

    def drain(self) -> None:
        """This node drains: close the attached connection at will (`Writer.drain`). A stream
        with no writer has no connection: none is made for it."""
        writer = self._writer
        if writer is not None:
            writer.drain()

    async def app_finished(self) -> None:
        """The app's request is over: what it left is written and recorded, its first connection
        finished - each step as the core says (`core/ending.py`, asked again after each).
        When there is nothing to await (`_ends_at_once`, as `app_done` finds on asyncio), only its
        synchronous end runs - here too, so that both ways take the same steps."""
        if self._ends_at_once():
            self._app_ended()
            return
        try:
            recorder = self._recorder
            if recorder is not None and recorder.flush_due():  # (none: nothing left to write)
                await recorder.flush()
            core = self.core
            mode = self.mode  # (what the answer became: a write of its end may pass it through)
            done: list[End] = []  # (a list: `in` finds a member by identity, without hashing it)
            while (step := next_step(core, done, mode, self)) is not None:
                done.append(step)
                await self._end_step(step)
        finally:
            self._app_ended()
            bindings = self.services.cancel_bindings
            if bindings.bound(self.stream_id):
                await bindings.forget(self.stream_id)

    # What the core asks of the app's end (`EndFacts`), read as it is now.
    @property
    def first_waiting(self) -> bool:
        first = self.first
        return first is not None and not first.started and not first.gone

    @property
    def passed_through(self) -> bool:
        first, recorder = self.first, self._recorder
        return (
            recorder is not None
            and recorder.unavailable
            and first is not None
            and first.started
            and not first.finished
            and not first.gone
        )

    @property
    def in_cluster(self) -> bool:
        return self.services.node is not None

    async def _end_step(self, step: End) -> None:
        """Take one step of the app's end (`End`). Each write of it is in the store (and the core
        knows its answer) before the core is asked again, and before the stream is concluded:
        with write-behind, a write still under way would land after the request is over."""
        services = self.services
        if step is End.RECORD_JSON:
            assert self.upgraded is not None  # (an UPGRADED answer's)
            await self.upgraded.record_json(self)
        elif step is End.RECORD_TAIL:
            assert self.parser is not None
            with contextlib.suppress(SSEError):
                await self.recorder.record_events(self.parser.feed(b"\n\n"))
        elif step is End.HAND_OVER:
            # Owned by no live node from now on: the first node to notice runs it again.
            await services.store.update_stream(self.stream_id, owner=rerun.drained(services.node_id))
        elif step is End.RECORD_ERROR:
            shut_down = services.draining is Drain.STOPPING
            await self.recorder.record_error(SHUT_DOWN if shut_down else ENDED_WITHOUT_RESPONSE)
        elif step is End.DELETE:
            await services.store.delete_stream(self.stream_id)  # nobody is coming back for it
        elif step is End.COMPLETE:
            await self.recorder.complete()
        elif step is End.FORGET_RERUN:
            await rerun.forget(services.store, self.stream_id)  # answered: never run again
        elif step is End.ANSWER_500:
            assert self.first is not None
            await send_bytes(
                self.first.send_message, 500, b"Internal Server Error", content_type=b"text/plain"
            )
        elif step is End.END_PASSED:
            assert self.first is not None  # (what `unrecorded` passed through may hold the app's end)
            await self.first.send({"type": "http.response.body", "body": b"", "more_body": False})
        else:  # UNINDEX: the sweep has nothing to do with it (fenced: another node runs it now;
            # handed over: the sweep must find it - the core asks for neither)
            self.core.indexed = False
            await sweep.unindexed(services.store, self.stream_id)
        recorder = self._recorder
        if recorder is not None and recorder.flush_due():
            await recorder.flush()

    def _ends_at_once(self) -> bool:
        """(`app_done`) Whether `app_finished` has nothing to await: no write left, no step of the
        app's end (`core/ending.py`), no binding to forget - as most requests end."""
        recorder = self._recorder
        if recorder is not None and recorder.flush_due():
            return False
        if next_step(self.core, (), self.mode, self) is not None:
            return False
        return not self.services.cancel_bindings.bound(self.stream_id)

    def _app_ended(self) -> None:
        """The end of `app_finished`, whatever it wrote (none of it awaits)."""
        self.answer_start = None
        self.core.app_finished()
        # (a flag nobody waits on yet becomes the shared set flag)
        done = self._done
        if done is None:
            self._done = _ALREADY_SET
        else:
            done.set()
        opened = self._opened
        if opened is None:
            self._opened = _ALREADY_SET
        elif opened is not _ALREADY_SET:  # (set already when its record was created)
            opened.set()
        self.app_disconnect.set()
        writer = self._writer
        if writer is not None:
            writer.after_app()
        detached = self.services.detached
        if detached.counted:  # (counted detached: taken back. Empty while telemetry is off)
            detached.ended(self.stream_id)
        self.services.scheduler.arm(self.timer, self.core.next_deadline())  # (`arm`, inline)

    # ------------------------------------------------------------------ the app's answer
    def send_event(self, message: Message) -> Awaitable[None]:
        """The app's `send` of a body part that is not its last. The usual one - one whole event,
        recorded, its connection attached - is recorded and written by the recorder's awaitable
        itself (or joins the burst under way: nothing to wait for); anything else, and a stream
        with no connection (let go once written, `on_app_send`), goes through `on_app_send`."""
        writer = self._writer
        if writer is not None and writer.conn is not None and self.mode is Mode.STREAM:
            parser = self.parser
            body: bytes = message.get("body", b"")
            if body and (parser is None or not parser.pending):
                frame = single_event_frame(body)
                if frame is not None:
                    recorder = self._recorder
                    if recorder is None:
                        recorder = self.recorder
                    recording = recorder.record_frame(frame)
                    return _nothing() if recording is None else recording
        return self.on_app_send(message)

    async def on_app_send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            await self.on_response_start(message)
            return
        if kind != "http.response.body":
            if self.mode is Mode.PASSTHROUGH and self.first is not None:
                await self.first.send(message)
            return
        body: bytes = message.get("body", b"")
        mode = self.mode
        upgraded = self._more.upgraded
        if mode is Mode.STREAM or (upgraded is not None and mode is Mode.UPGRADED and upgraded.app_streams):
            if not body:
                return  # (the response's end, say: nothing to record, no parser to make)
            parser = self.parser
            frame = None if parser is not None and parser.pending else single_event_frame(body)
            if frame is not None:  # the usual shape, one whole event per chunk: no parsing, no copy
                recorder = self._recorder
                if recorder is None:
                    recorder = self.recorder
                recording = recorder.record_frame(frame)
                if recording is not None:  # (else queued: a burst's, written when the app yields)
                    await recording
                    self.rest()  # (written while detached: `rest` keeps all while attached)
                return
            try:
                if parser is None:
                    parser = self.parser = SSEParser(self.core.policy.max_event_bytes)
                events = parser.feed(body)
            except SSEError:
                logger.error("stream %s: the app sent an oversized event; ending the stream", self.stream_id)
                await self.recorder.record_error(
                    "the server produced an event larger than the configured limit"
                )
                self.app_disconnect.set()
                return
            if events:
                await self.recorder.record_events(events)
        elif mode is Mode.UPGRADED:
            assert upgraded is not None  # (made as its answer was held)
            await upgraded.body(self, message)
        elif mode is Mode.PASSTHROUGH:
            if self.method == "initialize":
                chunks = self.passthrough_body
                if chunks is None:
                    chunks = self.passthrough_body = []
                if sum(map(len, chunks)) < _SESSION_ANSWER_BYTES:
                    chunks.append(body)
                    if not message.get("more_body", False):
                        await self.learn_session(b"".join(chunks))
            first = self.first
            if first is not None:
                await first.send(message)
                if first.finished:
                    first.stop_listening()  # passed through whole: its call may return

    async def learn_session(self, body: bytes) -> None:
        if self.session_id is None:
            return
        try:
            answer = json.loads(body)
        except ValueError:
            return
        await self.services.sessions.remember(self, answer)

    # ------------------------------------------------------------------ how the first connection is answered
    async def on_response_start(self, message: Message) -> None:
        status = int(message["status"])
        headers: Headers = list(message.get("headers", []))
        media, sse_headers = answer_head(headers)  # (the SSE answer's headers: None for another)
        delivery = self.delivery
        upgraded = self._more.upgraded
        answer = self.core.response_started(
            status,
            media,
            upgraded=self.mode is Mode.UPGRADED,
            held=upgraded is not None and upgraded.held is not None,
            refusal_recorded=delivery is not None and delivery.refusal_recorded,
        )
        if answer is Answer.REFUSED or answer is Answer.UPGRADE:
            assert upgraded is not None  # (UPGRADED: made as its answer was held)
            if answer is Answer.REFUSED:
                await upgraded.refused(self, message)
            else:
                await upgraded.app_answered(self, status, media)
            return
        first = self.first
        if upgraded is not None:
            upgraded.held = None  # the app decided in time
        if answer is Answer.STREAM:
            if self.session_id is None:
                self.session_id = session_id(headers)
            self.mode = Mode.STREAM
            if (
                self.kind is StreamKind.REQUEST
                and self.core.origin is _LOCAL
                and not self.core.policy.rerun_on_loss
            ):
                # Its record is created with the app's first events, or once something needs it
                # sooner (the answer's head, its client gone): `Recorder.open_later`. (Not a
                # re-run, whose record exists, nor a re-runnable call, whose request is stored
                # with its record: `Recorder.open_record`.)
                self.recorder.open_later()
                self.answer_start = message
                if first is not None:
                    assert sse_headers is not None  # (a STREAM answer is SSE)
                    self.attach_first(first, sse_headers)
                return
            try:
                await self.recorder.open_record(attached=first is not None and not first.gone)
            except Exception as exc:
                if not self.services.store_outage(exc):
                    raise
                # Without a store there is nothing to resume from: the app's answer goes out as
                # it is, and says so (the store error must not reach the app's `send`, whose SSE
                # writer would swallow it and leave the client a 500).
                self.mode = Mode.PASSTHROUGH
                self.core.record_unavailable()
                if first is not None:
                    await first.send(dict(message, headers=[*headers, UNAVAILABLE_HEADER]))
                return
            if first is not None:
                assert sse_headers is not None  # (a STREAM answer is SSE)
                self.attach_first(first, sse_headers)
            return
        self.mode = Mode.PASSTHROUGH
        if self.core.tell_app_gone(Mode.PASSTHROUGH):
            self.app_disconnect.set()
        if first is not None:
            await first.send(message)

    @property
    def outlives_close(self) -> bool:
        """Whether its request goes on when its client closes (a task), or may come to (a feature
        layer's deadline may make it one)."""
        delivery = self.delivery
        return delivery is not None and (delivery.survives_close or delivery.on_deadline is not None)

    def _may_hand_over(self) -> bool:
        """Whether a drain may hand this request over through MRTR (`core/mrtr.py`): a 2026-07-28
        request of a method that may be answered `input_required`, whose close cancels it, where
        another node may serve its retry (a cluster)."""
        return (
            self.kind is StreamKind.REQUEST
            and self.services.node is not None
            and may_hand_over(self.version, self.opted_in, self.method)
        )

    async def keep_for_rerun(self) -> None:
        """The drain handed it over through MRTR: its retry follows it from another node, so
        from now on the call may be run again if this node is lost (`Policy.rerun_on_loss`), and
        its request is kept for that, as a call whose close never cancels it has it kept from its
        start (`Recorder.open_record`; deleted once it is answered)."""
        services = self.services
        if not self.core.policy.rerun_on_loss or services.node is None or self.core.origin is _RERUN:
            return  # (a re-run's request is kept already)
        bound = rerun.bound(self.principal, self.session_id, self.request_id, self.method, self.route)
        stored = rerun.capture(self.scope, self.body, services.principal, bound)
        await rerun.save(
            services.store, services.signer, self.stream_id, stored, services.running_ttl(self.core.policy)
        )

    def input_required(self) -> Callable[[int], bytes] | None:
        """The frame that ends the first connection's answer `input_required` when the drain hands
        the request over (`Writer.drain_close`), if it may be; else None."""
        if not self._may_hand_over() or self.method is None:
            return None
        state = mrtr.first_state(self.stream_id, self.principal, self.method, self.body)
        return mrtr.input_required_frame(
            self.services.signer, state, self.request_id, running_ttl(self.core.policy)
        )

    @property
    def first_attached(self) -> bool:
        writer = self._writer
        return writer is not None and writer.conn is not None

    async def open_now(self, *, attached: bool, gen: int = 1) -> bool:
        """Create the due record now (`Recorder.open_now`)."""
        return await self.recorder.open_now(attached=attached, gen=gen)

    async def unrecorded(self, batch: list[tuple[int, bytes]]) -> bool:
        """The due record could not be created with the app's first events `batch` (the store is
        down). If nothing of the answer has reached its client, it passes through, marked as
        one whose record could not open at its start is (`on_response_start`): True."""
        first, start = self.first, self.answer_start
        if (
            first is None
            or start is None
            or first.started
            or self._writer is None
            or self._writer.conn is not first
        ):
            return False
        self.answer_start = None
        self.core.record_unavailable_after_all()
        self.writer.withdraw(first)
        recorder = self.recorder
        await first.send(dict(start, headers=[*start.get("headers", []), UNAVAILABLE_HEADER]))
        for _, frame in batch:
            await first.send({"type": "http.response.body", "body": frame, "more_body": True})
        # What the app sent meanwhile joined the recorder's backlog (its mode is still STREAM):
        # it follows, in order, before the app's next sends pass through.
        while recorder.backlog:
            for frame, _ in recorder.take_backlog():
                await first.send({"type": "http.response.body", "body": frame, "more_body": True})
        self.mode = Mode.PASSTHROUGH
        self.core.store_record = Record.NONE
        recorder.unavailable = True
        return True

    def attach_first(self, client: Connection, headers: Headers) -> None:
        """Open the SSE answer on the first connection, its head held for the first event; its
        Link, if resumable, signed by the event-id prefix the record opened with (no second HMAC)."""
        if not self.core.close_cancels:
            headers.append(
                self.services.link_header(self.scope["path"], self.stream_id, 0, self.prefix or None)
            )
        client.headers = headers
        client.delivery = self.delivery
        writer = self.writer
        writer.attach(client, gen=1, cursor=0, hold_head=True, opening=writer.priming(0))

    async def decide(self) -> None:
        """The UPGRADED stream's held answer opens (`UpgradedAnswer.decide`): the app answered,
        or took too long."""
        upgraded = self._more.upgraded
        if upgraded is None:  # (never held: nothing to open)
            self.core.decided()
            return
        await upgraded.decide(self)
