"""`ResumableTransport`: an httpx transport that hides stream disconnects from MCP clients.

Why a transport and not a client: every MCP client library that speaks
Streamable HTTP already POSTs JSON-RPC requests and reads the SSE answer. If
the resuming logic lives *below* that, at the httpx transport layer, any such
client becomes resumable without changes: the response it reads is the whole
*logical* stream of its request, stitched together from as many physical HTTP
exchanges as it took.

What it does for a POST whose body is one JSON-RPC request answered with
``text/event-stream``:

* it re-emits every event (``id``, ``event``, ``data``), dropping priming
  events (empty ``data``) and events whose ``id`` was already delivered;
* when the server closes the stream before the response to the request came,
  it waits ``retry`` milliseconds (clamped) and resumes: with a GET on the
  ``Link: <...>; rel="stream"`` URL (SEP-1335) or, without one, a GET on the
  MCP URL (SEP-1699), both with ``Last-Event-ID``;
* server-to-client requests seen on a stream with a ``Link`` URL make the
  answers the application POSTs to the MCP URL be captured (answered locally
  with ``202 Accepted``) and sent together, as one JSON array, to the ``Link``
  URL once the server signals it waits for them (``204`` on the resume GET) or
  once all are there and the server kept the stream open for ``flush_after_s``;
* when it has to give up (too many failed attempts, 404/400, an oversized or
  malformed event, ...), it emits one last event carrying a JSON-RPC error
  (code -32000) for the request, so the consumer is never left waiting.

Everything else (JSON answers, notifications, GETs, DELETEs, error statuses of
the first POST) passes through untouched.

Internal requests (resume GETs, answer POSTs) are sent straight to the inner
transport with the headers of the original POST (session id, protocol
version, authorization, ...) and its timeouts; they are never sent to another
origin. An ``httpx.Auth`` flow of the client does not run for them: a
credential that expires in the middle of a stream ends it with a clear error.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
import weakref
from collections import OrderedDict, deque
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any, Final

import anyio
import httpx

from .sse import DEFAULT_MAX_EVENT_BYTES, SSEError, SSEEvent, SSEParser, closing_iterator, encode_event

logger = logging.getLogger(__name__)

DEFAULT_RETRY_MS: Final = 1000
DEFAULT_MAX_RETRY_MS: Final = 30_000
DEFAULT_MAX_ATTEMPTS: Final = 5
DEFAULT_FLUSH_AFTER_S: Final = 1.0
DEFAULT_MAX_PENDING_REQUESTS: Final = 1024
MAX_REMEMBERED_TOKENS: Final = 1024
RESUME_POLICY: Final = "notifications/requests/resumePolicy"
#: Declared on every 2026-07-28 request this transport carries: that revision made a closed
#: stream a cancelled request and dropped `Last-Event-ID`, and mcp-resume-asgi keeps its
#: resumable streams only for requests that ask (the server's `RESUMABLE_STREAMS_EXTENSION`).
RESUMABLE_STREAMS_EXTENSION: Final = "io.github.mcp-resume-asgi/resumable-streams"
#: The first protocol revision whose requests must declare it.
SINGLE_EXCHANGE_VERSION: Final = "2026-07-28"
_CLIENT_CAPABILITIES_META: Final = "io.modelcontextprotocol/clientCapabilities"
_VERSION: Final = re.compile(r"\d{4}-\d{2}-\d{2}")
#: JSON-RPC code of the error event emitted when the stream cannot be continued.
STREAM_ERROR_CODE: Final = -32000

#: How many event ids are remembered per stream to drop replayed duplicates.
_DEDUP_WINDOW: Final = 4096
#: Longer event ids are refused: they are stored (dedup window) and sent back as a header.
MAX_EVENT_ID_LENGTH: Final = 1024
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_RETRYABLE_STATUS: Final = frozenset({408, 425, 429, 500, 502, 503, 504})
# Headers of the original POST that must not be copied onto the requests this transport makes.
_NOT_COPIED: Final = frozenset(
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
# Headers of the first response that no longer describe the logical stream we hand out.
_NOT_FORWARDED: Final = frozenset({"content-length", "content-encoding", "transfer-encoding", "link"})
_FORWARDED_EXTENSIONS: Final = frozenset({"http_version", "reason_phrase"})

IdKey = tuple[str, str | int]


def _id_key(value: object) -> IdKey | None:
    """A hashable key for a JSON-RPC id that keeps 1 and "1" apart (and refuses bools/null)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return ("i", value)
    if isinstance(value, str):
        return ("s", value)
    return None


