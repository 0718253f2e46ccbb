"""What one request's logical stream has seen, and what it does next - the decisions of resuming, without I/O.

Why apart from the code that reads and sends (``logical_stream.py``): every rule
of resuming is a decision on plain data - which event is a replay, which message
ends the request, what the server's ``retry`` makes us wait, whether a failed
attempt is one too many, where the next resume goes (``requests/resume`` with a
SEP-975 token, a GET on the ``Link`` URL, a GET on the MCP URL with
``Last-Event-ID``) and what an answer to it means. :class:`StreamState` holds
them all and is tested without a server or an event loop; it does no I/O, reads
no clock, and gives up by raising :class:`~.errors.GiveUp`.

The attempt budget: an attempt fails on a retryable status (408, 425, 429, 500, 503),
or a connection that breaks or ends without any event
before a new event came; ``max_attempts`` failures in a row give up. An event
with a new id restarts the count, and so does a server that polls - ends the
response cleanly after re-sending only its priming event.

An attempt that no server answers (a network error before any answer, or a 502 or
504 from a proxy in front) is not counted: the service may be restarting, or every node
being replaced (a deploy). Such attempts go on for up to ``reconnect_s`` seconds from the
first of them in a row (the clock is passed in), then the stream gives up with an error
that says so.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import Final, Protocol

import httpx

from .answers import AnswerBuffer
from .errors import GiveUp
from .messages import IdKey, id_key, is_request, is_response, loads, message_event
from .resumable_requests import TokenBook, is_resume_policy, policy_token, resume_body
from .sse_reader import SSEEvent, encode_event

logger = logging.getLogger(__name__)

#: Longer event ids are refused: they are stored (dedup window) and sent back as a header.
MAX_EVENT_ID_LENGTH: Final = 1024
#: How many event ids are remembered per stream to drop replayed duplicates.
DEDUP_WINDOW: Final = 4096
RETRYABLE_STATUS: Final = frozenset({408, 425, 429, 500, 502, 503, 504})
#: The statuses a proxy gives when no server behind it answered (a restart, a deploy).
UNANSWERED_STATUS: Final = frozenset({502, 504})
#: What a resume may be answered with to continue the stream.
CONTINUATION_MEDIA: Final = frozenset({"text/event-stream", "application/json"})
# Headers of the original POST that must not be copied onto the requests this transport makes.
NOT_COPIED: Final = frozenset(
    {
        b"content-length",
        b"content-type",
        b"content-encoding",
        b"transfer-encoding",
        b"accept",
        b"last-event-id",
        b"expect",
        b"cache-control",
    }
)


class Limits(Protocol):
    """The transport's settings a stream decides by (read when needed: see ``ResumableTransport``)."""

    @property
    def default_retry_ms(self) -> int: ...
    @property
    def max_retry_ms(self) -> int: ...
    @property
    def max_attempts(self) -> int: ...
    @property
    def reconnect_s(self) -> float: ...
    @property
    def flush_after_s(self) -> float: ...
    @property
    def max_pending_requests(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Resume:
    """The request that resumes the stream: a GET with ``Last-Event-ID``, or a SEP-975 ``requests/resume``."""

    method: str
    url: httpx.URL
    body: bytes | None = None

    @property
    def by_token(self) -> bool:
        return self.method == "POST"


class Refused(Enum):
    """What to do after a resume was answered with something other than a continuation."""

    RETRY = "retry"  # after the delay, within the attempt budget
    WAIT_FOR_ANSWERS = "wait for answers"  # 204: the server waits for the answers to its requests


def is_continuation(status: int, media: str, *, by_token: bool = False) -> bool:
    """A resume answer that carries the stream on (an SSE stream, or a JSON body with the response).

    A ``204`` never does on a GET or an answers POST (it says "nothing more" / "go on
    waiting"); a ``requests/resume`` is judged by its content type alone.
    """
    return 200 <= status < 300 and media in CONTINUATION_MEDIA and (by_token or status != 204)


def check_status(status: int) -> None:
    """Give up on the statuses after which retrying cannot help."""
    if status == 404:
        raise GiveUp("stream unknown or expired (HTTP 404)")
    if status == 400:
        raise GiveUp("server refused the stream token (HTTP 400)")
    if status not in RETRYABLE_STATUS:
        raise GiveUp(f"server answered the resume request with HTTP {status}")


class StreamState:
    """One request's logical stream as data: its cursor, its attempt budget, its server requests."""

    def __init__(
        self,
        limits: Limits,
        *,
        mcp_url: httpx.URL,
        session_id: str | None,
        request_id: str | int,
        request_headers: list[tuple[bytes, bytes]],
        link: httpx.URL | None,
        tokens: TokenBook,
    ) -> None:
        self.limits = limits
        self.mcp_url = mcp_url
        self.session_id = session_id
        self.request_id = request_id
        self._request_key: IdKey | None = id_key(request_id)
        self.base_headers = [(k, v) for k, v in request_headers if k.lower() not in NOT_COPIED]
        """The original POST's headers (session, protocol version, authorization) for every internal request."""
        self.link = link
        self.last_event_id: str | None = None
        self.retry_ms: int | None = None
        self.attempts = 0
        self.unanswered_since: float | None = None
        """When the attempts that no server answered began (None: the last one was answered)."""
        self.new_events = 0  # events with an id not seen before: progress
        self._seen: set[str] = set()
        self._seen_order: deque[str] = deque()
        self.answers = AnswerBuffer()
        """Server requests seen on a Link stream, and the application's answers to send to it."""
        self._tokens = tokens
        self.resume_token: str | None = None
        """SEP-975: the token of `notifications/requests/resumePolicy` for this request, once sent."""
        self.answered = False
        """The response to the request came (a stream closed before it gives the request up)."""

    def clear(self) -> None:
        """Drop what the stream holds (it ended)."""
        self.answers.clear()
        self._seen.clear()
        self._seen_order.clear()

    # -- what the server sends ----------------------------------------------------------------------

    def receive_event(self, event: SSEEvent) -> tuple[bytes | None, bool]:
        """Return ``(bytes to emit, event completes the request)``; replays and priming events emit nothing."""
        if event.retry is not None:
            self.retry_ms = event.retry
        if event.id:
            if len(event.id) > MAX_EVENT_ID_LENGTH:
                raise GiveUp(f"server sent an event id longer than {MAX_EVENT_ID_LENGTH} characters")
            if event.id in self._seen:
                logger.debug("dropping replayed event %r", event.id)
                return None, False
            self._remember(event.id)
            self.last_event_id = event.id
            self.new_events += 1
            self.attempts = 0
        elif event.id == "":
            self.last_event_id = None  # the SSE spec's way to reset the last event id
        if not event.data:
            return None, False  # priming event
        final = False
        if (event.event or "message") == "message":
            try:
                message = loads(event.data)
            except ValueError as exc:
                raise GiveUp("server sent an event whose data is not JSON") from exc
            for item in message if isinstance(message, list) else [message]:
                final = self.receive_message(item) or final
        return encode_event(event.data, id=event.id or None, event=event.event), final

    def receive_json(self, body: bytes) -> tuple[bytes, bool]:
        """A JSON answer to an internal request: its messages as events, and whether it ends the request."""
        try:
            message = loads(body)
        except ValueError as exc:
            raise GiveUp("server answered with malformed JSON") from exc
        out: list[bytes] = []
        final = False
        for item in message if isinstance(message, list) else [message]:
            if not isinstance(item, dict):
                raise GiveUp("server answered with JSON that is not a JSON-RPC message")
            final = final or self.receive_message(item)
            out.append(message_event(item))
            if final:
                break
        return b"".join(out), final

    def receive_message(self, message: object) -> bool:
        """Note server requests and resume tokens; True if ``message`` is the response to our request."""
        if not isinstance(message, dict):
            return False
        if is_resume_policy(message):
            token = policy_token(message, self._request_key)
            if token is not None:
                self.resume_token = token
                self._tokens.remember(
                    self.mcp_url, self.session_id, self.request_id, token, self.base_headers
                )
            return False
        if is_request(message):
            if self.link is not None:
                key = id_key(message["id"])
                assert key is not None
                self.answers.expect(key, self.limits.max_pending_requests)
            return False
        if is_response(message) and id_key(message["id"]) == self._request_key:
            self.answered = True
            return True
        return False

    def _remember(self, event_id: str) -> None:
        self._seen.add(event_id)
        self._seen_order.append(event_id)
        if len(self._seen_order) > DEDUP_WINDOW:
            self._seen.discard(self._seen_order.popleft())

    def connection_ended(self, *, new_events_before: int, got_events: bool, broke: bool) -> None:
        """An SSE connection ended before the response; ``new_events_before`` is `new_events` at its start."""
        if self.new_events == new_events_before:
            # No new event. A server that ends the response cleanly after (re)sending only
            # its priming event is polling - closing at will while the request is silent -
            # and the reconnect succeeded. A connection that broke, or a response without
            # any event, is a failed attempt: bounded, so a stream cut in the middle of an
            # event that never fits cannot loop forever.
            self.attempts = 0 if got_events and not broke else self.attempts + 1

    def count_failed_attempt(self) -> None:
        """A JSON answer that did not end the request: a failed attempt, judged at the next resume."""
        self.attempts += 1

    # -- resuming -----------------------------------------------------------------------------------

    def flush_deadline(self) -> float | None:
        """When to send the buffered answers although the server keeps the stream open; None: not yet."""
        if self.answers.complete_at is None or self.link is None:
            return None
        return self.answers.complete_at + self.limits.flush_after_s

    def delay_s(self) -> float:
        """The wait before the next attempt: the server's ``retry``, clamped."""
        retry = self.retry_ms if self.retry_ms is not None else self.limits.default_retry_ms
        return min(retry, self.limits.max_retry_ms) / 1000

    def headers(self, *, post: bool) -> list[tuple[bytes, bytes]]:
        headers = list(self.base_headers)
        if post:
            headers.append((b"content-type", b"application/json"))
            headers.append((b"accept", b"application/json, text/event-stream"))
        else:
            headers.append((b"accept", b"text/event-stream"))
            headers.append((b"cache-control", b"no-store"))
        if self.last_event_id:
            headers.append((b"last-event-id", self.last_event_id.encode("utf-8")))
        return headers

    def check_budget(self) -> None:
        """Before resuming: give up if the last attempts brought nothing."""
        if self.attempts >= self.limits.max_attempts:
            raise GiveUp(f"stream lost: {self.attempts} reconnect attempts brought no new events")

    def next_resume(self) -> Resume:
        """Where to resume: SEP-975 ``requests/resume`` while no server request waits, else a GET."""
        if self.resume_token is not None and not self.answers:
            # SEP-975: resume the request itself; the server may drop what Last-Event-ID confirms.
            return Resume("POST", self.mcp_url, resume_body(self.request_id, self.resume_token))
        if self.link is not None:
            return Resume("GET", self.link)
        if self.last_event_id:
            return Resume("GET", self.mcp_url)
        raise GiveUp("stream closed before any event id was sent; it cannot be resumed")

    def follow(self, link: httpx.URL | None) -> None:
        """Adopt a new ``Link`` (the one a continuation answer names); keep the old one otherwise."""
        if link is not None:
            self.link = link

    def failed(self, why: str) -> None:
        """An attempt failed; give up when it was one too many."""
        self.attempts += 1
        logger.info(
            "reconnect attempt %d/%d for request %r failed: %s",
            self.attempts,
            self.limits.max_attempts,
            self.request_id,
            why,
        )
        if self.attempts >= self.limits.max_attempts:
            raise GiveUp(f"stream lost: {self.attempts} reconnect attempts failed (last: {why})")

    def unanswered(self, why: str, now: float) -> None:
        """No server answered an attempt (see the module docstring): give up once that has
        lasted ``reconnect_s``."""
        if self.unanswered_since is None:
            self.unanswered_since = now
        waited = now - self.unanswered_since
        if waited >= self.limits.reconnect_s:
            raise GiveUp(
                f"no server answered for {waited:.0f} s (reconnect_s={self.limits.reconnect_s:g}; last: {why})"
            )
        logger.info("request %r: no server answers (%s); trying again", self.request_id, why)

    def answered_attempt(self) -> None:
        """A server answered an attempt (whatever it said)."""
        self.unanswered_since = None

    def failed_with_status(self, status: int) -> None:
        """An internal request was refused with ``status``: give up, or count a failed attempt."""
        check_status(status)
        self.failed(f"HTTP {status}")

    def refused(self, status: int, media: str, *, by_token: bool) -> Refused:
        """A resume answered with no continuation (see :func:`is_continuation`): what now."""
        if not by_token:
            if status == 204:
                if self.link is None:
                    raise GiveUp("server has no more events for this stream, but the response never came")
                if not self.answers:
                    raise GiveUp("stream ended without a response to the request")
                logger.debug("server waits for the answers to %d request(s)", len(self.answers))
                return Refused.WAIT_FOR_ANSWERS
            if 200 <= status < 300:
                raise GiveUp(f"server answered the resume request with content type {media!r}")
        self.failed_with_status(status)
        return Refused.RETRY
