"""Recording what a hosted app sends: ids from the core, events into the store.

The store is written before the event is delivered, so whatever a client has
seen can be replayed to it. With a store that pays a network round trip per
write (Redis: `write_behind`), an app sending events one by one would wait a
round trip per event: while a write is in flight, what the app sends queues up
(bounded) and goes to the store as one batch, in order. The same holds for a
burst on asyncio: an event is written from the app's `send` at once, but what the
app sends after it without yielding to the event loop waits, and goes out as one
batch (one store write, one write to its client) when it yields, or every
`WRITE_BEHIND_FRAMES`, or at its end: per event, a burst costs little more than
the app's `send` itself. Its client sees the same events, ids and order, in fewer
writes (an app blocking the event loop between two events delays the second
until it yields, as it would delay anything else).

A write the store fails because it cannot be reached is not lost: it is held, with
everything the app sends after it, and written in order once the store answers
again (`core/held_writes.py`, `store_recovery.py`). A stream whose record the store lost
meanwhile (a restart without persistence) is recorded again holding an error that
says so, so its client or task is told why instead of waiting for nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import weakref
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio

from mcp_resume_asgi.core.held_writes import Batch, HeldWrites
from mcp_resume_asgi.core.lifecycle import Origin, Record, Stop
from mcp_resume_asgi.core.stream import Phase
from mcp_resume_asgi.engine import rerun, sweep
from mcp_resume_asgi.engine.event_loop import current_asyncio_task
from mcp_resume_asgi.engine.scheduler import spawn
from mcp_resume_asgi.engine.services import SHUT_DOWN, Drain, HostedRequest
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import (
    FencedError,
    Listing,
    StoreFullError,
    StreamKind,
    StreamMeta,
    StreamState,
)
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.sse import SSEEvent, encode_payload

if TYPE_CHECKING:
    from mcp_resume_asgi.core.stream import Recorded

__all__ = [
    "LOST_TEXT",
    "REFUSED_TEXT",
    "WRITE_BEHIND_BYTES",
    "WRITE_BEHIND_FRAMES",
    "RecordedStream",
    "Recorder",
    "StreamNotRecorded",
]

logger = logging.getLogger(__name__)

# The states the paths every request takes compare and set, as globals: on Python 3.11 an enum
# member read through its class costs a few times a global's.
_OPEN = Record.OPEN
_DUE = Record.DUE
_OPENING = Record.OPENING
_FENCED = Stop.FENCED

#: Write-behind: how much the app may send ahead of the store before its `send` waits.
WRITE_BEHIND_FRAMES = 512
WRITE_BEHIND_BYTES = 1024 * 1024
#: An app that yields after each of its events is looked for bursts at least every this many events.
BURST_BACKOFF = 64
#: The answer recorded instead of a request's own when the store refused part of its stream.
REFUSED_TEXT = (
    "the server's store refused part of this request's stream (it may be full): "
    "events are missing from it, and its answer was not recorded"
)


class StreamNotRecorded(RuntimeError):
    """The app's `send` after the store refused part of its stream (`Recorder._refuse`)."""


#: The answer recorded instead of a request's own when the store lost its stream.
LOST_TEXT = (
    "the server's store lost this request's stream before its answer could be recorded "
    "(was the store restarted without persistence?); the result is not available"
)


class RecordedStream(HostedRequest, Protocol):
    """What a `Recorder` needs of the stream it records (a `HostedStream`): who and what the
    request is, the state it records into, and where recorded events go next (`deliver`)."""

    # Written by the recorder: the record's event-id prefix and that it exists (or is due, to
    # be created with the first events), the caller the app's auth named when the record
    # opened.
    prefix: bytes | None
    principal: str | None

    @property
    def body(self) -> bytes: ...
    @property
    def route(self) -> int: ...
    @property
    def method(self) -> str | None: ...
    @property
    def opted_in(self) -> bool: ...
    def fenced_by(self, owner: str | None) -> None:
        """A write found the record owned by `owner`, not this node: stop the app's work here."""

    @property
    def outlives_close(self) -> bool:
        """Its request goes on when its client closes (a task), or may come to (a feature
        layer's deadline may make it one)."""

    def mark_opened(self) -> None:
        """The stream's record exists (its `opened` flag is set)."""

    @property
    def first_attached(self) -> bool:
        """The first connection is still the stream's (a record created now says it is attached)."""

    def deliver(self, batch: list[tuple[int, bytes]]) -> Awaitable[None] | None:
        """Write `batch` to the attached connection (None: nothing to wait for)."""

    def unrecorded(self, batch: list[tuple[int, bytes]]) -> Awaitable[bool]:
        """The due record could not be created with `batch` (the store is down): pass the answer
        through instead, if nothing of it reached its client yet (True)."""