def _loads(data: str | bytes) -> object:
    """``json.loads`` that reports hostile input (bad JSON, absurd nesting) as ValueError."""
    try:
        return json.loads(data)
    except RecursionError as exc:
        raise ValueError("JSON nested too deeply") from exc


def _is_request(message: object) -> bool:
    return (
        isinstance(message, dict)
        and isinstance(message.get("method"), str)
        and _id_key(message.get("id")) is not None
    )


def _is_response(message: object) -> bool:
    return (
        isinstance(message, dict)
        and "method" not in message
        and ("result" in message or "error" in message)
        and _id_key(message.get("id")) is not None
    )


def _media_type(response: httpx.Response) -> str:
    return str(response.headers.get("content-type", "")).partition(";")[0].strip().lower()


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    scheme = url.scheme.lower()
    return scheme, url.host.lower(), url.port if url.port is not None else _DEFAULT_PORTS.get(scheme)


def same_origin(a: httpx.URL, b: httpx.URL) -> bool:
    """Scheme, host and port equal (with default ports filled in)."""
    return _origin(a) == _origin(b)


def parse_link_header(values: list[str]) -> list[tuple[str, dict[str, str]]]:
    """Parse ``Link`` header values (RFC 8288) into ``(target, params)`` pairs.

    Parameter names are lower-cased; quoted values are unquoted. Malformed
    entries are skipped rather than guessed at.
    """
    links: list[tuple[str, dict[str, str]]] = []
    for value in values:
        for entry in _split_outside_quotes(value, ","):
            entry = entry.strip()
            if not entry.startswith("<") or ">" not in entry:
                continue
            target, _, rest = entry[1:].partition(">")
            params: dict[str, str] = {}
            for param in _split_outside_quotes(rest, ";"):
                name, eq, pvalue = param.strip().partition("=")
                name = name.strip().lower()
                if not name or name in params:
                    continue
                pvalue = pvalue.strip()
                if len(pvalue) >= 2 and pvalue[0] == pvalue[-1] == '"':
                    pvalue = pvalue[1:-1].replace('\\"', '"').replace("\\\\", "\\")
                params[name] = pvalue if eq else ""
            links.append((target.strip(), params))
    return links


