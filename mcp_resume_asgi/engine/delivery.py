"""Delivering a hosted stream: writing it to the connection attached to it, and its timers.

Each hosted stream owns one `Writer` (`HostedStream.writer`). One writer at a
time per connection (`Connection.busy`): normally the app's own `send`, right
after the event is recorded (`deliver`), so the common case costs no task and
no trip through the store; else whoever attached it (a resume catching up) or a
scheduler action (the held head, a keep-alive, a close). A write that stalls - a
client that stopped reading - is given up after `STALL_S` and the connection
gets a task of its own from then on (`_own_writer`), so a slow reader never
holds the app.

The first connection and every resume are served the same way: `attach`, open,
`pump`, and `release` (finish the answer, with `retry:` when closed at will).
What the writer needs of its stream (the first connection, the record's event
prefix, opening a held answer, the resume window's end) it asks through
`WriterHost`, so it does not depend on the hosted stream's class.

How an answer is ended and where a connection stopped is recorded are the same
for a follower (`follower.py`, serving a stream from the store), so a client sees
no difference between the two: `finish_answer` and `note_detached` below.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from mcp_resume_asgi.core.lifecycle import Record
from mcp_resume_asgi.core.stream import AT_WILL, Attachment, Due, Reason, StreamCore
from mcp_resume_asgi.engine.connection import Connection
from mcp_resume_asgi.engine.port import Delivery
from mcp_resume_asgi.engine.scheduler import Timer, spawn
from mcp_resume_asgi.store.base import GapError
from mcp_resume_asgi.wire.sse import KEEPALIVE, frame_events, priming_frame, retry_frame

if TYPE_CHECKING:
    from mcp_resume_asgi.engine.services import StreamServices
    from mcp_resume_asgi.policy import Policy
    from mcp_resume_asgi.store.base import Store
    from mcp_resume_asgi.telemetry import Telemetry

__all__ = ["READ_BATCH", "Writer", "WriterHost", "finish_answer", "note_detached"]

logger = logging.getLogger(__name__)

# The states the paths every request takes compare and set, as globals: on Python 3.11 an enum
# member read through its class costs a few times a global's.
_OPEN = Record.OPEN

READ_BATCH = 512


class WriterHost(Protocol):
    """What a `Writer` needs of the stream it delivers (a `HostedStream`)."""

    @property
    def first(self) -> Connection | None:
        """The connection that brought the request."""

    @property
    def held(self) -> Connection | None:
        """The first connection while its answer waits for the app's decision."""

    @property
    def storing_from(self) -> int | None:
        """The first seq of the events a store write under way carries (None: none is)."""

    async def open_now(self, *, attached: bool, gen: int = 1) -> bool:
        """Create the due record now, before anything of the stream leaves the node; True:
        created here, as `attached` says."""

    @property
    def prefix(self) -> bytes | None:
        """The stream's event-id prefix (None: its events get no ids)."""

    async def decide(self) -> None:
        """Open the answer of an UPGRADED stream's held connection."""

    def input_required(self) -> Callable[[int], bytes] | None:
        """The frame that ends the first connection's answer `input_required` when a drain hands
        its request over (`core/mrtr.py`), if it may be; else None."""

    async def keep_for_rerun(self) -> None:
        """The first connection was handed over through MRTR: keep the request for a re-run."""

    async def closed_by_client(self) -> None:
        """The client's close is the request's cancel (2026-07-28): cancel it."""

    async def check_expiry(self) -> None:
        """The core's resume window passed: expire the stream unless the store says otherwise."""

    def rest(self) -> None:
        """The stream has no connection now: let go of what only a writing stream needs."""


async def finish_answer(conn: Connection, reason: Reason, cursor: int, policy: Policy) -> None:
    """End a connection's answer as its reason says: the feature layer's interim result after
    its deadline, `input_required` when a drain hands its request over (`core/mrtr.py`),
    `retry:` after an at-will close, else nothing more."""
    delivery = conn.delivery
    if reason is Reason.DEADLINE and delivery is not None and delivery.on_deadline is not None:
        await conn.finish(await delivery.on_deadline(cursor))
    elif reason is Reason.INPUT_REQUIRED and delivery is not None and delivery.input_required is not None:
        await conn.finish(delivery.input_required(cursor))
    elif reason in AT_WILL and policy.retry_ms is not None:
        await conn.finish(retry_frame(policy.retry_ms))
    else:
        await conn.finish()


