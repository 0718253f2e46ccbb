"""Recording what a hosted app sends: ids from the core, events into the store.

The store is written before the event is delivered, so whatever a client has
seen can be replayed to it. With a store that pays a network round trip per
write (Redis: `write_behind`), an app sending events one by one would wait a
round trip per event: while a write is in flight, what the app sends queues up
(bounded) and goes to the store as one batch, in order.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import weakref
from typing import TYPE_CHECKING, Any, cast

import anyio

from mcp_resume_asgi import protocol as p
from mcp_resume_asgi.scheduler import spawn
from mcp_resume_asgi.sse import SSEEvent, encode_payload
from mcp_resume_asgi.store.base import StreamKind, StreamMeta, StreamState

if TYPE_CHECKING:
    from mcp_resume_asgi.hosted import HostedStream

logger = logging.getLogger(__name__)

#: Write-behind: how much the app may send ahead of the store before its `send` waits.
WRITE_BEHIND_FRAMES = 512
WRITE_BEHIND_BYTES = 1024 * 1024


class Recorder:
    """The store side of one hosted stream (see the module docstring)."""

    __slots__ = ("_written", "backlog", "backlog_bytes", "hosted", "writing")

    def __init__(self, hosted: HostedStream) -> None:
        # A proxy, not a reference: a stream and its recorder in a cycle would outlive
        # their request until a full garbage collection (under load, most of them get
        # there), where plain references free them as soon as the request ends.
        self.hosted = cast("HostedStream", weakref.proxy(hosted))
        self.backlog: list[tuple[bytes, bytes]] = []
        self.backlog_bytes = 0
        self.writing = False
        self._written: anyio.Event | None = None

    async def record_events(self, events: list[SSEEvent]) -> None:
        await self.record_frames([(encode_payload(e.data, e.event), e.data) for e in events if e.data])

    async def record_frames(self, frames: list[tuple[bytes, bytes]]) -> None:
        """Record `(frame without id, data)` pairs, at once or (write-behind) in order soon."""
        if not self.hosted.store.write_behind:
            await self.write(frames)
            return
        self.backlog.extend(frames)
        self.backlog_bytes += sum(len(payload) for payload, _ in frames)
        if not self.writing:
            self.writing = True
            spawn(self._write_behind)
            return
        while self.writing and (
            len(self.backlog) >= WRITE_BEHIND_FRAMES or self.backlog_bytes >= WRITE_BEHIND_BYTES
        ):
            await self._wait_written()

    def _take_backlog(self) -> list[tuple[bytes, bytes]]:
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
                await self.write(self._take_backlog())
                self._signal_written()
        except Exception as exc:
            self.backlog = []
            if not self.hosted.engine.store_outage(exc):
                raise
            logger.warning("stream %s: events lost to a store outage", self.hosted.stream_id)
        finally:
            self.writing = False
            self._signal_written()

    async def flush(self) -> None:
        """Wait for the write in flight, then write what is left."""
        while self.writing:
            await self._wait_written()
        if self.backlog:
            await self.write(self._take_backlog())

    async def write(self, frames: list[tuple[bytes, bytes]]) -> None:
        """Give the frames ids, store them, note inputs and the final response, deliver."""
        hosted = self.hosted
        if hosted.expired:
            return  # cancelled: nobody is coming back for what the app still says
        recorded = hosted.core.record(frames)
        if recorded is None:
            return
        store = hosted.store
        policy = hosted.policy
        stream_id = hosted.stream_id
        await store.append(
            stream_id,
            recorded.batch,
            max_events=policy.max_events_per_stream,
            max_bytes=policy.max_bytes_per_stream,
        )
        if recorded.inputs:
            meta = await store.get_stream(stream_id)
            if meta is not None:
                pending = meta.pending_inputs + recorded.inputs
                issued = (meta.issued_inputs + [i for i, _ in recorded.inputs])[-1000:]
                await store.update_stream(stream_id, pending_inputs=pending, issued_inputs=issued)
                if hosted.session_id is not None:
                    ttl = hosted.engine.running_ttl(policy)
                    for message_id, _ in recorded.inputs:
                        await store.set_key(input_key(hosted.session_id, message_id), stream_id, ttl)
        if recorded.final_seq is not None:
            # Complete from its answer on, and kept that long from now: the app's end, a
            # moment later, need not write the stream again.
            await store.update_stream(
                stream_id,
                ttl_s=policy.retain_completed_s,
                final_seq=recorded.final_seq,
                state=StreamState.COMPLETED,
            )
            if hosted.method == "initialize" and recorded.final_data is not None:
                with contextlib.suppress(ValueError):
                    await hosted.engine.sessions.remember(hosted, json.loads(recorded.final_data))
        await hosted.deliver(recorded.batch)

    async def record_json_answer(self) -> None:
        """An UPGRADED stream's one event: the app's JSON answer (or an error saying what it was)."""
        hosted = self.hosted
        body = b"".join(hosted.json_chunks)
        hosted.json_chunks = []
        try:
            answer = json.loads(body) if body else None
        except ValueError:
            answer = None
        if isinstance(answer, dict) and answer.get("id") == hosted.request_id and p.is_response(answer):
            await self.record_events([SSEEvent(data=p.dumps(answer), event=b"message")])
        elif isinstance(answer, dict) and "error" in answer:
            fixed = dict(answer, id=hosted.request_id)
            await self.record_events([SSEEvent(data=p.dumps(fixed), event=b"message")])
        else:
            await self.record_error(f"the server answered with HTTP {hosted.json_status}")

    async def record_error(self, text: str) -> None:
        hosted = self.hosted
        if (
            hosted.kind is not StreamKind.REQUEST
            or hosted.core.final_seq is not None
            or not hosted.meta_created
        ):
            return
        error = p.error_message(hosted.request_id, p.STREAM_ERROR, text)
        await self.record_events([SSEEvent(data=p.dumps(error), event=b"message")])

    async def open_record(self, *, attached: bool = False) -> None:
        """Create the stream's record in the store (it can be resumed from then on)."""
        hosted = self.hosted
        engine = hosted.engine
        # A stream nobody may resume gets no event ids (2026-07-28 removed them).
        hosted.prefix = None if hosted.core.close_cancels else engine.signer.event_prefix(hosted.stream_id)
        # Now that the app has seen the request, its own auth may have said who is calling.
        hosted.principal = engine.principal(hosted.scope)
        meta = StreamMeta(
            stream_id=hosted.stream_id,
            kind=hosted.kind,
            session_id=hosted.session_id,
            principal=hosted.principal,
            protocol_version=hosted.version,
            path=hosted.path,
            request_id=hosted.request_id,
            method=hosted.method,
            owner=engine.node_id,
            route=hosted.route,
            resumable_opt_in=hosted.opted_in,
            attached=attached,
            attach_gen=1 if attached else 0,
            last_contact=time.time(),
        )
        ttl = engine.running_ttl(hosted.policy)
        await hosted.store.create_stream(meta, ttl_s=ttl)
        hosted.meta_created = True
        hosted.opened.set()
        if hosted.kind is StreamKind.STANDALONE and hosted.session_id is not None:
            # The app accepted the GET: from now on a second GET of the session resumes this one.
            await hosted.store.set_key(engine.standalone_key(hosted.session_id), hosted.stream_id, ttl)


def input_key(session_id: str, message_id: Any) -> str:
    return f"input:{session_id}:{json.dumps(message_id)}"