def _split_outside_quotes(text: str, separator: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    in_quotes = in_angle = escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif in_quotes and char == "\\":
            escaped = True
        elif char == '"' and not in_angle:
            in_quotes = not in_quotes
        elif char == "<" and not in_quotes:
            in_angle = True
        elif char == ">" and not in_quotes:
            in_angle = False
        elif char == separator and not in_quotes and not in_angle:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return parts


def stream_link(response: httpx.Response, base: httpx.URL) -> httpx.URL | None:
    """The ``rel="stream"`` URL of ``response``, resolved against ``base``; None if absent or refused.

    A URL on another origin (or carrying userinfo, which httpx would turn into
    credentials) is refused: the session headers must never leave the server
    that issued them.
    """
    values = response.headers.get_list("link")
    if not values:
        return None
    for target, params in parse_link_header(values):
        if "stream" not in params.get("rel", "").lower().split():
            continue
        try:
            url = base.join(target)
        except (httpx.InvalidURL, ValueError):
            logger.warning("ignoring malformed stream Link URL")
            return None
        if not same_origin(url, base) or url.userinfo:
            logger.warning("ignoring stream Link URL on another origin than %s", _safe(base))
            return None
        return url
    return None


def _safe(url: httpx.URL) -> str:
    """A URL fit for a log line: no userinfo, query or fragment (they can carry secrets)."""
    return str(url.copy_with(userinfo=b"", query=None, fragment=None))


class _GiveUp(Exception):
    """The logical stream cannot be continued; the message goes into the error event."""


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
        self.inner = inner if inner is not None else httpx.AsyncHTTPTransport()
        self.default_retry_ms = default_retry_ms
        self.max_retry_ms = max_retry_ms
        self.max_attempts = max_attempts
        self.max_event_bytes = max_event_bytes
        self.flush_after_s = flush_after_s
        self.max_pending_requests = max_pending_requests
        self.idempotency_keys = idempotency_keys
        self.resumable_requests = resumable_requests
        # SEP-975 tokens by (endpoint, session, request id): a bounded, most-recent-last map.
        self._tokens: OrderedDict[
            tuple[str, str | None, IdKey | None], tuple[str, list[tuple[bytes, bytes]]]
        ] = OrderedDict()
        # Weak: a response the consumer drops without closing must not keep its state alive.
        self._live: weakref.WeakSet[_LogicalStream] = weakref.WeakSet()

    @property
    def live_streams(self) -> int:
        """How many logical streams are in progress (for tests and metrics)."""
        return sum(1 for stream in self._live if not stream.closed)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method != "POST":
            return await self.inner.handle_async_request(request)
        body = await request.aread()
        try:
            message = _loads(body) if body else None
        except ValueError:
            message = None
        if _is_request(message):
            assert isinstance(message, dict)
            if self.resumable_requests and message.get("method") == "initialize":
                request = _advertise_resumable_requests(request, message)
            elif _single_exchange(request.headers.get("mcp-protocol-version")):
                request = _declare_resumable_streams(request, message)
            return await self._post_request(request, message["id"])
        if self._capture(request, message):
            return httpx.Response(202, request=request)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def _post_request(self, request: httpx.Request, request_id: str | int) -> httpx.Response:
        response = await self._send_post(request)
        if not (200 <= response.status_code < 300 and _media_type(response) == "text/event-stream"):
            return response
        stream = _LogicalStream(self, request, request_id, response)
        self._live.add(stream)
        headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _NOT_FORWARDED]
        logger.debug("SSE answer to request %r: resumable, Link %s", request_id, stream.link is not None)
        return httpx.Response(
            response.status_code,
            headers=headers,
            stream=_LogicalByteStream(stream),
            request=request,
            extensions={k: v for k, v in response.extensions.items() if k in _FORWARDED_EXTENSIONS},
        )

    def _remember_token(
        self,
        url: httpx.URL,
        session_id: str | None,
        request_id: str | int,
        token: str,
        headers: list[tuple[bytes, bytes]],
    ) -> None:
        key = (str(url), session_id, _id_key(request_id))
        self._tokens[key] = (token, headers)
        self._tokens.move_to_end(key)
        while len(self._tokens) > MAX_REMEMBERED_TOKENS:
            self._tokens.popitem(last=False)

    async def request_status(
        self, url: str | httpx.URL, request_id: str | int, *, session_id: str | None = None
    ) -> dict[str, Any]:
        """SEP-975 `requests/getStatus` for a request this transport carried.

        Returns the result (`status`: processing/completed/failed, `hasPendingMessage`,
        `hasInputRequest`); raises `LookupError` when the server sent no resume token for
        the request, `RuntimeError` with the server's message when it refuses.
        """
        entry = self._tokens.get((str(httpx.URL(url)), session_id, _id_key(request_id)))
        if entry is None:
            raise LookupError(f"no resume token is known for request {request_id!r}")
        token, headers = entry
        body = {
            "jsonrpc": "2.0",
            "id": f"status-{uuid.uuid4().hex[:12]}",
            "method": "requests/getStatus",
            "params": {"requestId": request_id, "resumeToken": token},
        }
        request = httpx.Request(
            "POST",
            url,
            headers=[
                *headers,
                (b"content-type", b"application/json"),
                (b"accept", b"application/json, text/event-stream"),
            ],
            content=json.dumps(body).encode(),
        )
        response = await self.inner.handle_async_request(request)
        try:
            raw = await response.aread()
        finally:
            await response.aclose()
        try:
            answer = _loads(raw)
        except ValueError as exc:
            raise RuntimeError(f"requests/getStatus: HTTP {response.status_code}, not JSON") from exc
        if isinstance(answer, dict) and isinstance(answer.get("result"), dict):
            result: dict[str, Any] = answer["result"]
            return result
        error = answer.get("error") if isinstance(answer, dict) else None
        message = error.get("message") if isinstance(error, dict) else f"HTTP {response.status_code}"
        raise RuntimeError(f"requests/getStatus refused: {message}")

    async def _send_post(self, request: httpx.Request) -> httpx.Response:
        """POST a JSON-RPC request; with an Idempotency-Key, retry it when the answer never came.

        A connection lost before the response headers leaves no Link and no event id to
        resume from. The key makes a retry safe: a server that honours it (mcp-resume-asgi
        does) attaches the retry to the request already running instead of running it again.
        Without keys only failures to connect are retried (nothing was sent).
        """
        if self.idempotency_keys and "idempotency-key" not in request.headers:
            request.headers["idempotency-key"] = uuid.uuid4().hex
        keyed = "idempotency-key" in request.headers
        attempt = 0
        while True:
            try:
                return await self.inner.handle_async_request(request)
            except httpx.TransportError as exc:
                attempt += 1
                if attempt >= self.max_attempts or not (keyed or isinstance(exc, httpx.ConnectError)):
                    raise
                delay_ms = min(self.default_retry_ms, self.max_retry_ms)
                logger.info("POST failed before an answer (%r); retrying in %d ms", exc, delay_ms)
                await anyio.sleep(delay_ms / 1000)

    def _capture(self, request: httpx.Request, message: object) -> bool:
        """Buffer answers to server requests of live Link streams; True if all were taken."""
        messages = message if isinstance(message, list) else [message]
        if not messages or not all(_is_response(m) for m in messages):
            return False
        session = request.headers.get("mcp-session-id")
        targets: list[tuple[_LogicalStream, IdKey, dict[str, Any]]] = []
        claimed: set[tuple[int, IdKey]] = set()
        for item in messages:
            assert isinstance(item, dict)
            key = _id_key(item["id"])
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