def note_detached(store: Store, stream_id: str, att: Attachment) -> Awaitable[Any]:
    """Record where a connection stopped, unless a newer one has taken the stream over (the
    store's awaitable itself: no coroutine of ours around it)."""
    return store.detached(stream_id, att.gen, last_contact=time.time(), delivered_seq=max(att.cursor, 0))


class Writer:
    """The delivery of one hosted stream (see the module docstring)."""

    __slots__ = (
        "_settled",
        "answering",
        "conn",
        "core",
        "host",
        "outcome",
        "policy",
        "request_id",
        "services",
        "store",
        "stream_id",
        "telemetry",
        "timer",
    )

    def __init__(
        self,
        host: WriterHost,
        services: StreamServices[Any],
        core: StreamCore,
        policy: Policy,
        timer: Timer,
        *,
        telemetry: Telemetry,
        stream_id: str,
        request_id: Any,
    ) -> None:
        # A proxy, not a reference: the stream owns its writer, and the two in a cycle would
        # outlive their request until a full garbage collection (as `Recorder.hosted`).
        self.host: WriterHost = weakref.proxy(host)
        self.services = services
        self.telemetry = telemetry
        """What it reports through: its services', or `OFF` while no SDK is configured, decided
        when it is made (`Telemetry.active`). A connection is attached and let go within one
        writer's life (it is let go only at rest), so `streams_attached` takes back only what it
        counted; what is counted detached is kept by the counter (`DetachedStreams`)."""
        self.store = services.store
        self.core = core
        self.policy = policy
        self.stream_id = stream_id
        self.request_id = request_id
        self.conn: Connection | None = None
        """The connection attached now."""
        self.timer = timer
        """The stream's place in the scheduler (its host's: it outlives a writer let go)."""
        self.outcome: tuple[str, int] | None = None
        """How the first connection was let go, and where."""
        self.answering = 0
        """Answers being opened (`decide`), served to their end (`open_and_pump`) or ended
        (`release`, a timer's `service`) right now, by tasks of their own. What they write may
        decide what the request is - a feature layer's deadline frame makes it a task - so the
        request is not concluded while one is under way (`answers_settled`)."""
        self._settled: anyio.Event | None = None

    def at_rest(self) -> bool:
        """No connection, nothing under way or to hand over: a writer made afresh would do the
        same from here (`HostedStream.rest` lets go of it)."""
        return self.conn is None and not self.answering and self._settled is None and self.outcome is None

    # ------------------------------------------------------------------ answers under way
    def answer_begins(self) -> None:
        self.answering += 1

    def answer_ends(self) -> None:
        self.answering -= 1
        if not self.answering and self._settled is not None:
            self._settled.set()
            self._settled = None

    async def answers_settled(self) -> None:
        """Return once no connection's answer is being opened or ended (see `answering`)."""
        while self.answering:
            if self._settled is None:
                self._settled = anyio.Event()
            await self._settled.wait()

    # ------------------------------------------------------------------ attaching
    def priming(self, after_seq: int) -> bytes:
        if not self.core.resumable:  # (nor is a stream without event ids: `prefix` None)
            return b""
        return priming_frame((self.host.prefix or b"") + str(after_seq).encode(), self.policy.retry_ms)

    def arm(self) -> None:
        self.services.scheduler.arm(self.timer, self.core.next_deadline())

    def attach(
        self, conn: Connection, *, gen: int, cursor: int, hold_head: bool, opening: bytes
    ) -> Connection | None:
        """Make `conn` the stream's connection; returns the one it replaces (to be let go)."""
        delivery = conn.delivery  # (None: the defaults, `Delivery()`'s, without making one)
        now = time.monotonic()
        self.core.attach(
            gen,
            cursor,
            now,
            at_will=delivery is None or delivery.at_will,
            deadline_s=None if delivery is None else delivery.deadline_s,
            hold_head=hold_head,
            first=conn is self.host.first,
        )
        old, self.conn = self.conn, conn
        conn.attachment = self.core.conn
        conn.head = opening
        self.arm()
        if old is None and self.telemetry.enabled:  # (no call when nothing counts it)
            self._count_attached(1)
        return old if old is not conn else None

    def _count_attached(self, delta: int) -> None:
        """The stream got (+1) or lost (-1) its connection: `streams_attached`, and
        `streams_detached` while its app runs without one (called only while telemetry is on)."""
        telemetry = self.telemetry
        telemetry.streams_attached(delta)
        detached = delta < 0 and not self.core.app_done and self.core.final_seq is None
        self.services.detached.note(self.stream_id, detached)

    async def serve(self, conn: Connection, *, gen: int, after_seq: int, priming: bool) -> tuple[str, int]:
        """Serve a resuming connection from this stream (its own ASGI call waits here)."""
        opening = self.priming(after_seq) if priming else b""
        started = time.monotonic()
        old = self.attach(conn, gen=gen, cursor=after_seq, hold_head=False, opening=opening)
        att = conn.attachment
        assert att is not None
        await self.open_and_pump(conn, replaced=old)
        self.telemetry.replayed(time.monotonic() - started, max(att.cursor - after_seq, 0))
        if conn.attachment is att:
            await conn.listen()  # its own call watches it, until it leaves or is let go
        if conn.attachment is att and not conn.busy:
            await self.release(conn)
        await conn.released.wait()
        return str(att.closing or Reason.GONE), att.cursor

    async def open_and_pump(self, conn: Connection, *, replaced: Connection | None = None) -> None:
        """Open the answer of a just attached connection, then write what it is owed.

        It is held (`busy`) while its headers go out, so that an event the app sends
        meanwhile waits for the `pump` here instead of opening the answer a second time.
        """
        self.answer_begins()
        try:
            conn.busy = True
            try:
                if replaced is not None:
                    await self.let_go(replaced)
                opened = await conn.open()
            finally:
                conn.busy = False
            if opened:
                await self.pump(conn)
                if self.services.drain_closes:
                    self.drain()  # (attached during a drain: let go once its head is out)
        finally:
            self.answer_ends()

    async def let_go(self, conn: Connection) -> None:
        """Release a replaced connection, or leave that to whoever writes it now."""
        if conn.own_writer:
            conn.signal()
        elif not conn.busy:
            await self.release(conn)

    # ------------------------------------------------------------------ writing
    def deliver(self, batch: list[tuple[int, bytes]]) -> Awaitable[None] | None:
        """Events were just recorded: write them to the attached connection, if it is free
        (`pump`, the one coroutine per event; None: nothing to wait for). The usual case - it
        is owed exactly these and its answer has started - is framed here, and `pump` writes
        it with no `_drain` around it."""
        conn = self.conn
        if conn is None:
            return None
        if conn.own_writer:
            conn.signal()
            return None
        att = conn.attachment
        if att is None:
            return None
        if conn.busy:
            conn.missed = True  # (as `pump` says)
            return None
        core = self.core
        if not conn.started or batch[0][0] != att.cursor + 1 or not core.owed(att) or conn.gone:
            return self.pump(conn, batch)
        delivery = conn.delivery
        last = batch[-1][0]
        data = frame_events(self.host.prefix, batch, None if delivery is None else delivery.transform)
        return self.pump(conn, first=(data, last, core.final_seq is not None and last >= core.final_seq))

    async def pump(
        self,
        conn: Connection,
        batch: list[tuple[int, bytes]] | None = None,
        *,
        first: tuple[bytes, int, bool] | None = None,
    ) -> None:
        """Write what `conn` is owed; let it go when the core says so. (`first`: the frame of the
        events `deliver` found owed, up to a seq, and whether it ends the answer: written first,
        here, without `_drain`.)

        A connection being written by another (`busy`) is left to that writer, told to look
        again (`missed`): its read of the store may have been answered before these events
        landed there, and without a second look they would wait for the next keep-alive."""
        att = conn.attachment
        if att is None:
            return
        if conn.busy:
            conn.missed = True
            return
        conn.busy = True
        try:
            handed_over = False
            more = True
            if first is not None:
                conn.missed = False
                core = self.core
                self.writing(att)  # (`write`, inline: this runs once per event the app sends)
                written = await conn.write_interruptibly(first[0], end=first[2])
                core.write_ended(att)
                if written is None:
                    self._hand_over(conn, first[1])
                    handed_over = True
                elif written:
                    core.wrote(att, first[1], time.monotonic())
                    if self.services.drain_closes:
                        self.drain_close(conn, att)  # (as `_drain` says)
                    more = conn.missed or core.owed(att)  # (rarely: more was recorded meanwhile)
                else:
                    more = False  # (its client is gone, as `_drain` returns then)
            while more and not handed_over:
                conn.missed = False
                handed_over = not await self._drain(conn, att, batch)
                if handed_over or not conn.missed:
                    break
                batch = None
        finally:
            if not conn.own_writer:
                conn.busy = False
        if handed_over:
            return
        if self.core.app_done and conn.attachment is att:
            self.core.settle(att)  # caught up with a stream whose app is done: it has ended
        if conn.attachment is att and (att.closing is not None or conn.gone):
            await self.release(conn)

    async def _drain(self, conn: Connection, att: Attachment, batch: list[tuple[int, bytes]] | None) -> bool:
        """Write events until none are owed; False when the connection stalled and was handed over."""
        core = self.core
        transform = conn.delivery.transform if conn.delivery is not None else None
        while core.owed(att) and not conn.gone:
            if batch and batch[0][0] == att.cursor + 1:
                events = batch
            elif self.core.store_record is not _OPEN:
                # Its record is still to be created, with the very events owed (their write waits
                # for it, or failed): nothing of it is in the store to read. That write delivers
                # them, or, the store down, passes them through (`HostedStream.unrecorded`).
                return True
            elif (storing := self.host.storing_from) is not None and att.cursor >= storing - 1:
                # What it is owed is on its way to the store, in a write that delivers it once
                # stored (or, the store failing it, holds it): a read now finds none of it.
                return True
            else:
                try:
                    events = await self.store.read(self.stream_id, att.cursor, READ_BATCH)
                except GapError as gap:
                    if await self._open(conn, att):
                        await self.write(conn, att, self.services.gap_frame(self.request_id, gap))
                    core.close(att, Reason.GAP)
                    return True
                except Exception as exc:
                    if not self.services.store_outage(exc):
                        raise
                    # What it is owed is in the store alone (written, or held until it answers
                    # again): its answer ends here, with `retry:`, and its client resumes.
                    self._store_down(att)
                    return True
                if not events:
                    return True
            batch = None
            data = frame_events(self.host.prefix, events, transform)
            last = events[-1][0]
            complete = core.final_seq is not None and last >= core.final_seq
            if not conn.started:
                head, conn.head = conn.head or b"", None
                core.head_sent(att)
                if not await conn.start():
                    return True
                data = head + data
            if conn.own_writer:
                written: bool | None = await conn.write(data, end=complete)
            else:  # (`write`, inline: this runs once per event the app sends)
                self.writing(att)
                written = await conn.write_interruptibly(data, end=complete)
                core.write_ended(att)
            if written is None:
                self._hand_over(conn, last)
                return False
            if not written:
                return True
            core.wrote(att, last, time.monotonic())
            if self.services.drain_closes:
                # (a first connection attached during a drain: its head went with this)
                self.drain_close(conn, att)
        return True

    def _store_down(self, att: Attachment) -> None:
        if att.closing is None:
            logger.debug(
                "stream %s: the store cannot be read; its connection is let go at %s, to resume later",
                self.stream_id,
                att.cursor,
            )
        self.core.close(att, Reason.STORE_DOWN)

    async def _open(self, conn: Connection, att: Attachment) -> bool:
        if not conn.started:
            self.core.head_sent(att)
        return await conn.open()

    async def write(
        self, conn: Connection, att: Attachment, data: bytes, *, end: bool = False
    ) -> bool | None:
        """Write `data`: True, False when the client is gone, None when the write stalled."""
        if conn.own_writer:
            return await conn.write(data, end=end)
        self.writing(att)
        written = await conn.write_interruptibly(data, end=end)
        self.core.write_ended(att)
        return written

    def writing(self, att: Attachment) -> None:
        """A write to `att` starts (`StreamCore.writing`). Its stall deadline is armed only if a
        write is still under way when the scheduler checks, by that deadline (`Scheduler.check_by`,
        one handle for the writes of every stream): nearly every write completes at once, and a
        deadline armed per write would cost an entry and, for the earliest, a move of the
        scheduler's wake-up."""
        when = self.core.writing(att, time.monotonic())
        if when < self.timer.armed_at:  # (else the stream's timer fires before it anyway)
            scheduler = self.services.scheduler
            if not scheduler.check_by(when, self._arm_stall):
                scheduler.arm(self.timer, when)

    def _arm_stall(self) -> None:
        when = self.core.stall_at()
        if when is not None:  # (None: no write in flight, not "no deadline": `arm` is not told)
            self.services.scheduler.arm(self.timer, when)

    def _hand_over(self, conn: Connection, last: int | None = None) -> None:
        """A write to `conn` stalled: a task of its own writes it from now on. `last`: the seq of
        the last event the stalled write carries (None: no event, a head or a keep-alive)."""
        logger.debug("stream %s: a connection stalled; it gets a writer of its own", self.stream_id)
        conn.own_writer = True
        spawn(self._own_writer, conn, last)

    async def _own_writer(self, conn: Connection, last: int | None = None) -> None:
        att = conn.attachment
        try:
            # The stalled write may still reach the client (the server took it, or takes it
            # yet): what it carries counts as written once the server says so, and is never
            # written again; else it is owed still, and read back from the store.
            written = await conn.settle_pending()
            if written and last is not None and att is not None and conn.attachment is att:
                self.core.wrote(att, last, time.monotonic())
                if self.services.drain_closes:
                    self.drain_close(conn, att)
            while att is not None and conn.attachment is att and not conn.gone:
                wake = conn.wake = anyio.Event()
                await self._drain(conn, att, None)
                if att.closing is not None:
                    break
                if conn.keepalive_due:
                    conn.keepalive_due = False
                    await conn.write(KEEPALIVE)
                # (Still owed after `_drain`: the store did not have them yet. Their delivery, once
                # they land, wakes it: reading again now would only spin until then.)
                await wake.wait()
        finally:
            conn.wake = None
            conn.busy = False
            with anyio.CancelScope(shield=True):
                await self.release(conn)

    async def service(self, conn: Connection) -> None:
        """A timer's work on a connection nobody was writing: the head, a keep-alive, a close."""
        att = conn.attachment
        if att is None or conn.busy:
            return
        if att.closing is None:
            conn.busy = True
            try:
                if not conn.started:
                    # (Without its record, which the store could not create now, the head goes
                    # out with the first event instead.)
                    recorded = self.core.store_record is _OPEN or await self._open_record(conn)
                    if conn.attachment is not att:
                        return  # withdrawn meanwhile: its answer passed through (`unrecorded`)
                    self.core.head_sent(att)
                    if recorded and await conn.start():
                        head, conn.head = conn.head, None
                        if head and await self.write(conn, att, head) is None:
                            self._hand_over(conn)
                            return
                        self.core.wrote_other(att, time.monotonic())
                        if self.services.drain_closes:
                            # (its head went out alone during a drain: let go now)
                            self.drain_close(conn, att)
                elif conn.keepalive_due:
                    conn.keepalive_due = False
                    if await self.write(conn, att, KEEPALIVE) is None:
                        self._hand_over(conn)
                        return
                    self.core.wrote_other(att, time.monotonic())
            finally:
                if not conn.own_writer:
                    conn.busy = False
            self.arm()
        await self.pump(conn)

    async def _open_record(self, conn: Connection) -> bool:
        """The head of the stream's answer (its Link, its priming event id) is about to go out:
        its due record is created first, for a client that has its id may resume it. False:
        the store could not be reached (the head waits for the first event, which tries again)."""
        try:
            await self.host.open_now(attached=True)
        except Exception as exc:
            if not self.services.store_outage(exc):
                raise
            return False
        # (Not created here, it may have been by the first events' write this waited for - or
        # not: that write failed too, and the answer passed through.)
        return self.core.store_record is _OPEN

    def withdraw(self, conn: Connection) -> None:
        """Give up `conn` without answering it: the stream could not be recorded after all and
        its answer passes through (`HostedStream.unrecorded`; the core dropped it already)."""
        if self.conn is conn:
            self.conn = None
            if self.telemetry.enabled:
                self.telemetry.streams_attached(-1)
        conn.attachment = None
        conn.head = None
        conn.headers = []
        self.arm()

    async def release(self, conn: Connection) -> None:
        """Let `conn` go: finish its answer (with `retry:` when closed at will), note where it stopped."""
        att = conn.attachment
        if att is None:
            return
        conn.attachment = None
        survives = conn.delivery is not None and conn.delivery.survives_close
        reason, cancels = self.core.release(att, time.monotonic(), gone=conn.gone, survives_close=survives)
        if reason in AT_WILL:
            self.telemetry.closed_at_will(str(reason))
        if self.conn is conn:
            self.conn = None
            if self.telemetry.enabled:  # (no call when nothing counts it)
                self._count_attached(-1)
            if cancels:
                spawn(self.host.closed_by_client)
            self.arm()
        if conn is self.host.first:
            self.outcome = (reason, att.cursor)  # (a str already: no copy)
        self.answer_begins()
        try:
            noted = False
            if self.core.store_record is not _OPEN:
                # The stream goes on without its first connection (or it ends with a head, an id
                # to resume from): its due record is created now, as let go (`note_detached`).
                try:
                    noted = await self.host.open_now(attached=False, gen=att.gen)
                except Exception as exc:
                    if not self.services.store_outage(exc):
                        raise
            if reason is Reason.INPUT_REQUIRED and conn is self.host.first:
                await self.host.keep_for_rerun()  # (its retry may follow it elsewhere from now on)
            if not conn.gone:
                if not conn.started:
                    await conn.open()
                if not conn.finished or reason is Reason.DEADLINE:  # (else nothing to end it with)
                    await finish_answer(conn, reason, att.cursor, self.policy)
            if self.core.store_record is _OPEN and not noted:
                await note_detached(self.store, self.stream_id, att)
        except Exception as exc:
            if not self.services.store_outage(exc):
                raise
        finally:
            conn.released.set()
            conn.stop_listening()  # its own call watches it: it may return now
            self.answer_ends()
        if self.conn is None:
            self.host.rest()
        logger.debug("stream %s: connection let go (%s) at %s", self.stream_id, reason, att.cursor)

    def drain_close(self, conn: Connection, att: Attachment) -> bool:
        """This node drains: whether `conn` is to be closed on its next event boundary
        (`StreamCore.drain`), at will or, where its close would cancel its request, with
        `input_required` if the request may be handed over so (its `Delivery.input_required`;
        the first connection's is made now, by its stream: only a drain needs one)."""
        if att.at_will:
            return self.core.drain(att)
        delivery = conn.delivery
        if (delivery is None or delivery.input_required is None) and conn is self.host.first:
            frame = self.host.input_required()
            if frame is not None:
                delivery = conn.delivery = dataclasses.replace(delivery or Delivery(), input_required=frame)
        return self.core.drain(
            att, input_required=delivery is not None and delivery.input_required is not None
        )

    def drain(self) -> None:
        """This node drains: close the attached connection at will, on an event boundary, with
        `retry:` (`StreamCore.drain`); the app's work goes on and is recorded. A connection being
        written now is let go by its writer once the write is over."""
        conn = self.conn
        att = conn.attachment if conn is not None else None
        if conn is None or att is None or not self.drain_close(conn, att):
            return
        if conn.own_writer:
            conn.signal()
        elif not conn.busy:
            self.answer_begins()
            spawn(self._timed_service, conn)
        self.arm()

    # ------------------------------------------------------------------ time
    def on_timer(self, now: float) -> float | None:
        conn = self.conn
        for due in self.core.due(now):
            if due is Due.DECIDE:
                spawn(self.host.decide)
            elif due is Due.CHECK_EXPIRY:
                spawn(self.host.check_expiry)
            elif conn is None:
                continue
            elif due is Due.STALLED:
                conn.interrupt_write()
            else:
                if due is Due.KEEPALIVE:
                    conn.keepalive_due = True
                if conn.own_writer:
                    conn.signal()
                elif not conn.busy:
                    self.answer_begins()  # (a close it writes may be the deadline frame)
                    spawn(self._timed_service, conn)
        return self.core.next_deadline()

    async def _timed_service(self, conn: Connection) -> None:
        try:
            await self.service(conn)
        finally:
            self.answer_ends()

    def after_app(self) -> None:
        """The app is done: a connection that has everything is closed (its stream then stops
        counting as detached, and arms its timer: `HostedStream.app_finished`)."""
        conn = self.conn
        if conn is not None and conn.attachment is not None:
            self.core.settle(conn.attachment)
            if conn.own_writer:
                conn.signal()

    async def finish_first(self) -> None:
        """After the app: serve the first connection to its end (its ASGI call returns then)."""
        if self.host.held is not None and self.core.store_record is _OPEN:
            await self.host.decide()
        # A timer's `decide`, or a deadline's close, may be writing the first connection's answer
        # right now: its deadline frame makes the request a task (`survives_close`), which the
        # request's end (`cancellation.forget`) and the feature layer (`TasksMiddleware`) must know, and
        # the ASGI call must not return before that answer is complete.
        await self.answers_settled()
        first = self.host.first
        if first is None:
            return
        if first.attachment is not None:
            await self.pump(first)
            if first.attachment is not None and not first.busy:
                await self.release(first)
            await first.released.wait()
