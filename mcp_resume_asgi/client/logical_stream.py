"""One request's logical stream: the physical responses of a resumed answer, read and stitched into one.

Why apart from the transport: the transport decides *which* POSTs get a logical
stream; this is what one of them does for its whole life - read each SSE (or
JSON) response, hand the consumer the events, and when a response ends before
the request's own response came, send the next request (a resume, or the
buffered answers to the server's requests) and read on. Every decision along the
way is :class:`~.stream_state.StreamState`'s; what is left here is the I/O and
its two moments of waiting:

* reading the server: the only place we wait for it. The read may be
  interrupted from another task - the one that captures the application's last
  answer to a server request - when the server keeps its stream open for
  ``flush_after_s`` after all answers are there (a deadline on the read's cancel
  scope, no timer task);
* a ``204`` that says the server waits for those answers: we wait for the
  application to POST them.

When the stream cannot go on, the consumer gets one last event with a JSON-RPC
error for its request (``error_event``) instead of an exception.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any, Protocol

import anyio
import httpx

from .answers import answers_body
from .cancel_notices import CancelNotice
from .errors import GiveUp
from .links import stream_link
from .messages import IdKey, error_event, media_type
from .resumable_requests import TokenBook
from .sse_reader import SSEError, SSEParser, closing_iterator
from .stream_state import UNANSWERED_STATUS, Limits, Refused, StreamState, is_continuation

logger = logging.getLogger(__name__)


class Settings(Limits, Protocol):
    """What a stream reads of its transport: how to send, and the limits it decides by."""

    @property
    def inner(self) -> httpx.AsyncBaseTransport: ...
    @property
    def max_event_bytes(self) -> int: ...


class LogicalByteStream(httpx.AsyncByteStream):
    """The response body handed to the consumer: the logical stream's SSE bytes."""

    def __init__(self, stream: LogicalStream) -> None:
        self._stream = stream
        self._iterator: AsyncGenerator[bytes, None] | None = None

    def __aiter__(self) -> AsyncIterator[bytes]:
        if self._iterator is not None:
            raise httpx.StreamConsumed()
        self._iterator = self._stream.run()
        return self._iterator

    async def aclose(self) -> None:
        iterator = self._iterator
        if iterator is not None:
            try:
                await iterator.aclose()
            except RuntimeError:  # being iterated by another task right now
                logger.debug("logical stream closed while being read", exc_info=True)
        await self._stream.aclose()