class _Bursts:
    """The recorders of one event loop whose app has not yielded since its last written event:
    one callback per loop iteration ends all their bursts (a callback per stream would be
    memory held by each stream that bursts at the same time)."""

    __slots__ = ("__weakref__", "open")

    def __init__(self) -> None:
        self.open: list[Recorder] = []

    def add(self, recorder: Recorder) -> None:
        if not self.open:
            asyncio.get_running_loop().call_soon(self.end_all)
        self.open.append(recorder)

    def end_all(self) -> None:
        recorders, self.open = self.open, []
        for recorder in recorders:
            try:
                recorder._burst_ends()
            except Exception:
                logger.exception("ending a burst failed")


#: Per event loop (a loop that is gone takes its entry with it).
_loop_bursts: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Bursts] = weakref.WeakKeyDictionary()
#: The loop last asked about (weakly) and its bursts: nearly always the one asked about next.
_last: tuple[weakref.ref[asyncio.AbstractEventLoop], _Bursts] | None = None


def _bursts_here() -> _Bursts:
    global _last
    loop = asyncio.get_running_loop()
    last = _last
    if last is not None and last[0]() is loop:
        return last[1]
    bursts = _loop_bursts.get(loop)
    if bursts is None:
        bursts = _loop_bursts[loop] = _Bursts()
    _last = (weakref.ref(loop), bursts)
    return bursts


