"""`ResumableTransport`: an httpx transport that hides stream disconnects from MCP clients.

Why a transport and not a client: every MCP client library that speaks
Streamable HTTP already POSTs JSON-RPC requests and reads the SSE answer. If
the resuming logic lives *below* that, at the httpx transport layer, any such
client becomes resumable without changes: the response it reads is the whole
*logical* stream of its request, stitched together from as many physical HTTP
exchanges as it took.

What it does for a POST whose body is one JSON-RPC request answered with
``text/event-stream`` (``logical_stream.py``, its decisions ``stream_state.py``):

* it re-emits every event (``id``, ``event``, ``data``), dropping priming
  events (empty ``data``) and events whose ``id`` was already delivered;
* when the server closes the stream before the response to the request came,
  it waits ``retry`` milliseconds (clamped) and resumes: with a GET on the
  ``Link: <...>; rel="stream"`` URL (SEP-1335, ``links.py``) or, without one, a
  GET on the MCP URL (SEP-1699), both with ``Last-Event-ID``; or with
  ``requests/resume`` when the server gave the request a resume token (SEP-975,
  ``resumable_requests.py``);
* server-to-client requests seen on a stream with a ``Link`` URL make the
  answers the application POSTs to the MCP URL be captured (answered locally
  with ``202 Accepted``) and sent together, as one JSON array, to the ``Link``
  URL once the server signals it waits for them (``204`` on the resume GET) or
  once all are there and the server kept the stream open for ``flush_after_s``
  (``answers.py``);
* when it has to give up (too many failed attempts, 404/400, an oversized or
  malformed event, ...), it emits one last event carrying a JSON-RPC error
  (code -32000) for the request, so the consumer is never left waiting.

Requests are declared resumable on the way out (``declarations.py``): a
2026-07-28 request gets ``RESUMABLE_STREAMS_EXTENSION``, ``initialize`` gets
``capabilities.resumableRequests``. Since the extension makes a closed stream
only detach, a 2026-07-28 request given up before its response came (its
consumer closed the stream, or was cancelled while waiting for the headers) is
cancelled with ``notifications/cancelled`` (``cancel_notices.py``). Everything
else (JSON answers, notifications, GETs, DELETEs, error statuses of the first
POST) passes through untouched.

Internal requests (resume GETs, answer POSTs) are sent straight to the inner
transport with the headers of the original POST (session id, protocol
version, authorization, ...) and its timeouts; they are never sent to another
origin. An ``httpx.Auth`` flow of the client does not run for them: a
credential that expires in the middle of a stream ends it with a clear error.
"""

from __future__ import annotations

import logging
import time
import uuid
import weakref
from typing import Any, Final

import anyio
import httpx

from .cancel_notices import CancelNotice
from .declarations import rewrite_request
from .logical_stream import LogicalByteStream, LogicalStream
from .messages import IdKey, id_key, is_request, is_response, loads, media_type
from .resumable_requests import MAX_REMEMBERED_TOKENS, TokenBook, status_result
from .sse_reader import DEFAULT_MAX_EVENT_BYTES

__all__ = [
    "DEFAULT_FLUSH_AFTER_S",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_PENDING_REQUESTS",
    "DEFAULT_MAX_RETRY_MS",
    "DEFAULT_RECONNECT_S",
    "DEFAULT_RETRY_MS",
    "ResumableTransport",
]

logger = logging.getLogger(__name__)

DEFAULT_RETRY_MS: Final = 1000
DEFAULT_MAX_RETRY_MS: Final = 30_000
DEFAULT_MAX_ATTEMPTS: Final = 5
DEFAULT_RECONNECT_S: Final = 60.0
DEFAULT_FLUSH_AFTER_S: Final = 1.0
DEFAULT_MAX_PENDING_REQUESTS: Final = 1024

# Headers of the first response that no longer describe the logical stream we hand out.
_NOT_FORWARDED: Final = frozenset({"content-length", "content-encoding", "transfer-encoding", "link"})
_FORWARDED_EXTENSIONS: Final = frozenset({"http_version", "reason_phrase"})


