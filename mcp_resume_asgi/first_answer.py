"""How the connection that brought a request is answered, decided by the app's response start.

The first thing the app sends (`http.response.start`) settles what its client
gets: an SSE stream is recorded and relayed (`Mode.STREAM`, the answer opened on
the first connection with the stream's `Link`); anything else passes through
untouched (`Mode.PASSTHROUGH`). A stream that had to exist before the app
answered (`Mode.UPGRADED`: an `Idempotency-Key`, SEP-975, resume tokens,
`upgrade_json_after_s`) holds its first connection until the app's status is
known: a refusal (404, 400) reaches the client as that status and the stream is
forgotten; anything else opens an SSE answer of the engine's own (`decide`),
unless a retry took the stream over meanwhile (`superseded`).

The decision itself is `core/answer_mode.py`'s, taken through the stream's core
(`StreamCore.response_started`, which moves its phase); this is its I/O, kept
apart from the rest of hosting (`hosted.py`: the app call and what it sends) as
the half of `HostedStream` that acts on it.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from starlette.types import Message, Scope

from mcp_resume_asgi.connection import Connection, Delivery, Flag
from mcp_resume_asgi.core.answer_mode import Answer, Mode, content_type, session_id, stream_headers
from mcp_resume_asgi.core.stream import Reason
from mcp_resume_asgi.sse_answers import finish_answer
from mcp_resume_asgi.wire.headers import Headers
from mcp_resume_asgi.wire.replies import UNAVAILABLE_HEADER
from mcp_resume_asgi.writer import Writer

if TYPE_CHECKING:
    from mcp_resume_asgi.recording import Recorder

__all__ = ["FirstAnswer", "Mode"]

logger = logging.getLogger(__name__)


class FirstAnswer(Writer):
    """The half of `HostedStream` that decides how its first connection is answered."""

    # Provided by `HostedStream`:
    scope: Scope
    path: str
    session_id: str | None
    principal: str | None
    recorder: Recorder
    mode: Mode | None
    delivery: Delivery | None
    idempotency_key: str | None
    app_started: bool
    app_disconnect: Flag
    left_early: bool
    json_status: int
    upgraded_sse: bool

    async def on_response_start(self, message: Message) -> None:
        self.app_started = True
        status = int(message["status"])
        headers: Headers = list(message.get("headers", []))
        media = content_type(headers)
        delivery = self.delivery
        answer = self.core.response_started(
            status,
            media,
            upgraded=self.mode is Mode.UPGRADED,
            held=self.held is not None,
            refusal_recorded=delivery is not None and delivery.refusal_recorded,
        )
        if answer is Answer.REFUSED:
            await self.refused_before_opening(message)
            return
        if answer is Answer.UPGRADE:
            principal = self.engine.principal(self.scope)
            if principal != self.principal:
                # Opened before the app ran: its auth has only now said who is calling.
                self.principal = principal
                await self.store.update_stream(self.stream_id, principal=principal)
            self.json_status = status
            self.upgraded_sse = media == b"text/event-stream"
            await self.decide()
            return
        first = self.first
        self.held = None  # the app decided in time
        if answer is Answer.STREAM:
            if self.session_id is None:
                self.session_id = session_id(headers)
            self.mode = Mode.STREAM
            try:
                await self.recorder.open_record(attached=first is not None and not first.gone.is_set())
            except Exception as exc:
                if not self.engine.store_outage(exc):
                    raise
                # Without a store there is nothing to resume from: the app's answer goes out as
                # it is, and says so (the store error must not reach the app's `send`, whose SSE
                # writer would swallow it and leave the client a 500).
                self.mode = Mode.PASSTHROUGH
                self.core.record_unavailable()
                if first is not None:
                    await first.send(dict(message, headers=[*headers, UNAVAILABLE_HEADER]))
                return
            extra = stream_headers(headers)
            if not self.core.close_cancels:
                extra.append(self.engine.link_header(self.path, self.stream_id, 0))
            if first is not None:
                self.attach_first(first, extra)
            return
        self.mode = Mode.PASSTHROUGH
        if self.left_early:
            self.app_disconnect.set()
        if first is not None:
            await first.send(message)

    def attach_first(self, client: Connection, headers: Headers) -> None:
        """Open the SSE answer on the first connection, its head held for the first event."""
        client.headers = headers
        client.delivery = self.delivery
        self.attach(client, gen=1, cursor=0, hold_head=True, opening=self.priming(0))

    async def decide(self) -> None:
        """The UPGRADED stream's answer opens: the app answered, or took too long."""
        held, self.held = self.held, None
        self.core.decided()
        if held is None:
            return
        # Under way from here (the store is asked first): the app may finish meanwhile, and its
        # request must not be concluded before this answer is (`Writer.answers_settled`).
        self.answer_begins()
        try:
            await self._open_held(held)
        finally:
            self.answer_ends()

    async def _open_held(self, held: Connection) -> None:
        if not self.meta_created:
            await self.upgrade()
        if held.gone.is_set():
            return
        held.headers = self.engine.sse_headers(
            self.session_id, self.path, self.stream_id, 0, link=not self.core.close_cancels
        )
        held.delivery = self.delivery
        if self.conn is not None:
            await self.superseded(held)
            return
        meta = await self.store.attach(self.stream_id, time.time())
        if meta is None:  # deleted while held (its request cancelled): an answer with nothing in it
            if await held.open():
                await held.finish()
            return
        self.attach(held, gen=meta.attach_gen, cursor=0, hold_head=False, opening=self.priming(0))
        await self.open_and_pump(held)

    async def superseded(self, held: Connection) -> None:
        """A retry (the same Idempotency-Key) took the stream over while the first connection's
        answer waited for the app: the retry keeps it, and the first is answered as any replaced
        connection is (it must not take the stream back, and its ASGI call needs an answer)."""
        if await held.open():
            await finish_answer(held, Reason.REPLACED, 0, self.policy)
        held.released.set()
        self.outcome = (str(Reason.REPLACED), 0)
        logger.debug("stream %s: a retry took it over before its first answer opened", self.stream_id)

    async def upgrade(self) -> None:
        """Open the stream's record for a request the app has not answered (yet)."""
        self.mode = Mode.UPGRADED
        await self.recorder.open_record()

    async def refused_before_opening(self, start: Message) -> None:
        """The app refused a request whose stream was opened ahead of its answer (a 404
        "Session not found", a 400): the client gets that status, not an event in a 200
        (stock clients start a new session only on an HTTP 404). Nothing ran, so the
        stream and its Idempotency-Key are forgotten: a retry is a new request."""
        self.mode = Mode.PASSTHROUGH
        held, self.held = self.held, None
        self.core.refused()
        # Freed from now on: a retry coming meanwhile is served from the store (which is
        # deleting it), not attached here.
        self.meta_created = False
        try:
            await self.store.delete_stream(self.stream_id)
            if self.idempotency_key is not None:
                await self.store.delete_key(self.idempotency_key)
        except Exception as exc:
            if not self.engine.store_outage(exc):
                raise
        if held is not None:
            await held.send(start)
