"""The answer of a stream opened before, or instead of, the app's answer (`Mode.UPGRADED`).

A request whose stream had to exist before the app answered (an Idempotency-Key, SEP-975,
resume tokens, messages recorded first: opened ahead) or whose app takes longer than the
route's `upgrade_json_after_s` (held) has its client's answer held for the app's decision.
A refusal that comes in time reaches the client as the app's status, and the stream is
forgotten (`refused`: a retry is a new request); else the stream's own SSE answer opens
(`decide`), and the app's answer becomes its content: its events as they come if it answered
with SSE, else its JSON body as the stream's one event (`body`, `record_json`).

The hosted stream makes one only for such a request (most requests never hold their answer),
and it keeps what only they need. It knows its stream as the argument of each call
(`UpgradingHost`) and holds no reference back: no cycle for the collector to find.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Protocol

from starlette.types import Message

from mcp_resume_asgi.core.answer_mode import EVENT_STREAM, Mode
from mcp_resume_asgi.core.lifecycle import Record
from mcp_resume_asgi.core.stream import Reason
from mcp_resume_asgi.engine.connection import Connection
from mcp_resume_asgi.engine.delivery import finish_answer

if TYPE_CHECKING:
    from mcp_resume_asgi.core.stream import StreamCore
    from mcp_resume_asgi.engine.delivery import Writer
    from mcp_resume_asgi.engine.port import Delivery
    from mcp_resume_asgi.engine.recorder import Recorder
    from mcp_resume_asgi.engine.services import StreamServices

__all__ = ["UpgradedAnswer", "UpgradingHost"]

logger = logging.getLogger(__name__)


class UpgradingHost(Protocol):
    """What an `UpgradedAnswer` needs of its stream (a `HostedStream`)."""

    mode: Mode | None
    """What the first connection's answer became (set UPGRADED, or PASSTHROUGH on a refusal)."""
    principal: str | None
    """Who calls, as the app's auth says once it ran (the record opened ahead learns it)."""

    @property
    def services(self) -> StreamServices[Any]: ...
    @property
    def core(self) -> StreamCore: ...
    @property
    def scope(self) -> Any: ...
    @property
    def stream_id(self) -> str: ...
    @property
    def session_id(self) -> str | None: ...
    @property
    def path(self) -> str: ...
    @property
    def prefix(self) -> bytes | None: ...
    @property
    def delivery(self) -> Delivery | None: ...
    @property
    def idempotency_key(self) -> str | None:
        """The store key of the request's `Idempotency-Key`, claimed for its stream."""

    @property
    def first_attached(self) -> bool: ...
    @property
    def writer(self) -> Writer: ...
    @property
    def recorder(self) -> Recorder: ...


class UpgradedAnswer:
    """The held answer of one UPGRADED stream, and the app's answer that becomes its content."""

    __slots__ = ("chunks", "held", "media", "size", "status")

    def __init__(self, held: Connection) -> None:
        self.held: Connection | None = held
        """The first connection while its answer waits for the app's decision."""
        self.status = 200
        """The app's status (said in the error recorded if its answer is no JSON-RPC answer)."""
        self.media = b""
        """The media type of the app's answer (`EVENT_STREAM`: its events are recorded as they come)."""
        self.chunks: list[bytes] | None = None
        """The app's JSON answer as it comes (what fits in one event, `Policy.max_event_bytes`)."""
        self.size = 0

    @property
    def app_streams(self) -> bool:
        """The app answered with SSE: its events are the stream's, recorded as they come."""
        return self.media == EVENT_STREAM

    async def open_record(self, host: UpgradingHost) -> None:
        """Open the stream's record for a request the app has not answered (yet)."""
        host.mode = Mode.UPGRADED
        await host.recorder.open_record()

    async def app_answered(self, host: UpgradingHost, status: int, media: bytes) -> None:
        """The app started its answer (not a refusal that comes in time): the held answer opens."""
        services = host.services
        principal = services.principal(host.scope)
        if principal != host.principal:
            # Opened before the app ran: its auth has only now said who is calling.
            host.principal = principal
            await services.store.update_stream(host.stream_id, principal=principal)
        self.status = status
        self.media = media
        await self.decide(host)

    async def decide(self, host: UpgradingHost) -> None:
        """The held answer opens: the app answered, or took too long."""
        held, self.held = self.held, None
        host.core.decided()
        if held is None:
            return
        # Under way from here (the store is asked first): the app may finish meanwhile, and its
        # request must not be concluded before this answer is (`Writer.answers_settled`).
        writer = host.writer
        writer.answer_begins()
        try:
            await self._open_held(host, held)
        finally:
            writer.answer_ends()

    async def _open_held(self, host: UpgradingHost, held: Connection) -> None:
        if host.core.store_record is not Record.OPEN:
            await self.open_record(host)
        if held.gone:
            return
        held.headers = host.services.sse_headers(
            host.session_id,
            host.path,
            host.stream_id,
            0,
            link=not host.core.close_cancels,
            prefix=host.prefix or None,
        )
        held.delivery = host.delivery
        if host.first_attached:
            await self._superseded(host, held)
            return
        meta = await host.services.store.attach(host.stream_id, time.time())
        if meta is None:  # deleted while held (its request cancelled): an answer with nothing in it
            if await held.open():
                await held.finish()
            return
        writer = host.writer
        writer.attach(held, gen=meta.attach_gen, cursor=0, hold_head=False, opening=writer.priming(0))
        await writer.open_and_pump(held)

    async def _superseded(self, host: UpgradingHost, held: Connection) -> None:
        """A retry (the same Idempotency-Key) took the stream over while the first connection's
        answer waited for the app: the retry keeps it, and the first is answered as any replaced
        connection is (it must not take the stream back, and its ASGI call needs an answer)."""
        if await held.open():
            await finish_answer(held, Reason.REPLACED, 0, host.core.policy)
        host.writer.outcome = (Reason.REPLACED, 0)
        held.released.set()
        held.stop_listening()  # its call may return
        logger.debug("stream %s: a retry took it over before its first answer opened", host.stream_id)

    async def refused(self, host: UpgradingHost, start: Message) -> None:
        """The app refused the request before its answer opened (a 404 "Session not found", a
        400): the client gets that status, not an event in a 200 (stock clients start a new
        session only on an HTTP 404). Nothing ran, so the stream and its Idempotency-Key are
        forgotten: a retry is a new request."""
        host.mode = Mode.PASSTHROUGH
        held, self.held = self.held, None
        core = host.core
        core.refused()
        # Freed from now on: a retry coming meanwhile is served from the store (which is
        # deleting it), not attached here.
        core.store_record = Record.NONE
        services = host.services
        try:
            await services.store.delete_stream(host.stream_id)
            if host.idempotency_key is not None:
                await services.store.delete_key(host.idempotency_key)
        except Exception as exc:
            if not services.store_outage(exc):
                raise
        if held is not None:
            await held.send(start)

    async def body(self, host: UpgradingHost, message: Message) -> None:
        """A part of the app's JSON answer: kept while it fits in one event, recorded at its end."""
        body: bytes = message.get("body", b"")
        self.size += len(body)
        if self.size <= host.core.policy.max_event_bytes:
            if self.chunks is None:
                self.chunks = []
            self.chunks.append(body)
        if not message.get("more_body", False):
            await self.record_json(host)

    async def record_json(self, host: UpgradingHost) -> None:
        """The stream's one event: the app's JSON answer (`Recorder.record_json_answer`)."""
        chunks, self.chunks = self.chunks, None
        await host.recorder.record_json_answer(b"".join(chunks or ()), self.status)