class ResumableTransport(httpx.AsyncBaseTransport):
    """Wrap ``inner`` so SSE answers to JSON-RPC requests survive disconnects (see module doc).

    Args:
        inner: the transport that does the actual HTTP; default ``httpx.AsyncHTTPTransport()``.
        default_retry_ms: wait before a reconnect when the server never sent ``retry:``.
        max_retry_ms: upper bound on any wait, whatever the server asks for.
        max_attempts: consecutive failed reconnect attempts before giving up. An attempt
            fails on a network error, a retryable status (408, 425, 429, 5xx), or a stream
            that breaks, or ends without any event, before a new event came; the count
            restarts whenever an event with a new id arrives (or a server polling by closing
            cleanly after its priming event answers).
        max_event_bytes: bound on one SSE event (and on a JSON body read internally).
        flush_after_s: how long a server may keep a stream open once every pending
            server-to-client request has its answer before the answers are POSTed anyway.
        max_pending_requests: bound on unanswered server-to-client requests per stream.
        reconnect_s: how long to go on trying while no server answers at all (a network
            error before any answer, or 502/504 from a proxy: a restart, a deploy), from
            the first such attempt in a row; these attempts do not count in ``max_attempts``.
            Past it the stream ends with an error that says no server answered (a POST
            raises its last network error).
    """

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport | None = None,
        *,
        default_retry_ms: int = DEFAULT_RETRY_MS,
        max_retry_ms: int = DEFAULT_MAX_RETRY_MS,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        flush_after_s: float = DEFAULT_FLUSH_AFTER_S,
        max_pending_requests: int = DEFAULT_MAX_PENDING_REQUESTS,
        idempotency_keys: bool = True,
        resumable_requests: bool = True,
        reconnect_s: float = DEFAULT_RECONNECT_S,
    ) -> None:
        if default_retry_ms < 0 or max_retry_ms < 0:
            raise ValueError("retry times must not be negative")
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if max_event_bytes < 1:
            raise ValueError("max_event_bytes must be positive")
        if flush_after_s < 0:
            raise ValueError("flush_after_s must not be negative")
        if max_pending_requests < 1:
            raise ValueError("max_pending_requests must be at least 1")
        if not 0 <= reconnect_s < float("inf"):
            raise ValueError("reconnect_s must be a non-negative finite number of seconds")
        self.inner = inner if inner is not None else httpx.AsyncHTTPTransport()
        self.default_retry_ms = default_retry_ms
        self.max_retry_ms = max_retry_ms
        self.max_attempts = max_attempts
        self.max_event_bytes = max_event_bytes
        self.flush_after_s = flush_after_s
        self.max_pending_requests = max_pending_requests
        self.idempotency_keys = idempotency_keys
        self.resumable_requests = resumable_requests
        self.reconnect_s = reconnect_s
        # SEP-975 tokens by (endpoint, session, request id), for `request_status`.
        self._tokens = TokenBook(MAX_REMEMBERED_TOKENS)
        # Weak: a response the consumer drops without closing must not keep its state alive.
        self._live: weakref.WeakSet[LogicalStream] = weakref.WeakSet()

    @property
    def live_streams(self) -> int:
        """How many logical streams are in progress (for tests and metrics)."""
        return sum(1 for stream in self._live if not stream.closed)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method != "POST":
            return await self.inner.handle_async_request(request)
        body = await request.aread()
        try:
            message = loads(body) if body else None
        except ValueError:
            message = None
        if is_request(message):
            assert isinstance(message, dict)
            request = rewrite_request(request, message, resumable_requests=self.resumable_requests)
            notice = CancelNotice.owed_for(self.inner, request, message)
            return await self._post_request(request, message["id"], notice)
        if self._capture(request, message):
            return httpx.Response(202, request=request)
        if message is None:
            return await self.inner.handle_async_request(request)
        # A notification or an answer: its POST cut before any answer is sent again under its
        # key like a request's (a session whose `notifications/initialized` was cut goes on).
        return await self._send_post(request)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def _post_request(
        self, request: httpx.Request, request_id: str | int, notice: CancelNotice | None = None
    ) -> httpx.Response:
        try:
            response = await self._send_post(request)
        except anyio.get_cancelled_exc_class():
            if notice is not None:  # given up before its answer came (`cancel_notices.py`)
                await notice.send()
            raise
        if not (200 <= response.status_code < 300 and media_type(response) == "text/event-stream"):
            return response
        stream = LogicalStream(
            self, request, request_id, response, tokens=self._tokens, live=self._live, cancel_notice=notice
        )
        self._live.add(stream)
        headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _NOT_FORWARDED]
        logger.debug("SSE answer to request %r: resumable, Link %s", request_id, stream.link is not None)
        return httpx.Response(
            response.status_code,
            headers=headers,
            stream=LogicalByteStream(stream),
            request=request,
            extensions={k: v for k, v in response.extensions.items() if k in _FORWARDED_EXTENSIONS},
        )

    async def request_status(
        self, url: str | httpx.URL, request_id: str | int, *, session_id: str | None = None
    ) -> dict[str, Any]:
        """SEP-975 `requests/getStatus` for a request this transport carried.

        Returns the result (`status`: processing/completed/failed, `hasPendingMessage`,
        `hasInputRequest`); raises `LookupError` when the server sent no resume token for
        the request, `RuntimeError` with the server's message when it refuses.
        """
        request = self._tokens.status_request(url, request_id, session_id)
        response = await self.inner.handle_async_request(request)
        try:
            raw = await response.aread()
        finally:
            await response.aclose()
        return status_result(response.status_code, raw)

    async def _send_post(self, request: httpx.Request) -> httpx.Response:
        """POST a JSON-RPC message; with an Idempotency-Key, retry it when the answer never came.

        A connection lost before the response headers leaves no Link and no event id to
        resume from. The key makes a retry safe: a server that honours it (mcp-resume-asgi
        does) attaches the retry to the request already running instead of running it again.
        Without keys only failures to connect are retried (nothing was sent).
        """
        if self.idempotency_keys and "idempotency-key" not in request.headers:
            request.headers["idempotency-key"] = uuid.uuid4().hex
        keyed = "idempotency-key" in request.headers
        attempt = 0
        unanswered_since: float | None = None
        while True:
            try:
                return await self.inner.handle_async_request(request)
            except httpx.TransportError as exc:
                attempt += 1
                if not (keyed or isinstance(exc, httpx.ConnectError)):
                    raise
                # No server answers (a restart, a deploy): tried again for up to `reconnect_s`.
                now = time.monotonic()
                unanswered_since = now if unanswered_since is None else unanswered_since
                if now - unanswered_since >= self.reconnect_s and attempt >= self.max_attempts:
                    raise
                delay_ms = min(self.default_retry_ms, self.max_retry_ms)
                logger.info("POST failed before an answer (%r); retrying in %d ms", exc, delay_ms)
                await anyio.sleep(delay_ms / 1000)

    def _capture(self, request: httpx.Request, message: object) -> bool:
        """Buffer answers to server requests of live Link streams; True if all were taken."""
        messages = message if isinstance(message, list) else [message]
        if not messages or not all(is_response(m) for m in messages):
            return False
        session = request.headers.get("mcp-session-id")
        targets: list[tuple[LogicalStream, IdKey, dict[str, Any]]] = []
        claimed: set[tuple[int, IdKey]] = set()
        for item in messages:
            assert isinstance(item, dict)
            key = id_key(item["id"])
            assert key is not None
            owner = None
            for stream in self._live:
                if stream.accepts_answer(request.url, session, key) and (id(stream), key) not in claimed:
                    owner = stream
                    break
            if owner is None:
                return False
            claimed.add((id(owner), key))
            targets.append((owner, key, item))
        for owner, key, item in targets:
            owner.capture(key, item)
        logger.debug("captured %d answer(s) to server requests for the stream Link", len(targets))
        return True