class Recorder:
    """The store side of one hosted stream (see the module docstring)."""

    __slots__ = (
        "_bursts",
        "_caught",
        "_quiet",
        "_skip",
        "_written",
        "backlog",
        "backlog_bytes",
        "burst",
        "core",
        "fence",
        "held",
        "hosted",
        "lost",
        "opening",
        "opening_over",
        "refusal_recorded",
        "refused",
        "services",
        "storing_from",
        "stream_id",
        "telemetry",
        "unavailable",
        "write_behind",
        "writes",
        "writing",
    )

    def __init__(self, hosted: RecordedStream) -> None:
        # A proxy, not a reference: a stream and its recorder in a cycle would outlive
        # their request until a full garbage collection (under load, most of them get
        # there), where plain references free them as soon as the request ends.
        self.hosted: RecordedStream = weakref.proxy(hosted)
        # What each event needs of its stream, read here once (not through the proxy per event).
        self.core = hosted.core
        self.services = hosted.services
        self.stream_id = hosted.stream_id
        self.telemetry = hosted.services.telemetry.active()
        """What it reports through: its services', or `OFF` while no SDK is configured (decided
        when it is made, as `Writer.telemetry`)."""
        self.backlog: list[tuple[bytes, bytes]] = []
        self.backlog_bytes = 0
        self.writing = False
        """A write of the backlog is under way (what the app sends meanwhile joins the backlog)."""
        self.writes = 0
        """Calls of `write` under way."""
        self.storing_from: int | None = None
        """The first seq of the events a store write under way carries (None: none is): those
        events are not in the store yet, and that write delivers them once they are
        (`Writer._drain` leaves them to it instead of reading the store for them)."""
        self.burst = False
        """The app has not yielded since its last event was written (`_burst_begins`)."""
        self._bursts: _Bursts | Literal[False] | None = None
        """The bursts of the asyncio loop the app runs on; False under another (trio); None: not
        known yet."""
        self._quiet = 0
        """How many events to write before looking for a burst again, after one that caught none."""
        self._skip = 0
        """Events still to write before looking for a burst again."""
        self._caught = False
        """The burst under way caught events already written (`before_wait`, a full backlog)."""
        self._written: anyio.Event | None = None
        self.write_behind = hosted.store.write_behind
        self.held: HeldWrites | None = None
        """What the store failed to take and everything after it, while it cannot be reached."""
        self.lost = False
        self.refused: Exception | None = None
        """What the store answered a write made behind the app's back, if it refused one (`_refuse`)."""
        self.refusal_recorded = False
        """The store was found without the stream's record (said once)."""
        self.opening = False
        """The due record is being created (`_open_due`): what needs it waits (`wait_opening`)."""
        self.opening_over: anyio.Event | None = None
        self.unavailable = False
        """The due record could not be created: the answer passed through (`HostedStream.unrecorded`)."""
        self.fence: str | None = (
            hosted.services.node_id
            if hosted.services.node is not None
            and hosted.kind is StreamKind.REQUEST
            and hosted.policy.rerun_on_loss
            else None
        )
        """The owner its events are written as (`Store.append`'s `owner`): this node, for a call
        another node may run again once it takes this one for lost (None: not fenced)."""

    async def record_events(self, events: list[SSEEvent]) -> None:
        await self.record_frames([(encode_payload(e.data, e.event), e.data) for e in events if e.data])

    def record_frames(self, frames: list[tuple[bytes, bytes]]) -> Awaitable[None]:
        """Record `(frame without id, data)` pairs: at once, or in order soon (write-behind, or
        the rest of a burst). (Not a coroutine itself: the one it returns is the only one per
        event.)"""
        if self.refused is not None:
            return self._refuse_more()
        if self.writing or self.burst or self.write_behind:
            return self._join_backlog(frames)
        return self.write(frames, bursts=True)

    def record_frame(self, frame: tuple[bytes, bytes]) -> Awaitable[None] | None:
        """`record_frames` of the one frame the app's `send` carried; None when it joined the burst
        or the write under way without a wait (the common case of a burst: no coroutine)."""
        if self.refused is None:
            if self.writing or self.burst:
                size = self.backlog_bytes + len(frame[0])
                if len(self.backlog) + 1 < WRITE_BEHIND_FRAMES and size < WRITE_BEHIND_BYTES:
                    self.backlog.append(frame)
                    self.backlog_bytes = size
                    return None
            elif not self.write_behind:
                return self.write([frame], bursts=True)
        return self.record_frames([frame])

    async def _join_backlog(self, frames: list[tuple[bytes, bytes]]) -> None:
        if not frames:
            return
        self.backlog.extend(frames)
        self.backlog_bytes += sum(len(f) for f, _ in frames)
        if not self.writing and not self.burst:  # (write-behind) the first write: on a task of its own
            self.writing = True
            spawn(self._write_behind)
            return
        if len(self.backlog) < WRITE_BEHIND_FRAMES and self.backlog_bytes < WRITE_BEHIND_BYTES:
            return
        if not self.writing:  # a burst's worth, the app never yielding: it writes them itself
            self._caught = True
            self.writing = True
            await self._write_behind()
            if self.refused is not None:
                await self._refuse_more()
            return
        while self.writing and (
            len(self.backlog) >= WRITE_BEHIND_FRAMES or self.backlog_bytes >= WRITE_BEHIND_BYTES
        ):
            await self._wait_written()

    def _burst_begins(self) -> None:
        """The app's event was written from its `send`: until the app yields to the event loop,
        what it sends next waits in the backlog and goes out with the burst, in one store write
        and one write to its client (`_burst_ends`, or `WRITE_BEHIND_FRAMES` reached, or the app's
        end). Not under trio, whose events are written one by one as they come.

        Looking for a burst costs a callback on the event loop; an app that yields after each
        event never makes one, so after bursts that caught nothing it is looked for only every
        2nd, 4th, ... `BURST_BACKOFF`th event, and at every one again once one catches some."""
        if self._skip:
            self._skip -= 1
            return
        bursts = self._bursts
        if bursts is None:
            bursts = self._bursts = _bursts_here() if current_asyncio_task() is not None else False
        if bursts is not False:
            self.burst = True
            bursts.add(self)

    def _burst_ends(self) -> None:
        """The app yielded: what it sent since its last written event is written now."""
        self.burst = False
        if not self.backlog and not self._caught:
            self._quiet = min(self._quiet * 2 + 1, BURST_BACKOFF - 1)
            self._skip = self._quiet
            return
        self._quiet = 0
        self._caught = False
        if self.backlog and not self.writing:
            self.writing = True
            spawn(self._write_behind)

    def due_before_wait(self) -> bool:
        """Whether `before_wait` has a burst to write (else the app may wait without it)."""
        return self.burst and bool(self.backlog) and not self.writing

    async def before_wait(self) -> None:
        """The app waits on its `receive`: its burst is written now, from its own task (a task
        started for it when the app yields is memory held at once by every stream that bursts
        at once)."""
        if self.due_before_wait():
            self._caught = True
            self.writing = True
            await self._write_behind()

    def at_rest(self) -> bool:
        """Nothing is under way, queued, held or to be said: a recorder made afresh would do the
        same from here (`HostedStream.rest` lets go of it)."""
        return not (
            self.writes
            or self.writing
            or self.backlog
            or self.opening
            or self.held is not None
            or self.refused is not None
            or self.lost
            or self.unavailable
            or self.refusal_recorded
            or self._written is not None
            or self.opening_over is not None
        )

    def take_backlog(self) -> list[tuple[bytes, bytes]]:
        batch, self.backlog, self.backlog_bytes = self.backlog, [], 0
        return batch

    def _signal_written(self) -> None:
        if self._written is not None:
            self._written.set()
            self._written = None

    async def _wait_written(self) -> None:
        if self._written is None:
            self._written = anyio.Event()
        await self._written.wait()

    async def _write_behind(self) -> None:
        try:
            while self.backlog:
                await self.write(self.take_backlog())
                self._signal_written()
        except Exception as exc:  # (`write` holds what the store fails while down: this is another error)
            self._refuse(exc)
        finally:
            self.writing = False
            self._signal_written()

    def _refuse(self, exc: Exception) -> None:
        """The store refused a write made behind the app's back (a full store, say): its events
        are gone, and so must be every later one - recorded after a hole, they would reach a
        resuming client as if nothing were missing. The app's next `send` fails, as it would
        have had the write been its own, and the stream ends with an error saying so (`flush`)."""
        self.backlog, self.backlog_bytes = [], 0
        if self.refused is None:
            self.refused = exc
            logger.error(
                "stream %s: the store refused its events (%s: %s); it ends with an error saying so",
                self.hosted.stream_id,
                type(exc).__name__,
                exc,
            )

    def _fenced(self, fenced: FencedError) -> None:
        """Another node owns the record now (`HostedStream.fenced_by`): nothing more is written,
        no error either, and each later `send` of the app is where its stop lands."""
        self.backlog, self.backlog_bytes = [], 0
        self.refused, self.refusal_recorded = fenced, True
        self.hosted.fenced_by(fenced.owner)

    async def _refuse_more(self) -> None:
        if isinstance(self.refused, FencedError):
            await anyio.lowlevel.checkpoint()  # (the app's stop lands here: no error of ours)
            return
        raise StreamNotRecorded(
            f"stream {self.hosted.stream_id}: the store refused its events"
        ) from self.refused

    def flush_due(self) -> bool:
        """Whether `flush` has anything to wait for, write or say (asked first: at the end of most
        requests it has not, and then no coroutine of it is made)."""
        return self.writing or bool(self.backlog) or (self.refused is not None and not self.refusal_recorded)

    async def flush(self) -> None:
        """Wait for the write in flight, then write what is left (and, if the store refused
        some of it, the error that ends the stream: `_refuse`)."""
        while self.writing:
            await self._wait_written()
        if self.backlog and self.refused is None:
            try:
                await self.write(self.take_backlog())
            except Exception as exc:
                self._refuse(exc)
        if self.refused is not None and not self.refusal_recorded:
            self.refusal_recorded = True
            hosted = self.hosted
            if (
                hosted.kind is StreamKind.REQUEST
                and hosted.core.final_seq is None
                and hosted.core.store_record in (_DUE, _OPEN)  # (due: created holding the error)
            ):
                error = p.dumps(p.error_message(hosted.request_id, p.STREAM_ERROR, REFUSED_TEXT))
                try:
                    await self.write([(encode_payload(error, b"message"), error)])
                except Exception:
                    logger.exception("stream %s: its error could not be recorded either", hosted.stream_id)

    async def write(self, frames: list[tuple[bytes, bytes]], *, bursts: bool = False) -> None:
        """Give the frames ids, store them, note inputs and the final response, deliver.

        `bursts`: written from the app's `send`, at once: what the app sends next without
        yielding joins a burst (`_burst_begins`), unless these frames hold the request's answer
        (nothing after it is recorded: nothing to wait for).

        While the store cannot be reached, what it failed to take is held, and so is
        everything after it, in order, until `write_held` catches up."""
        hosted = self.hosted
        core = self.core
        if core.phase is Phase.FREED or core.expired:
            # Cancelled, or refused and forgotten (a write behind may come after the refusal):
            # nobody is coming back for what the app still says.
            return
        if core.stop is _FENCED:
            return
        recorded = core.record(frames)
        if recorded is None:
            return
        if bursts and recorded.final_seq is None:
            self._burst_begins()  # (before the write: one that waits for its client lets the app yield)
        services = self.services
        telemetry = self.telemetry
        if telemetry.enabled:  # (no call per event when telemetry records nothing)
            telemetry.events_recorded(len(recorded.batch))
        if self.held is not None:
            self._add_held(recorded)
            return
        policy = core.policy
        self.writes += 1  # (under way: the stream keeps this recorder, `at_rest`)
        first = recorded.batch[0][0]
        if self.storing_from is None:
            self.storing_from = first
        try:
            try:
                if self.opening:
                    await self.wait_opening()
                if core.store_record is _DUE:
                    # The record, created with the first events (and completed, if they hold the
                    # answer) in one call of the store.
                    final_seq = recorded.final_seq if not recorded.inputs else None
                    await self._open_due(
                        self._meta(attached=hosted.first_attached), recorded.batch, final_seq
                    )
                    if recorded.inputs:
                        await self._note(recorded.inputs, recorded.final_seq, recorded.final_data, None)
                    elif final_seq is not None and hosted.method == "initialize":
                        await self._answered(True, final_seq, recorded.final_data)
                elif recorded.final_seq is not None and not recorded.inputs:
                    # The answer: stored, the stream completed and out of the index of running
                    # requests (the sweep has nothing to do with it) in one call of the store.
                    unlist = keys.RUNNING_INDEX if core.indexed else None
                    completed = await services.store.append_final(
                        self.stream_id,
                        recorded.batch,
                        max_events=policy.max_events_per_stream,
                        max_bytes=policy.max_bytes_per_stream,
                        final_seq=recorded.final_seq,
                        retain_s=policy.retain_completed_s,
                        owner=self.fence,
                        unlist=unlist,
                    )
                    if unlist is not None:
                        core.indexed = False
                    if not completed or hosted.method == "initialize":  # (else nothing to do: no coroutine)
                        await self._answered(completed, recorded.final_seq, recorded.final_data)
                else:
                    await services.store.append(
                        self.stream_id,
                        recorded.batch,
                        max_events=policy.max_events_per_stream,
                        max_bytes=policy.max_bytes_per_stream,
                        owner=self.fence,
                    )
                    if recorded.inputs or recorded.final_seq is not None:
                        await self._note(recorded.inputs, recorded.final_seq, recorded.final_data, None)
            except FencedError as fenced:
                self._fenced(fenced)
                return
            except Exception as exc:
                if not services.store_outage(exc):
                    raise
                if core.store_record is _DUE and await hosted.unrecorded(recorded.batch):
                    return  # passed through, as an answer whose record could not open at its start
                self._hold(exc)
                self._add_held(recorded)
                return
            finally:
                if self.storing_from == first:
                    self.storing_from = None
            try:  # (`_deliver`, inline: this runs once per event the app sends)
                delivering = hosted.deliver(recorded.batch)
                if delivering is not None:
                    await delivering
            except Exception as exc:
                if not services.store_outage(exc):
                    raise
        finally:
            self.writes -= 1

    async def _note(
        self,
        inputs: list[list[Any]],
        final_seq: int | None,
        final_data: bytes | None,
        meta: StreamMeta | None,
    ) -> None:
        """Note recorded input requests and the final answer on the stream's record (`meta`: as
        read just before, if it was)."""
        hosted = self.hosted
        store = hosted.store
        policy = hosted.policy
        stream_id = hosted.stream_id
        if inputs:
            if meta is None:
                meta = await store.get_stream(stream_id)
            if meta is not None:
                pending = meta.pending_inputs + inputs
                issued = (meta.issued_inputs + [i for i, _ in inputs])[-1000:]
                await store.update_stream(stream_id, pending_inputs=pending, issued_inputs=issued)
                if hosted.session_id is not None:
                    ttl = hosted.services.running_ttl(policy)
                    for message_id, _ in inputs:
                        await store.set_key(keys.client_answer(hosted.session_id, message_id), stream_id, ttl)
        if final_seq is not None:
            # Complete from its answer on, and kept that long from now: the app's end, a
            # moment later, need not write the stream again.
            completed = await store.update_stream(
                stream_id,
                ttl_s=policy.retain_completed_s,
                returning=True,
                final_seq=final_seq,
                state=StreamState.COMPLETED,
            )
            await self._answered(completed is not None, final_seq, final_data)

    async def _answered(self, completed: bool, final_seq: int, final_data: bytes | None) -> None:
        """The stream was completed with its answer (`completed`), or the store had lost it."""
        hosted = self.hosted
        if not completed:
            await self._lost(final_seq)
        elif hosted.method == "initialize" and final_data is not None:
            with contextlib.suppress(ValueError):
                await hosted.services.sessions.remember(hosted, json.loads(final_data))

    async def _deliver(self, batch: list[tuple[int, bytes]]) -> None:
        """Write recorded events to the attached connection. (Catching it up reads the store: if
        that fails now, the events are stored all the same and it gets them when it resumes.)"""
        hosted = self.hosted
        try:
            delivering = hosted.deliver(batch)
            if delivering is not None:
                await delivering
        except Exception as exc:
            if not hosted.services.store_outage(exc):
                raise

    # ------------------------------------------------------------------ while the store is down
    def _hold(self, exc: BaseException) -> HeldWrites:
        """The store failed a write (`exc`): hold writes from now on, until the engine's recovery
        waiter finds it answering again."""
        hosted = self.hosted
        policy = hosted.policy
        held = self.held = HeldWrites(
            policy.max_events_per_stream, policy.max_bytes_per_stream, hosted.services.recovery.budget
        )
        # The recovery keeps the stream itself (`hosted` here is a proxy): it outlives its request
        # until what it holds is written. Every write happens while the request is hosted.
        itself = hosted.services.live.get(hosted.stream_id)
        if itself is not None:
            hosted.services.recovery.hold(itself, exc)
        else:
            logger.warning("stream %s: a write failed after its request ended; it is lost", hosted.stream_id)
        return held

    def _add_held(self, recorded: Recorded) -> None:
        held = self.held
        assert held is not None
        dropped = held.add(recorded)
        if dropped and held.dropped == dropped:
            logger.warning(
                "stream %s: more than its limits (or the engine's, over all streams) waited for the "
                "store; its oldest held events are dropped (a client resuming from before them is "
                "told so)",
                self.hosted.stream_id,
            )

    async def write_held(self) -> None:
        """Write what is held, in order, and deliver it; then write directly again. Raises the
        store's error when it still fails (what was not written stays held, for the next try)."""
        hosted = self.hosted
        held = self.held
        while held is not None and held.waiting and not hosted.core.expired:
            batch = held.take()
            try:
                events = await self._write_batch(batch)
            except BaseException:
                held.put_back(batch)
                raise
            if events and hosted.stream_id in hosted.services.live:
                await self._deliver(events)
        if held is not None:
            held.discard()  # (an expired stream's leftovers: nobody will read them)
        self.held = None

    async def _write_batch(self, batch: Batch) -> list[tuple[int, bytes]]:
        """Write one held batch; returns the events written. The stream's record says what a
        previous try wrote already (a batch can fail after its events were appended)."""
        hosted = self.hosted
        store = hosted.store
        if hosted.core.store_record is _DUE:  # (its first events were held: the record is created first)
            await self._open_due(self._meta(attached=False), [], None)
        meta = await store.get_stream(hosted.stream_id)
        if meta is None:
            await self._lost(batch.final_seq)
            return []
        events, inputs = batch.unwritten(meta.last_seq, meta.issued_inputs)
        if events:
            max_events, max_bytes = batch.limits(
                hosted.policy.max_events_per_stream, hosted.policy.max_bytes_per_stream
            )
            try:
                await store.append(
                    hosted.stream_id, events, max_events=max_events, max_bytes=max_bytes, owner=self.fence
                )
            except FencedError as fenced:
                self._fenced(fenced)
                return []
        if batch.first_seq is not None and meta.first_seq < batch.first_seq:
            await store.update_stream(hosted.stream_id, first_seq=batch.first_seq)
        await self._note(inputs, batch.final_seq, batch.final_data, meta)
        if batch.complete and batch.final_seq is None:
            await store.update_stream(
                hosted.stream_id, ttl_s=hosted.policy.retain_completed_s, state=StreamState.COMPLETED
            )
        return events

    async def complete(self) -> None:
        """The app ended a stream that has no final answer: mark it completed, now or once what
        it holds is written."""
        hosted = self.hosted
        held = self.held
        if held is None:
            try:
                await hosted.store.update_stream(
                    hosted.stream_id, ttl_s=hosted.policy.retain_completed_s, state=StreamState.COMPLETED
                )
                return
            except Exception as exc:
                if not hosted.services.store_outage(exc):
                    raise
                held = self._hold(exc)
        held.complete = True

    async def _lost(self, final_seq: int | None) -> None:
        """The store has no record of the stream while its app ran here: it lost it (a restart
        without persistence) or let it expire. What the stream held before is gone, so its
        answer cannot be vouched for: a request's stream is recorded again holding only an
        error that says so (a resuming client gets it, `tasks/get` reports the task failed
        with it) instead of staying unknown, or a task reading as cancelled."""
        hosted = self.hosted
        if hosted.core.expired or hosted.core.store_record is not _OPEN:
            return  # deleted on purpose (expired, cancelled, its session ended), or never opened
        if not self.lost:
            self.lost = True
            logger.warning(
                "stream %s: the store no longer holds it (restarted without persistence, or "
                "expired while its request ran)%s",
                hosted.stream_id,
                "; its answer is recorded as an error saying so" if final_seq is not None else "",
            )
        if final_seq is None or hosted.kind is not StreamKind.REQUEST:
            return
        meta = self._meta(attached=False)
        meta.state = StreamState.COMPLETED
        meta.last_seq = final_seq - 1
        meta.final_seq = final_seq
        error = p.error_message(hosted.request_id, p.STREAM_ERROR, LOST_TEXT)
        try:
            await hosted.store.create_stream(meta, ttl_s=hosted.policy.retain_completed_s)
        except StoreFullError:
            logger.warning("stream %s: the store is full; the error was not recorded", hosted.stream_id)
            return
        await hosted.store.append(
            hosted.stream_id,
            [(final_seq, encode_payload(p.dumps(error), b"message"))],
            max_events=hosted.policy.max_events_per_stream,
            max_bytes=hosted.policy.max_bytes_per_stream,
        )

    async def record_json_answer(self, body: bytes, status: int) -> None:
        """An UPGRADED stream's one event: the app's JSON answer `body` (or an error saying what
        it was: the app's `status`)."""
        hosted = self.hosted
        try:
            answer = json.loads(body) if body else None
        except ValueError:
            answer = None
        if isinstance(answer, dict) and answer.get("id") == hosted.request_id and p.is_response(answer):
            await self.record_events([SSEEvent(data=p.dumps(answer), event=b"message")])
        elif isinstance(answer, dict) and "error" in answer:
            fixed = dict(answer, id=hosted.request_id)
            await self.record_events([SSEEvent(data=p.dumps(fixed), event=b"message")])
        elif hosted.services.draining is Drain.STOPPING:
            await self.record_error(SHUT_DOWN)  # (the drain's budget cut the app's answer short)
        else:
            await self.record_error(f"the server answered with HTTP {status}")

    async def record_error(self, text: str) -> None:
        hosted = self.hosted
        if (
            hosted.kind is not StreamKind.REQUEST
            or hosted.core.final_seq is not None
            or hosted.core.store_record not in (_DUE, _OPEN)
        ):
            return
        error = p.error_message(hosted.request_id, p.STREAM_ERROR, text)
        await self.record_events([SSEEvent(data=p.dumps(error), event=b"message")])

    def open_later(self) -> None:
        """The stream's answer opens, its record due: created with the first events the app
        sends (`write`, one call of the store: `Store.open_with`), or before anything needs it
        - its answer's head going out, its first connection let go (`open_now`)."""
        self._identify()
        self.hosted.core.store_record = _DUE

    def _identify(self) -> None:
        hosted = self.hosted
        services = hosted.services
        # A stream nobody may resume gets no event ids (2026-07-28 removed them).
        hosted.prefix = None if hosted.core.close_cancels else services.signer.event_prefix(hosted.stream_id)
        # Now that the app has seen the request, its own auth may have said who is calling.
        hosted.principal = services.principal(hosted.scope)

    async def open_now(self, *, attached: bool, gen: int = 1) -> bool:
        """The due record is needed before the app's first event: create it (with no events), or
        wait for its creation under way. True: created here, `attached` as said (as `gen`)."""
        if self.opening:
            await self.wait_opening()
        hosted = self.hosted
        if hosted.core.store_record is not _DUE or hosted.core.expired:
            return False
        await self._open_due(self._meta(attached=attached, gen=gen), [], None)
        return True

    async def wait_opening(self) -> None:
        """Return once no creation of the due record is under way."""
        while self.opening:
            if self.opening_over is None:
                self.opening_over = anyio.Event()
            await self.opening_over.wait()

    async def _open_due(
        self, meta: StreamMeta, events: list[tuple[int, bytes]], final_seq: int | None
    ) -> None:
        """Create the due record with `events` (completed with `final_seq`), and, if it is not
        completed, list it in the index of running requests in the same call (`_listing`). Still
        due if it fails."""
        hosted = self.hosted
        policy = hosted.policy
        ttl = hosted.services.running_ttl(policy)
        listing = self._listing(ttl) if final_seq is None else None
        hosted.core.store_record = _OPENING
        self.opening = True
        try:
            added = await hosted.store.open_with(
                meta,
                ttl,
                events,
                max_events=policy.max_events_per_stream,
                max_bytes=policy.max_bytes_per_stream,
                final_seq=final_seq,
                retain_s=policy.retain_completed_s,
                listing=listing,
            )
        except BaseException:
            hosted.core.store_record = _DUE
            raise
        finally:
            self.opening = False
            if self.opening_over is not None:
                self.opening_over.set()
                self.opening_over = None
        hosted.core.store_record = _OPEN
        hosted.mark_opened()
        if listing is not None:
            hosted.core.indexed = sweep.listed(hosted.stream_id, added)

    def _to_list(self) -> bool:
        """Whether the stream is to be listed in the index of running requests (`sweep.py`): a
        request not listed yet, where a node can be lost (a cluster, or a store a restart finds
        again)."""
        hosted = self.hosted
        return (
            hosted.kind is StreamKind.REQUEST and hosted.services.node is not None and not hosted.core.indexed
        )

    def _listing(self, ttl_s: float) -> Listing | None:
        """The stream's entry in the index of running requests, made in the call of the store that
        opens its record (`Store.open_with`); None: it has none to make."""
        return sweep.listing(ttl_s) if self._to_list() else None

    async def _index(self, ttl_s: float) -> None:
        """List the request's running stream for the sweep by a call of its own (a record opened
        without `Store.open_with`), for as long as its running record is kept (`ttl_s`)."""
        if self._to_list():
            hosted = self.hosted
            hosted.core.indexed = await sweep.indexed(hosted.store, hosted.stream_id, ttl_s)

    async def open_record(self, *, attached: bool = False) -> None:
        """Create the stream's record in the store (it can be resumed from then on)."""
        hosted = self.hosted
        services = hosted.services
        self._identify()
        ttl = services.running_ttl(hosted.policy)
        if hosted.core.origin is Origin.RERUN:
            # A re-run (`Engine.rerun`): the record of the lost run goes on, taken over already
            # (and listed in the index of running requests since that run's record opened).
            hosted.core.indexed = hosted.kind is StreamKind.REQUEST
            hosted.core.store_record = _OPEN
            hosted.mark_opened()
            return
        await hosted.store.create_stream(self._meta(attached=attached), ttl_s=ttl)
        await self._index(ttl)
        if (
            hosted.policy.rerun_on_loss
            and hosted.kind is StreamKind.REQUEST
            and services.node is not None
            and rerun.may_run_again(
                hosted.version,
                hosted.session_id,
                hosted.opted_in,
                hosted.outlives_close,
                session_kept=hosted.session_id is not None
                and await services.sessions.info(hosted.session_id) is not None,
            )
        ):
            # Kept for another node to run again if this one is lost (deleted once answered).
            bound = rerun.bound(
                hosted.principal, hosted.session_id, hosted.request_id, hosted.method, hosted.route
            )
            stored = rerun.capture(hosted.scope, hosted.body, services.principal, bound)
            await rerun.save(hosted.store, services.signer, hosted.stream_id, stored, ttl)
        hosted.core.store_record = _OPEN
        hosted.mark_opened()
        if hosted.kind is StreamKind.STANDALONE and hosted.session_id is not None:
            # The app accepted the GET: from now on a second GET of the session resumes this one.
            await hosted.store.set_key(keys.standalone(hosted.session_id), hosted.stream_id, ttl)

    def _meta(self, *, attached: bool, gen: int | None = None) -> StreamMeta:
        """The stream's record as it is created (one created when its first connection is let
        go, `open_now`, is as an attached one is after `note_detached`)."""
        hosted = self.hosted
        return StreamMeta(
            stream_id=hosted.stream_id,
            kind=hosted.kind,
            session_id=hosted.session_id,
            principal=hosted.principal,
            protocol_version=hosted.version,
            path=hosted.path,
            request_id=hosted.request_id,
            method=hosted.method,
            owner=hosted.services.node_id,
            route=hosted.route,
            resumable_opt_in=hosted.opted_in,
            attached=attached,
            attach_gen=(1 if attached else 0) if gen is None else gen,
            last_contact=time.time(),
            trace=self.telemetry.trace_of(hosted.scope, hosted.body),
        )
