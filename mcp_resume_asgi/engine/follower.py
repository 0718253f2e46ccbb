"""Serving a stream that is not hosted here: read from the store, decided by a mirror core.

A stream whose app runs on another node (or has finished) reaches its client
through the store alone: the connection's own ASGI call reads what was recorded
after its cursor, writes it, and waits on the store for more. The decisions -
complete, at-will closes, keep-alives, the feature layer's deadline - come from
a `StreamCore` fed from the store's record (`observe`), the same object that
decides for hosted streams. Two duties are a follower's own: telling the store a
client is still in contact (the owner's resume window counts from it), and
noticing that the owner died with the stream unfinished (asked on the stream's schedule on
this node, which a connection taking the stream over keeps: `core/owner_watch.py`).

What a follower reports (`telemetry`): the replay - from the attach until the connection has
what was recorded before it, how long and how many events - and its at-will closes.
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING, Any

import anyio

from mcp_resume_asgi.core.stream import AT_WILL, Attachment, Due, Reason, StreamCore
from mcp_resume_asgi.engine.connection import Connection
from mcp_resume_asgi.engine.delivery import READ_BATCH, finish_answer, note_detached
from mcp_resume_asgi.engine.port import Delivery
from mcp_resume_asgi.policy import Policy
from mcp_resume_asgi.store.base import GapError, StreamKind, StreamMeta, StreamState
from mcp_resume_asgi.wire.sse import KEEPALIVE, frame_events, priming_frame

if TYPE_CHECKING:
    from mcp_resume_asgi.engine.services import StreamServices
    from mcp_resume_asgi.store.base import Store
    from mcp_resume_asgi.telemetry import Telemetry

__all__ = ["follow"]

logger = logging.getLogger(__name__)


async def follow(
    services: StreamServices[Any],
    conn: Connection,
    meta: StreamMeta,
    after_seq: int,
    policy: Policy,
    *,
    priming: bool,
) -> tuple[str, int]:
    """Serve `conn` from the store until the stream is over for it, it leaves or is closed."""
    now = time.monotonic()
    delivery = conn.delivery or Delivery()
    watches = services.owner_watches
    core = StreamCore.mirror(
        policy,
        version=meta.protocol_version,
        is_request=meta.kind is StreamKind.REQUEST,
        request_id=meta.request_id,
        opted_in=meta.resumable_opt_in,
        now=now,
        owner_watch=None if watches is None else watches.of(meta.stream_id, now),
    )
    core.attach(meta.attach_gen, after_seq, now, at_will=delivery.at_will, deadline_s=delivery.deadline_s)
    att = core.conn
    assert att is not None
    # (A retry of a call handed over through MRTR is handed over again by a drain: `core/mrtr.py`.)
    input_required = delivery.input_required is not None
    if services.drain_closes:
        # (attached during a drain: let go once its priming event is out)
        core.drain(att, input_required=input_required)
    prefix = None if core.close_cancels else services.signer.event_prefix(meta.stream_id)
    if priming and prefix is not None:
        conn.head = priming_frame(prefix + str(after_seq).encode(), policy.retry_ms)
    reason = Reason.GONE
    waiting = _Waiting(core, att, input_required)
    services.followers.add(waiting.drain)
    telemetry = services.telemetry.active()  # (decided once: what it counts, it takes back)
    telemetry.streams_attached(1)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_watch, conn, tg.cancel_scope)
            if await conn.open():
                replay = _Replay(telemetry, meta.last_seq, after_seq, now)
                reason = await _loop(services, conn, core, att, meta, prefix, replay, waiting)
            tg.cancel_scope.cancel()
    finally:
        services.followers.discard(waiting.drain)
        telemetry.streams_attached(-1)
        with anyio.CancelScope(shield=True):
            await _end(services, telemetry, conn, meta.stream_id, att, reason, policy)
    return str(reason), att.cursor


class _Replay:
    """A resume catching up with what was recorded before it attached (`up_to`)."""

    __slots__ = ("after", "started", "telemetry", "up_to")

    def __init__(self, telemetry: Telemetry, up_to: int, after: int, started: float) -> None:
        self.telemetry = telemetry
        self.up_to: int | None = up_to
        self.after = after
        self.started = started

    def caught_up(self, cursor: int) -> None:
        if self.up_to is not None and cursor >= self.up_to:
            self.up_to = None
            self.telemetry.replayed(time.monotonic() - self.started, max(cursor - self.after, 0))


class _Waiting:
    """A follower's wait on the store, which a drain interrupts (never a write: a drain closes on
    an event boundary)."""

    __slots__ = ("att", "core", "input_required", "scope")

    def __init__(self, core: StreamCore, att: Attachment, input_required: bool) -> None:
        self.core = core
        self.att = att
        self.input_required = input_required
        self.scope: anyio.CancelScope | None = None

    def drain(self) -> None:
        if self.core.drain(self.att, input_required=self.input_required) and self.scope is not None:
            self.scope.cancel()


async def _watch(conn: Connection, serving: anyio.CancelScope) -> None:
    await conn.listen()
    if conn.gone:
        serving.cancel()


async def _loop(
    services: StreamServices[Any],
    conn: Connection,
    core: StreamCore,
    att: Attachment,
    meta: StreamMeta,
    prefix: bytes | None,
    replay: _Replay,
    waiting: _Waiting,
) -> Reason:
    store = services.store
    node = services.node
    stream_id = meta.stream_id
    transform = conn.delivery.transform if conn.delivery is not None else None
    while True:
        try:
            events, meta_now = await store.read_with_meta(stream_id, att.cursor, READ_BATCH)
        except GapError as gap:
            await conn.write(services.gap_frame(meta.request_id, gap))
            return Reason.GAP
        if meta_now is not None:
            meta = meta_now
            core.observe(
                meta.last_seq,
                meta.final_seq,
                [entry[1] for entry in meta.pending_inputs],
                running=meta.state is StreamState.RUNNING,
            )
        if events:
            if not await conn.write(frame_events(prefix, events, transform)):
                return Reason.GONE
            core.wrote(att, events[-1][0], time.monotonic())
        replay.caught_up(att.cursor)
        outcome = core.followed(att, None if meta_now is None else meta.attach_gen)
        if outcome is not None:
            return outcome
        if events and att.cursor < meta.last_seq:
            continue
        now = time.monotonic()
        if (
            node is not None
            and core.owner_check_due(now)
            and meta.owner != services.node_id
            and att.cursor >= meta.last_seq
            and not await node.alive(meta.owner)
            and not await _recorded_since(store, stream_id, att.cursor)
        ):
            # Everything the dead owner recorded was delivered; nothing more will come from it.
            if await services.rerun(meta):
                continue  # run again (here, or by another node): its events come through the store
            if meta.kind is StreamKind.REQUEST and await services.end_orphan(meta, "a follower"):
                continue  # ended (here, or by another finder): its error comes through the store
            if meta.kind is not StreamKind.REQUEST:
                await services.end_orphan(meta, "a follower")
            logger.info("stream %s: its owner %s stopped", stream_id, meta.owner)
            return Reason.OWNER_DEAD
        for due in core.due(now):
            if due is Due.CLOSE:
                return att.closing or Reason.ENDED
            if due is Due.HEARTBEAT:
                await store.update_stream(stream_id, last_contact=time.time(), delivered_seq=att.cursor)
            elif due is Due.KEEPALIVE and not await conn.write(KEEPALIVE):
                return Reason.GONE
        deadline = core.next_deadline()
        timeout = math.inf if deadline is None else deadline - now
        if att.closing is not None:  # (a drain, meanwhile)
            return att.closing
        with anyio.CancelScope() as waiting.scope:
            await store.wait(stream_id, att.cursor, within_s=max(timeout, 0.001), version=meta.version)
        waiting.scope = None


async def _recorded_since(store: Store, stream_id: str, cursor: int) -> bool:
    """Whether the stream's record holds more than `cursor`, or its end, now: an owner that
    stopped gracefully (a drain) recorded its last events just before it left, maybe after
    this follower's last read."""
    meta = await store.get_stream(stream_id)
    return meta is not None and (meta.last_seq > cursor or meta.final_seq is not None)


async def _end(
    services: StreamServices[Any],
    telemetry: Telemetry,
    conn: Connection,
    stream_id: str,
    att: Attachment,
    reason: Reason,
    policy: Policy,
) -> None:
    """Finish the answer and note where it stopped (unless a newer connection took over)."""
    if reason in AT_WILL:
        telemetry.closed_at_will(str(reason))
    await finish_answer(conn, reason, att.cursor, policy)
    conn.released.set()
    await note_detached(services.store, stream_id, att)
    logger.debug("stream %s: connection detached (%s) at %s", stream_id, reason, att.cursor)
