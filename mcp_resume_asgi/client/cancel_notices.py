"""Cancelling a request whose stream the transport keeps resumable: `notifications/cancelled`.

Why the transport sends it: on 2026-07-28 closing a request's stream is its cancellation,
but this transport declares :data:`~.declarations.RESUMABLE_STREAMS_EXTENSION` on every
such request (``declarations.py``), and to a server of mcp-resume-asgi a close then only
detaches - it keeps the work for a resume. So whenever a client above the transport gives
a request up before its response came (its caller cancelled, a timeout, a stream the
transport gave up on), the close alone would leave the server working for nothing, up to
its resume window. The transport owes the cancel it made the close stop being: a
``notifications/cancelled`` with the request's id, POSTed with the request's own headers
(credentials, ``MCP-Protocol-Version`` and the ``Idempotency-Key`` the server names the
request by) and, in its ``_meta``, the request's capabilities - the extension among them,
which tells the server the notice is for it. Best effort, within
:data:`NOTICE_TIMEOUT_S`, shielded from the cancellation that caused it; never raises.

A server that does not know the extension acknowledges and drops the notice (the stock
SDK answers 202), so it costs one small POST there.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Final

import anyio
import httpx

from .declarations import CLIENT_CAPABILITIES_META, RESUMABLE_STREAMS_EXTENSION, is_single_exchange
from .stream_state import NOT_COPIED

logger = logging.getLogger(__name__)

METHOD: Final = "notifications/cancelled"
PROTOCOL_VERSION_META: Final = "io.modelcontextprotocol/protocolVersion"
#: How long the notice may hold up the cancellation (or the end) that called for it.
NOTICE_TIMEOUT_S: Final = 2.0
REASON: Final = "the client gave the request up"
# Headers of the request that describe its own body or its own routing, not the notice's
# (those a resume does not copy either, and the request's own `Mcp-Method` / `Mcp-Name`).
_NOT_COPIED: Final = (NOT_COPIED - {b"cache-control"}) | {b"mcp-method", b"mcp-name"}


def notice_body(message: dict[str, Any], reason: str = REASON) -> bytes | None:
    """The notice cancelling the JSON-RPC request ``message``, as sent, when one is owed: the
    request declares the extension in its per-request capabilities. None otherwise."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    capabilities = meta.get(CLIENT_CAPABILITIES_META) if isinstance(meta, dict) else None
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    if not isinstance(extensions, dict) or RESUMABLE_STREAMS_EXTENSION not in extensions:
        return None
    assert isinstance(meta, dict)
    notice_meta = {CLIENT_CAPABILITIES_META: capabilities}
    if PROTOCOL_VERSION_META in meta:
        notice_meta[PROTOCOL_VERSION_META] = meta[PROTOCOL_VERSION_META]
    notice = {
        "jsonrpc": "2.0",
        "method": METHOD,
        "params": {"requestId": message["id"], "reason": reason, "_meta": notice_meta},
    }
    return json.dumps(notice, separators=(",", ":")).encode()


def notice_headers(request_headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The notice's headers: the request's own, but for those describing its body and routing."""
    headers = [(k, v) for k, v in request_headers if k.lower() not in _NOT_COPIED]
    return [
        *headers,
        (b"content-type", b"application/json"),
        (b"accept", b"application/json, text/event-stream"),
        (b"mcp-method", METHOD.encode()),
    ]


class CancelNotice:
    """The notice one request may need: built from the request as sent, POSTed at most once."""

    def __init__(self, inner: httpx.AsyncBaseTransport, request: httpx.Request, body: bytes) -> None:
        self._inner = inner
        self._request = request
        self._body = body
        self.sent = False

    @classmethod
    def owed_for(
        cls, inner: httpx.AsyncBaseTransport, request: httpx.Request, message: dict[str, Any]
    ) -> CancelNotice | None:
        """The notice for ``request`` (the JSON-RPC request ``message``) if giving it up needs one:
        a 2026-07-28 request (its ``MCP-Protocol-Version``) that declares the extension."""
        if not is_single_exchange(request.headers.get("mcp-protocol-version")):
            return None
        body = notice_body(message)
        return None if body is None else cls(inner, request, body)

    async def send(self) -> None:
        """POST the notice (once), shielded and bounded; a failure is logged, never raised.

        The request's headers are read now: the transport adds its ``Idempotency-Key`` to
        the request as it sends it, and the server names the request by that key."""
        if self.sent:
            return
        self.sent = True
        request = self._request
        notice = httpx.Request(
            "POST",
            request.url,
            headers=notice_headers(request.headers.raw),
            content=self._body,
            extensions={k: v for k, v in request.extensions.items() if k == "timeout"},
        )
        with anyio.CancelScope(shield=True), anyio.move_on_after(NOTICE_TIMEOUT_S) as scope:
            try:
                response = await self._inner.handle_async_request(notice)
                await response.aclose()
            except httpx.HTTPError as exc:
                logger.warning("%s %s: could not cancel the request: %r", METHOD, request.url, exc)
                return
            logger.debug("%s for a given-up request: HTTP %d", METHOD, response.status_code)
        if scope.cancelled_caught:
            logger.warning("%s %s: no answer within %.0f s", METHOD, request.url, NOTICE_TIMEOUT_S)