class _LogicalByteStream(httpx.AsyncByteStream):
    """The response body handed to the consumer: the logical stream's SSE bytes."""

    def __init__(self, stream: _LogicalStream) -> None:
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


class _LogicalStream:
    """State of one request's logical stream. Small on purpose, and dropped when it ends."""

    def __init__(
        self,
        transport: ResumableTransport,
        request: httpx.Request,
        request_id: str | int,
        response: httpx.Response,
    ) -> None:
        self._t = transport
        self.mcp_url = request.url
        self.session_id = request.headers.get("mcp-session-id")
        self.request_id = request_id
        self._request_key = _id_key(request_id)
        self._base_headers = [(k, v) for k, v in request.headers.raw if k.lower() not in _NOT_COPIED]
        timeout = request.extensions.get("timeout")
        self._extensions: dict[str, Any] = {"timeout": timeout} if timeout is not None else {}
        self.link = stream_link(response, self.mcp_url)
        self._first: httpx.Response | None = response
        self._current: httpx.Response | None = None
        self.last_event_id: str | None = None
        self.retry_ms: int | None = None
        self._attempts = 0
        self._new_events = 0  # events with an id not seen before: progress
        self._seen: set[str] = set()
        self._seen_order: deque[str] = deque()
        # Server requests seen on a Link stream: id key -> answered? Answers in arrival order.
        self._pending: dict[IdKey, bool] = {}
        self._buffer: list[tuple[IdKey, dict[str, Any]]] = []
        self._complete_at: float | None = None
        self._answered: anyio.Event | None = None
        self._read_scope: anyio.CancelScope | None = None
        self.closed = False
        self.resume_token: str | None = None
        """SEP-975: the token of `notifications/requests/resumePolicy` for this request, once sent."""

    # -- answers from the application (called from other tasks) ---------------------------------

    def accepts_answer(self, url: httpx.URL, session_id: str | None, key: IdKey) -> bool:
        return (
            not self.closed
            and self.link is not None
            and self._pending.get(key) is False
            and url == self.mcp_url
            and session_id == self.session_id
        )

    def capture(self, key: IdKey, message: dict[str, Any]) -> None:
        self._pending[key] = True
        self._buffer.append((key, message))
        if self._all_answered():
            self._complete_at = anyio.current_time()
            scope = self._read_scope
            if scope is not None:
                scope.deadline = min(scope.deadline, self._complete_at + self._t.flush_after_s)
            if self._answered is not None:
                self._answered.set()

    def _all_answered(self) -> bool:
        return bool(self._pending) and all(self._pending.values())

    async def _wait_answered(self) -> None:
        while not self._all_answered():
            self._answered = anyio.Event()
            await self._answered.wait()
        self._answered = None

    # -- the consumer's side ----------------------------------------------------------------------

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._t._live.discard(self)
        self._pending.clear()
        self._buffer.clear()
        self._seen.clear()
        self._seen_order.clear()
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
                    if _media_type(response) == "text/event-stream":
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
                        self._attempts += 1
                        flush = False
                    # Also on a flush: the interrupted read has left that connection unusable
                    # (httpcore closes a connection whose read is cancelled), and the answers'
                    # POST carries Last-Event-ID, so the continuation starts where we are.
                    await self._close_current()
                    response = await self._reconnect(flush=flush)
                except _GiveUp as exc:
                    logger.warning("giving up on the stream of request %r: %s", self.request_id, exc)
                    yield self._error_event(str(exc))
                    return
        finally:
            await self.aclose()

    def _error_event(self, message: str) -> bytes:
        payload = {
            "jsonrpc": "2.0",
            "id": self.request_id,
            "error": {"code": STREAM_ERROR_CODE, "message": message},
        }
        return encode_event(json.dumps(payload, separators=(",", ":")), event="message")

    async def _close_current(self) -> None:
        response, self._current = self._current, None
        if response is not None:
            with anyio.CancelScope(shield=True):
                await response.aclose()

    async def _read_sse(self, response: httpx.Response) -> AsyncGenerator[tuple[bytes, str], None]:
        """Yield ``(sse bytes, outcome)``; the last outcome is final / closed / flush."""
        parser = SSEParser(self._t.max_event_bytes)
        got_events = broke = False
        new_before = self._new_events
        try:
            async with closing_iterator(response.aiter_bytes()) as chunks:
                while True:
                    # The only place we wait for the server: the flush safety net may
                    # interrupt it (from the task capturing the last answer, see capture()).
                    with anyio.CancelScope() as scope:
                        self._read_scope = scope
                        if self._complete_at is not None and self.link is not None:
                            scope.deadline = self._complete_at + self._t.flush_after_s
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
                        encoded, final = self._on_event(event)
                        if encoded:
                            out.append(encoded)
                        if final:
                            break
                    if out or final:
                        yield b"".join(out), "final" if final else "more"
                    if final:
                        return
        except SSEError as exc:
            raise _GiveUp(str(exc)) from exc
        except httpx.TransportError as exc:
            logger.info("stream of request %r broke: %r", self.request_id, exc)
            broke = True
        if self._new_events == new_before:
            # No new event. A server that ends the response cleanly after (re)sending only
            # its priming event is polling - closing at will while the request is silent -
            # and the reconnect succeeded. A connection that broke, or a response without
            # any event, is a failed attempt: bounded, so a stream cut in the middle of an
            # event that never fits cannot loop forever.
            self._attempts = 0 if got_events and not broke else self._attempts + 1
        logger.debug("stream of request %r closed by the server before its response", self.request_id)
        yield b"", "closed"

    async def _read_json(self, response: httpx.Response) -> tuple[bytes, bool]:
        """A JSON answer on an internal request: re-emit its messages as events."""
        limit = self._t.max_event_bytes
        body = bytearray()
        try:
            async with closing_iterator(response.aiter_bytes()) as chunks:
                async for chunk in chunks:
                    body += chunk
                    if len(body) > limit:
                        raise _GiveUp(f"JSON answer larger than the limit of {limit} bytes")
        except httpx.TransportError as exc:
            logger.info("JSON answer of request %r broke: %r", self.request_id, exc)
            return b"", False
        try:
            message = _loads(bytes(body))
        except ValueError as exc:
            raise _GiveUp("server answered with malformed JSON") from exc
        messages = message if isinstance(message, list) else [message]
        out: list[bytes] = []
        final = False
        for item in messages:
            if not isinstance(item, dict):
                raise _GiveUp("server answered with JSON that is not a JSON-RPC message")
            final = final or self._inspect(item)
            out.append(encode_event(json.dumps(item, separators=(",", ":")), event="message"))
            if final:
                break
        return b"".join(out), final

    def _on_event(self, event: SSEEvent) -> tuple[bytes | None, bool]:
        """Return ``(bytes to emit, event completes the request)``."""
        if event.retry is not None:
            self.retry_ms = event.retry
        if event.id:
            if len(event.id) > MAX_EVENT_ID_LENGTH:
                raise _GiveUp(f"server sent an event id longer than {MAX_EVENT_ID_LENGTH} characters")
            if event.id in self._seen:
                logger.debug("dropping replayed event %r", event.id)
                return None, False
            self._remember(event.id)
            self.last_event_id = event.id
            self._new_events += 1
            self._attempts = 0
        elif event.id == "":
            self.last_event_id = None  # the SSE spec's way to reset the last event id
        if not event.data:
            return None, False  # priming event
        final = False
        if (event.event or "message") == "message":
            try:
                message = _loads(event.data)
            except ValueError as exc:
                raise _GiveUp("server sent an event whose data is not JSON") from exc
            for item in message if isinstance(message, list) else [message]:
                final = self._inspect(item) or final
        return encode_event(event.data, id=event.id or None, event=event.event), final

    def _remember(self, event_id: str) -> None:
        self._seen.add(event_id)
        self._seen_order.append(event_id)
        if len(self._seen_order) > _DEDUP_WINDOW:
            self._seen.discard(self._seen_order.popleft())

    def _inspect(self, message: object) -> bool:
        """Note server requests; True if ``message`` is the response to our request."""
        if not isinstance(message, dict):
            return False
        if message.get("method") == RESUME_POLICY and isinstance(message.get("params"), dict):
            params = message["params"]
            token = params.get("resumeToken")
            if (
                _id_key(params.get("requestId")) == self._request_key
                and isinstance(token, str)
                and len(token) <= 4096
            ):
                self.resume_token = token
                self._t._remember_token(
                    self.mcp_url, self.session_id, self.request_id, token, self._base_headers
                )
            return False
        if _is_request(message):
            if self.link is not None:
                key = _id_key(message["id"])
                assert key is not None
                if key not in self._pending:
                    if len(self._pending) >= self._t.max_pending_requests:
                        raise _GiveUp("too many server-to-client requests are waiting for answers")
                    self._pending[key] = False
                    self._complete_at = None
            return False
        return _is_response(message) and _id_key(message["id"]) == self._request_key

    # -- reconnecting -----------------------------------------------------------------------------

    def _delay(self) -> float:
        retry = self.retry_ms if self.retry_ms is not None else self._t.default_retry_ms
        return min(retry, self._t.max_retry_ms) / 1000

    def _headers(self, *, post: bool) -> list[tuple[bytes, bytes]]:
        headers = list(self._base_headers)
        if post:
            headers.append((b"content-type", b"application/json"))
            headers.append((b"accept", b"application/json, text/event-stream"))
        else:
            headers.append((b"accept", b"text/event-stream"))
            headers.append((b"cache-control", b"no-store"))
        if self.last_event_id:
            headers.append((b"last-event-id", self.last_event_id.encode("utf-8")))
        return headers

    async def _send(self, method: str, url: httpx.URL, content: bytes | None = None) -> httpx.Response | str:
        """Send an internal request; a network failure comes back as its description."""
        headers = self._headers(post=method == "POST")
        request = httpx.Request(method, url, headers=headers, content=content, extensions=self._extensions)
        try:
            return await self._t.inner.handle_async_request(request)
        except httpx.TransportError as exc:
            return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__

    def _failed(self, why: str) -> None:
        self._attempts += 1
        logger.info(
            "reconnect attempt %d/%d for request %r failed: %s",
            self._attempts,
            self._t.max_attempts,
            self.request_id,
            why,
        )
        if self._attempts >= self._t.max_attempts:
            raise _GiveUp(f"stream lost: {self._attempts} reconnect attempts failed (last: {why})")

    async def _reconnect(self, *, flush: bool) -> httpx.Response:
        """Get the next physical response of the logical stream (2xx, SSE or JSON)."""
        if self._attempts >= self._t.max_attempts:
            raise _GiveUp(f"stream lost: {self._attempts} reconnect attempts brought no new events")
        while True:
            if flush:
                response = await self._flush()
                if response is not None:
                    return response
                flush = False
                continue
            await anyio.sleep(self._delay())
            if self.resume_token is not None and not self._pending:
                # SEP-975: resume the request itself; the server may drop what Last-Event-ID confirms.
                body = {
                    "jsonrpc": "2.0",
                    "id": self.request_id,
                    "method": "requests/resume",
                    "params": {"resumeToken": self.resume_token},
                }
                logger.debug(
                    "requests/resume of request %r after event %r", self.request_id, self.last_event_id
                )
                resumed = await self._send("POST", self.mcp_url, json.dumps(body).encode())
                if isinstance(resumed, str):
                    self._failed(resumed)
                    continue
                if 200 <= resumed.status_code < 300 and _media_type(resumed) in (
                    "text/event-stream",
                    "application/json",
                ):
                    self._follow_link(resumed, self.mcp_url)
                    return resumed
                await resumed.aclose()
                self._check_status(resumed)
                self._failed(f"HTTP {resumed.status_code}")
                continue
            if self.link is not None:
                url = self.link
            elif self.last_event_id:
                url = self.mcp_url
            else:
                raise _GiveUp("stream closed before any event id was sent; it cannot be resumed")
            logger.debug("resuming request %r after event %r", self.request_id, self.last_event_id)
            response_or_error = await self._send("GET", url)
            if isinstance(response_or_error, str):
                self._failed(response_or_error)
                continue
            response = response_or_error
            status = response.status_code
            media = _media_type(response)
            if status != 204 and 200 <= status < 300 and media in ("text/event-stream", "application/json"):
                self._follow_link(response, url)
                return response
            await response.aclose()
            if status == 204:
                if self.link is None:
                    raise _GiveUp("server has no more events for this stream, but the response never came")
                if not self._pending:
                    raise _GiveUp("stream ended without a response to the request")
                logger.debug("server waits for the answers to %d request(s)", len(self._pending))
                await self._wait_answered()
                flush = True
                continue
            if 200 <= status < 300:
                raise _GiveUp(f"server answered the resume request with content type {media!r}")
            self._check_status(response)
            self._failed(f"HTTP {status}")

    async def _flush(self) -> httpx.Response | None:
        """POST the buffered answers to the Link URL; None means "resume with a GET now"."""
        assert self.link is not None
        while True:
            batch = list(self._buffer)
            if not batch:
                return None
            body = json.dumps([message for _, message in batch], separators=(",", ":")).encode()
            logger.debug("sending %d answer(s) of request %r to the stream Link", len(batch), self.request_id)
            response_or_error = await self._send("POST", self.link, body)
            if not isinstance(response_or_error, str):
                response = response_or_error
                status = response.status_code
                if 200 <= status < 300:
                    del self._buffer[: len(batch)]
                    for key, _ in batch:
                        self._pending.pop(key, None)
                    self._complete_at = None if not self._all_answered() else self._complete_at
                    self._follow_link(response, self.link)
                    if status != 204 and _media_type(response) in ("text/event-stream", "application/json"):
                        return response
                    await response.aclose()
                    return None
                await response.aclose()
                self._check_status(response)
                why = f"HTTP {status}"
            else:
                why = response_or_error
            self._failed(why)
            await anyio.sleep(self._delay())

    def _check_status(self, response: httpx.Response) -> None:
        """Raise for the statuses after which retrying cannot help."""
        status = response.status_code
        if status == 404:
            raise _GiveUp("stream unknown or expired (HTTP 404)")
        if status == 400:
            raise _GiveUp("server refused the stream token (HTTP 400)")
        if status not in _RETRYABLE_STATUS:
            raise _GiveUp(f"server answered the resume request with HTTP {status}")

    def _follow_link(self, response: httpx.Response, base: httpx.URL) -> None:
        """Adopt a new ``Link`` (the one a continuation answer names); keep the old one otherwise."""
        link = stream_link(response, base)
        if link is not None:
            self.link = link


