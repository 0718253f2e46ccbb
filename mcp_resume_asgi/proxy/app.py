"""`ProxyApp`: an ASGI app that is an MCP server elsewhere, reached over HTTP.

Wrapped by `resumable(...)`, it gives a server written in any language every feature the
middleware gives a Python app: the layers above see an ASGI app like any other, and
this one forwards each request it gets to the upstream URL and its answer back.

* The answer streams down as the upstream writes it, an SSE answer one whole event at a
  time (`sse_events.py`, each bounded by `max_event_bytes`). The request body goes up
  whole, bounded by `max_body_bytes` (a 413 past it): a JSON-RPC message is short, and the
  layers above may have rewritten it, so it is re-framed with its own `Content-Length`.
* End-to-end headers pass, hop-by-hop ones stop (`forwarded_headers.py`); the upstream's
  statuses, headers and bodies, its errors included, reach the client as they are.
* The upstream authenticates: credentials pass up untouched and name the caller to the
  middleware (`credentials.py`), so what the store holds for one caller is served only to
  a request the upstream accepts with the same credentials.
* The upstream unreachable, or silent past `connect_timeout_s`: a 502 with a JSON-RPC error
  (504 when it took the request but sent no answer head within `read_timeout_s`), logged
  once when it happens, once when it is reachable again. A client that leaves closes the
  upstream request; an upstream that breaks off mid-answer ends the answer there.
* Every request path goes to the same path on the upstream's origin: the MCP endpoint is
  the upstream URL's own path, and the rest (OAuth metadata, say) goes along.

It forwards with httpx's transport (`httpx.AsyncHTTPTransport`: httpcore's kept-alive
connection pool), called directly rather than through an `httpx.AsyncClient`: a proxy wants
none of a client's per-request work (merging default headers, a cookie jar, which would carry
one caller's cookies to the next, auth and redirect handling, environment proxies). What is
the same for every request is built once: the timeouts, the endpoint's URL.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx

from mcp_resume_asgi.proxy.credentials import DEFAULT_CREDENTIAL_HEADERS, caller_of
from mcp_resume_asgi.proxy.forwarded_headers import to_client, to_upstream
from mcp_resume_asgi.proxy.sse_events import EventSplitter, EventTooLarge
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.asgi import Receive, Scope, Send
from mcp_resume_asgi.wire.replies import send_jsonrpc_error

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_S",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_EVENT_BYTES",
    "ProxyApp",
    "UpstreamURLError",
    "proxy_app",
]

logger = logging.getLogger(__name__)

DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_EVENT_BYTES = 4 * 1024 * 1024
#: Connections the proxy keeps to the upstream at once (every open SSE answer holds one).
DEFAULT_MAX_CONNECTIONS = 4096


#: Methods whose empty body is sent as none at all (no `Content-Length: 0`).
_NO_BODY = frozenset({"GET", "HEAD", "DELETE", "OPTIONS"})


class UpstreamURLError(ValueError):
    """The upstream URL is not an absolute http(s) URL."""


class _BodyTooLarge(Exception):
    pass


class _ClientGone(Exception):
    pass


def _checked_url(url: str) -> httpx.URL:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port that is no number raises here
    except ValueError as exc:
        raise UpstreamURLError(f"bad upstream URL {url!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UpstreamURLError(
            f"bad upstream URL {url!r}: expected http://host[:port]/path or https://..., "
            "e.g. http://127.0.0.1:3000/mcp"
        )
    if parts.query or parts.fragment:
        raise UpstreamURLError(
            f"bad upstream URL {url!r}: no query or fragment (the path names the endpoint)"
        )
    return httpx.URL(url)


class ProxyApp:
    """Forwards MCP Streamable HTTP to `upstream` (see the module doc)."""

    def __init__(
        self,
        upstream: str,
        *,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        read_timeout_s: float | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        credential_headers: Iterable[str] = DEFAULT_CREDENTIAL_HEADERS,
        principal_key: str | bytes = b"",
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """`read_timeout_s`: how long the upstream may stay silent (before its answer's head, and
        between two pieces of it); None, the default, waits as long as the work takes (a tool
        call answered as JSON sends nothing until it is done; an idle SSE stream nothing at
        all), the middleware's own timers bounding what a client waits. `principal_key`: the
        key of the credentials' digest (`credentials.py`), the same on every node of a service.
        `transport`: httpx's, for tests and custom networking."""
        self.upstream = _checked_url(upstream)
        if connect_timeout_s <= 0 or (read_timeout_s is not None and read_timeout_s <= 0):
            raise ValueError("timeouts must be positive")
        if min(max_body_bytes, max_event_bytes, max_connections) <= 0:
            raise ValueError("max_body_bytes, max_event_bytes and max_connections must be positive")
        self.path = self.upstream.raw_path.split(b"?")[0].decode("ascii") or "/"
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.max_body_bytes = max_body_bytes
        self.max_event_bytes = max_event_bytes
        self.max_connections = max_connections
        self.credential_headers = frozenset(name.lower().encode("latin-1") for name in credential_headers)
        self.principal_key = principal_key.encode() if isinstance(principal_key, str) else principal_key
        self._transport = transport
        self._origin = self.upstream.copy_with(raw_path=b"/")
        self._endpoint = self.upstream.copy_with(raw_path=self.path.encode("ascii"))
        self._host = self.upstream.netloc
        self._timeouts = {
            "connect": connect_timeout_s,
            "read": read_timeout_s,
            "write": connect_timeout_s,
            "pool": connect_timeout_s,
        }
        self._http: httpx.AsyncBaseTransport | None = None
        self._unreachable = False

    # ------------------------------------------------------------------ life
    def _transport_to_upstream(self) -> httpx.AsyncBaseTransport:
        """The one pool of connections to the upstream, made on first use (in the event loop)."""
        if self._http is None:
            limits = httpx.Limits(max_connections=self.max_connections, max_keepalive_connections=64)
            self._http = self._transport or httpx.AsyncHTTPTransport(limits=limits, trust_env=False)
        return self._http

    async def aclose(self) -> None:
        """Close the connections to the upstream (the lifespan's shutdown does it)."""
        transport, self._http = self._http, None
        if transport is not None:
            await transport.aclose()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    # ------------------------------------------------------------------ a request
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":  # a WebSocket: MCP has none
            await receive()
            await send({"type": "websocket.close", "code": 1003})
            return
        user = scope.get("user")
        if user is None or not getattr(user, "is_authenticated", False):
            caller = caller_of(scope["headers"], self.credential_headers, self.principal_key)
            if caller is not None:
                scope["user"] = caller
        await self._forward(scope, receive, send)

    def _url(self, scope: Scope) -> httpx.URL:
        raw_path = scope.get("raw_path") or scope["path"].encode("utf-8")
        query = scope.get("query_string") or b""
        if not query and raw_path == self._endpoint.raw_path:  # the MCP endpoint: nearly every request
            return self._endpoint
        return self._origin.copy_with(raw_path=raw_path + (b"?" + query if query else b""))

    async def _forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            body = await self._body(scope, receive)
        except _BodyTooLarge:
            await send_jsonrpc_error(
                send, 413, p.INVALID_REQUEST, f"request body over {self.max_body_bytes} bytes"
            )
            return
        except _ClientGone:
            return
        headers = to_upstream(scope["headers"], self._host, scope.get("scheme", "http"))
        request = httpx.Request(
            scope["method"],
            self._url(scope),
            headers=headers,
            content=body,
            extensions={"timeout": self._timeouts},
        )
        try:
            response = await self._transport_to_upstream().handle_async_request(request)
        except httpx.ReadTimeout:
            logger.warning(
                "the upstream %s sent no answer to %s %s within %ss",
                self.upstream,
                scope["method"],
                scope["path"],
                self.read_timeout_s,
            )
            await send_jsonrpc_error(
                send, 504, p.INTERNAL_ERROR, "the upstream MCP server did not answer in time"
            )
            return
        except httpx.HTTPError as exc:
            self._went_unreachable(exc)
            await send_jsonrpc_error(send, 502, p.INTERNAL_ERROR, "the upstream MCP server is unreachable")
            return
        self._reachable()
        try:
            await self._answer(response, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()

    async def _body(self, scope: Scope, receive: Receive) -> bytes | None:
        """The request's body, whole (None: a GET, HEAD, DELETE or OPTIONS without one). The layers
        above may have rewritten it, or relayed it from another node without its framing
        headers, so it is always read, and goes up with its own `Content-Length`."""
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _ClientGone
            chunk: bytes = message.get("body", b"")
            total += len(chunk)
            if total > self.max_body_bytes:
                raise _BodyTooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                body = b"".join(chunks)
                return None if not body and scope["method"] in _NO_BODY else body

    async def _answer(self, response: httpx.Response, receive: Receive, send: Send) -> None:
        headers = to_client(response.headers.raw)
        media = response.headers.get("content-type", "").split(";")[0].strip().lower()
        splitter = EventSplitter(self.max_event_bytes) if media == "text/event-stream" else None
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_when_gone, receive, tg.cancel_scope)
            try:
                async for chunk in response.aiter_raw():
                    pieces = [chunk] if splitter is None else splitter.feed(chunk)
                    for piece in pieces:
                        await send({"type": "http.response.body", "body": piece, "more_body": True})
                rest = splitter.rest() if splitter is not None else b""
                await send({"type": "http.response.body", "body": rest, "more_body": False})
            except EventTooLarge as exc:
                logger.warning("the answer from the upstream %s was cut: %s", self.upstream, exc)
                await send(_END)
            except httpx.HTTPError as exc:
                logger.info("the upstream %s broke off an answer: %r", self.upstream, exc)
                await send(_END)
            tg.cancel_scope.cancel()

    def _went_unreachable(self, exc: Exception) -> None:
        level = logging.DEBUG if self._unreachable else logging.WARNING
        self._unreachable = True
        logger.log(level, "the upstream MCP server %s is unreachable: %r (answering 502)", self.upstream, exc)

    def _reachable(self) -> None:
        if self._unreachable:
            self._unreachable = False
            logger.warning("the upstream MCP server %s is reachable again", self.upstream)


_END = {"type": "http.response.body", "body": b"", "more_body": False}


async def _cancel_when_gone(receive: Receive, scope: anyio.CancelScope) -> None:
    """Cancel `scope` once the client has gone (its request's body, if unread, is skipped)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


def proxy_app(upstream: str, **options: Any) -> ProxyApp:
    """`ProxyApp(upstream, **options)`: the MCP server at `upstream` as an ASGI app, to wrap with
    `resumable(...)`. Raises `UpstreamURLError` for a URL that is not absolute http(s)."""
    return ProxyApp(upstream, **options)