class LogicalStream:
    """The I/O of one request's logical stream. Small on purpose, and dropped when it ends."""

    def __init__(
        self,
        settings: Settings,
        request: httpx.Request,
        request_id: str | int,
        response: httpx.Response,
        *,
        tokens: TokenBook,
        live: weakref.WeakSet[LogicalStream],
        cancel_notice: CancelNotice | None = None,
    ) -> None:
        self._settings = settings
        self._live = live
        self._cancel_notice = cancel_notice
        """Sent if the stream closes before the request's response (`cancel_notices.py`)."""
        session_id = request.headers.get("mcp-session-id")
        request_headers = request.headers.raw
        if session_id is None and (given := response.headers.get("mcp-session-id")) is not None:
            # An `initialize`: its own answer names the session, which a resume of its stream
            # names too (a node other than the one that answered checks it against the stream's).
            session_id = given
            request_headers = [*request_headers, (b"mcp-session-id", given.encode("latin-1"))]
        self.state = StreamState(
            settings,
            mcp_url=request.url,
            session_id=session_id,
            request_id=request_id,
            request_headers=request_headers,
            link=stream_link(response, request.url),
            tokens=tokens,
        )
        timeout = request.extensions.get("timeout")
        self._extensions: dict[str, Any] = {"timeout": timeout} if timeout is not None else {}
        self._first: httpx.Response | None = response
        self._current: httpx.Response | None = None
        self._answered: anyio.Event | None = None
        self._read_scope: anyio.CancelScope | None = None
        self.closed = False

    @property
    def request_id(self) -> str | int:
        return self.state.request_id

    @property
    def link(self) -> httpx.URL | None:
        return self.state.link

    # -- answers from the application (called from other tasks) ---------------------------------

    def accepts_answer(self, url: httpx.URL, session_id: str | None, key: IdKey) -> bool:
        state = self.state
        return (
            not self.closed
            and state.link is not None
            and state.answers.awaits(key)
            and url == state.mcp_url
            and session_id == state.session_id
        )

    def capture(self, key: IdKey, message: dict[str, Any]) -> None:
        now = anyio.current_time()
        if self.state.answers.capture(key, message, now):
            scope = self._read_scope
            if scope is not None:
                scope.deadline = min(scope.deadline, now + self._settings.flush_after_s)
            if self._answered is not None:
                self._answered.set()

    async def _wait_answered(self) -> None:
        while not self.state.answers.all_answered():
            self._answered = anyio.Event()
            await self._answered.wait()
        self._answered = None

    # -- the consumer's side ----------------------------------------------------------------------

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._live.discard(self)
        if self._cancel_notice is not None and not self.state.answered:
            await self._cancel_notice.send()  # given up: a close alone would not cancel it
        self.state.clear()
        for response in (self._first, self._current):
            if response is not None:
                with anyio.CancelScope(shield=True):
                    await response.aclose()
        self._first = self._current = None

    async def run(self) -> AsyncGenerator[bytes, None]:
        """Yield the SSE bytes of the logical stream, reconnecting as needed, then end."""
        response = self._first
        self._first = None
        try:
            while response is not None:
                self._current = response
                try:
                    if media_type(response) == "text/event-stream":
                        outcome = "closed"
                        async with aclosing(self._read_sse(response)) as events:
                            async for chunk, step in events:
                                outcome = step
                                if chunk:
                                    yield chunk
                        if outcome == "final":
                            return
                        flush = outcome == "flush"
                    else:
                        chunk, final = await self._read_json(response)
                        if chunk:
                            yield chunk
                        if final:
                            return
                        self.state.count_failed_attempt()
                        flush = False
                    # Also on a flush: the interrupted read has left that connection unusable
                    # (httpcore closes a connection whose read is cancelled), and the answers'
                    # POST carries Last-Event-ID, so the continuation starts where we are.
                    await self._close_current()
                    response = await self._reconnect(flush=flush)
                except GiveUp as exc:
                    logger.warning("giving up on the stream of request %r: %s", self.request_id, exc)
                    yield error_event(self.request_id, str(exc))
                    return
        finally:
            await self.aclose()

    async def _close_current(self) -> None:
        response, self._current = self._current, None
        if response is not None:
            with anyio.CancelScope(shield=True):
                await response.aclose()

    async def _read_sse(self, response: httpx.Response) -> AsyncGenerator[tuple[bytes, str], None]:
        """Yield ``(sse bytes, outcome)``; the last outcome is final / closed / flush."""
        state = self.state
        parser = SSEParser(self._settings.max_event_bytes)
        got_events = broke = False
        new_before = state.new_events
        try:
            async with closing_iterator(response.aiter_bytes()) as chunks:
                while True:
                    # The only place we wait for the server: the flush safety net may
                    # interrupt it (from the task capturing the last answer, see capture()).
                    with anyio.CancelScope() as scope:
                        self._read_scope = scope
                        deadline = state.flush_deadline()
                        if deadline is not None:
                            scope.deadline = deadline
                        try:
                            chunk: bytes | None = await chunks.__anext__()
                        except StopAsyncIteration:
                            chunk = None
                        finally:
                            self._read_scope = None
                    if scope.cancelled_caught:
                        logger.info("server kept the stream open with all answers buffered: sending them")
                        yield b"", "flush"
                        return
                    if chunk is None:
                        break
                    out: list[bytes] = []
                    final = False
                    for event in parser.feed(chunk):
                        got_events = True
                        encoded, final = state.receive_event(event)
                        if encoded:
                            out.append(encoded)
                        if final:
                            break
                    if out or final:
                        yield b"".join(out), "final" if final else "more"
                    if final:
                        return
        except SSEError as exc:
            raise GiveUp(str(exc)) from exc
        except httpx.TransportError as exc:
            logger.info("stream of request %r broke: %r", self.request_id, exc)
            broke = True
        state.connection_ended(new_events_before=new_before, got_events=got_events, broke=broke)
        logger.debug("stream of request %r closed by the server before its response", self.request_id)
        yield b"", "closed"

    async def _read_json(self, response: httpx.Response) -> tuple[bytes, bool]:
        """A JSON answer on an internal request: re-emit its messages as events."""
        limit = self._settings.max_event_bytes
        body = bytearray()
        try:
            async with closing_iterator(response.aiter_bytes()) as chunks:
                async for chunk in chunks:
                    body += chunk
                    if len(body) > limit:
                        raise GiveUp(f"JSON answer larger than the limit of {limit} bytes")
        except httpx.TransportError as exc:
            logger.info("JSON answer of request %r broke: %r", self.request_id, exc)
            return b"", False
        return self.state.receive_json(bytes(body))

    # -- reconnecting -----------------------------------------------------------------------------

    async def _send(self, method: str, url: httpx.URL, content: bytes | None = None) -> httpx.Response | str:
        """Send an internal request; a network failure comes back as its description."""
        headers = self.state.headers(post=method == "POST")
        request = httpx.Request(method, url, headers=headers, content=content, extensions=self._extensions)
        try:
            return await self._settings.inner.handle_async_request(request)
        except httpx.TransportError as exc:
            return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__

    async def _reconnect(self, *, flush: bool) -> httpx.Response:
        """Get the next physical response of the logical stream (2xx, SSE or JSON)."""
        state = self.state
        state.check_budget()
        while True:
            if flush:
                response = await self._flush()
                if response is not None:
                    return response
                flush = False
                continue
            await anyio.sleep(state.delay_s())
            resume = state.next_resume()
            what = "requests/resume of request" if resume.by_token else "resuming request"
            logger.debug("%s %r after event %r", what, self.request_id, state.last_event_id)
            sent = await self._send(resume.method, resume.url, resume.body)
            if isinstance(sent, str):
                state.unanswered(sent, time.monotonic())
                continue
            status, media = sent.status_code, media_type(sent)
            if status in UNANSWERED_STATUS:
                await sent.aclose()
                state.unanswered(f"HTTP {status}", time.monotonic())
                continue
            state.answered_attempt()
            if is_continuation(status, media, by_token=resume.by_token):
                state.follow(stream_link(sent, resume.url))
                return sent
            await sent.aclose()
            if state.refused(status, media, by_token=resume.by_token) is Refused.WAIT_FOR_ANSWERS:
                await self._wait_answered()
                flush = True

    async def _flush(self) -> httpx.Response | None:
        """POST the buffered answers to the Link URL; None means "resume with a GET now"."""
        state = self.state
        link = state.link
        assert link is not None
        while True:
            batch = state.answers.batch()
            if not batch:
                return None
            logger.debug("sending %d answer(s) of request %r to the stream Link", len(batch), self.request_id)
            sent = await self._send("POST", link, answers_body(batch))
            if isinstance(sent, str):
                state.failed(sent)
            elif 200 <= sent.status_code < 300:
                state.answers.sent(batch)
                state.follow(stream_link(sent, link))
                if is_continuation(sent.status_code, media_type(sent)):
                    return sent
                await sent.aclose()
                return None
            else:
                await sent.aclose()
                state.failed_with_status(sent.status_code)
            await anyio.sleep(state.delay_s())