def _single_exchange(version: str | None) -> bool:
    """A revision (an ISO date, so they order as strings) from 2026-07-28 on."""
    return (
        version is not None and _VERSION.fullmatch(version) is not None and version >= SINGLE_EXCHANGE_VERSION
    )


def _declare_resumable_streams(request: httpx.Request, message: dict[str, Any]) -> httpx.Request:
    """A 2026-07-28 request with `RESUMABLE_STREAMS_EXTENSION` in its per-request capabilities.

    Without it the server treats a closed stream as the request's cancellation and
    sends nothing to resume from; with it, this transport's resumes keep working.
    """
    params = message.setdefault("params", {})
    if not isinstance(params, dict):
        return request
    meta = params.setdefault("_meta", {})
    capabilities = meta.setdefault(_CLIENT_CAPABILITIES_META, {}) if isinstance(meta, dict) else None
    extensions = capabilities.setdefault("extensions", {}) if isinstance(capabilities, dict) else None
    if not isinstance(extensions, dict) or RESUMABLE_STREAMS_EXTENSION in extensions:
        return request
    extensions[RESUMABLE_STREAMS_EXTENSION] = {}
    return _with_body(request, message)


def _with_body(request: httpx.Request, message: dict[str, Any]) -> httpx.Request:
    content = json.dumps(message, separators=(",", ":")).encode()
    headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"content-length"]
    return httpx.Request(
        request.method, request.url, headers=headers, content=content, extensions=request.extensions
    )


def _advertise_resumable_requests(request: httpx.Request, message: dict[str, Any]) -> httpx.Request:
    """The `initialize` request with `capabilities.resumableRequests` added (SEP-975).

    The transport resumes requests itself, so it may tell the server it can; the
    client library above it need not know the capability exists.
    """
    params = message.get("params")
    capabilities = params.get("capabilities") if isinstance(params, dict) else None
    if not isinstance(capabilities, dict) or "resumableRequests" in capabilities:
        return request
    capabilities["resumableRequests"] = {}
    return _with_body(request, message)
