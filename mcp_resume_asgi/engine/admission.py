"""Admission: the app decides who may read a session's recorded events, not the store.

Everything a resume serves (a `Link` URL, `Last-Event-ID`, `requests/resume`, an
`mra1.` re-issue, an `Idempotency-Key` retry, `requests/getStatus`, a second GET
stream) comes from the store, without the app. But the app is what knows whether
a request belongs to a session: the `mcp` SDK answers 404 "Session not found" to
a credential other than the one that opened the session, and an expired token
gets 401. So before the store answers, the app is asked the same question with
the client's own headers: a JSON-RPC `ping` (side-effect free in every revision).
Whatever the app refuses is refused, with the app's own status, headers and body;
what it accepts must also come from the principal the stream was recorded for,
as the app's auth saw it (see `principal.py`).

Only the node that holds a session (the one that answered its `initialize`) can
judge the session itself; elsewhere, and for what no session binds (a task), the probe
settles who the caller is (its auth failures still refuse), which with the stream's
bound principal is what the owner would have checked. It still carries the session id
the client sent, if any, though no answer about that session counts: a stateful app
(mcp 1.x) opens a session, and keeps it, for every request that names none.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass

import anyio

from mcp_resume_asgi.engine.cluster import Node
from mcp_resume_asgi.engine.port import NOT_FOUND, PROBE_TIMEOUT_S, Refusal
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import Store, StreamMeta
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.asgi import ASGIApp, Message, Scope
from mcp_resume_asgi.wire.headers import Headers, header
from mcp_resume_asgi.wire.principal import PrincipalOf

__all__ = [
    "MAX_REPLY_BYTES",
    "PROBE_ID_PREFIX",
    "SILENT",
    "Admission",
    "AppReply",
    "post_to_app",
]

logger = logging.getLogger(__name__)

#: Each probe's JSON-RPC id starts with this; the rest is random (an app maps answers by id,
#: so probes of one session in flight at once must not share one).
PROBE_ID_PREFIX = "mcp-resume-admission-"
# An app that has not answered a probe by `PROBE_TIMEOUT_S` (port.py: the REST face waits as
# long) refuses by silence: 503, retry.
#: The app's answers are read up to this size (a refusal is short; a ping's answer too).
MAX_REPLY_BYTES = 65536
#: Headers of the client's request that describe its own body or its own resume, not the probe's.
_NOT_FORWARDED = {
    b"content-length",
    b"content-type",
    b"accept",
    b"last-event-id",
    b"mcp-session-id",
    b"mcp-protocol-version",
    b"mcp-method",
    b"mcp-name",
    b"idempotency-key",
    b"transfer-encoding",
}
#: Headers of the app's refusal that describe its own body (recomputed when passed on).
_NOT_PASSED_ON = {b"content-length", b"transfer-encoding", b"connection"}


@dataclass(frozen=True, slots=True)
class AppReply:
    """What the app answered a request the middleware made on a client's behalf."""

    status: int
    headers: Headers
    body: bytes
    scope: Scope
    """The scope the app saw, as its own middleware left it (`scope["user"]` from its auth)."""


async def post_to_app(
    app: ASGIApp, template: Scope, path: str, session_id: str | None, version: str, body: bytes
) -> AppReply:
    """POST `body` to the app's MCP endpoint with the client's own headers (credentials included)."""
    headers = [(k, v) for k, v in template["headers"] if k not in _NOT_FORWARDED]
    headers += [
        (b"content-type", b"application/json"),
        (b"accept", b"application/json, text/event-stream"),
        (b"content-length", str(len(body)).encode()),
        (b"mcp-protocol-version", version.encode()),
    ]
    if session_id is not None:
        headers.append((b"mcp-session-id", session_id.encode()))
    scope = dict(template)  # the app's own auth (if any) sets `user` on this copy
    scope.update(method="POST", path=path, raw_path=path.encode(), query_string=b"", headers=headers)
    done = anyio.Event()
    sent = False
    status = 500
    reply_headers: Headers = []
    chunks: list[bytes] = []
    size = 0

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal status, reply_headers, size
        if message["type"] == "http.response.start":
            status = int(message["status"])
            reply_headers = list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            chunk = message.get("body", b"")
            if size < MAX_REPLY_BYTES:
                chunks.append(chunk)
            size += len(chunk)
            if not message.get("more_body", False):
                done.set()

    try:
        await app(scope, receive, send)
    finally:
        done.set()
    return AppReply(status, reply_headers, b"".join(chunks), scope)


SILENT = Refusal(
    503,
    [(b"content-type", b"application/json"), (b"retry-after", b"1")],
    p.dumps(p.error_message(None, p.STREAM_ERROR, "the server did not confirm the session in time; retry")),
)


class Admission:
    """Decides whether a request may be answered from a stream's record (see the module doc)."""

    def __init__(self, app: ASGIApp, *, principal: PrincipalOf, store: Store, node: Node | None) -> None:
        self.app = app
        self.principal = principal
        self.store = store
        self.node = node

    async def check(self, scope: Scope, meta: StreamMeta) -> Refusal | None:
        """None when the app accepts this request for the stream's session and principal."""
        if meta.session_id is not None and header(scope, b"mcp-session-id") != meta.session_id:
            return NOT_FOUND
        judges_session = meta.session_id is not None and await self._holds(meta.session_id)
        probe = p.dumps({"jsonrpc": "2.0", "id": PROBE_ID_PREFIX + secrets.token_hex(8), "method": "ping"})
        reply = None
        with anyio.move_on_after(PROBE_TIMEOUT_S):
            reply = await post_to_app(
                self.app,
                scope,
                meta.path,
                meta.session_id if judges_session else header(scope, b"mcp-session-id"),
                meta.protocol_version,
                probe,
            )
        if reply is None:
            logger.warning("stream %s: the app did not answer an admission check in time", meta.stream_id)
            return SILENT
        if reply.status >= 400 and (judges_session or reply.status in (401, 403)):
            logger.debug("stream %s: the app refused the request (HTTP %s)", meta.stream_id, reply.status)
            headers = [(k, v) for k, v in reply.headers if k.lower() not in _NOT_PASSED_ON]
            return Refusal(reply.status, headers, reply.body)
        if self.principal(reply.scope) != meta.principal:
            logger.info("stream %s: refused a request from another principal", meta.stream_id)
            return NOT_FOUND
        return None

    async def identify(self, scope: Scope, path: str, version: str) -> str | Refusal | None:
        """Who is calling, as the app's own auth sees this request (no session judged: the
        session id the client sent goes along, see the module docstring): its principal, or its
        refusal (401 / 403 as the app gave it; silence past the timeout). For what the
        middleware answers by the caller alone (a notice naming its request)."""
        probe = p.dumps({"jsonrpc": "2.0", "id": PROBE_ID_PREFIX + secrets.token_hex(8), "method": "ping"})
        reply = None
        with anyio.move_on_after(PROBE_TIMEOUT_S):
            reply = await post_to_app(self.app, scope, path, header(scope, b"mcp-session-id"), version, probe)
        if reply is None:
            return SILENT
        if reply.status in (401, 403):
            headers = [(k, v) for k, v in reply.headers if k.lower() not in _NOT_PASSED_ON]
            return Refusal(reply.status, headers, reply.body)
        return self.principal(reply.scope)

    async def session_refusal(
        self, scope: Scope, path: str, session_id: str | None, version: str
    ) -> Refusal | None:
        """The app's refusal of a session's request that the middleware answers itself, where the
        store cannot vouch for the session (none named, or one it does not hold - restarted
        empty, or down at `initialize`): a `ping` with the same session header is refused as
        the request would have been (a 400 without one, a 404 for one the app does not hold)."""
        probe = p.dumps({"jsonrpc": "2.0", "id": PROBE_ID_PREFIX + secrets.token_hex(8), "method": "ping"})
        reply = None
        with anyio.move_on_after(PROBE_TIMEOUT_S):
            reply = await post_to_app(self.app, scope, path, session_id, version, probe)
        if reply is None:
            return SILENT
        if reply.status >= 400:
            headers = [(k, v) for k, v in reply.headers if k.lower() not in _NOT_PASSED_ON]
            return Refusal(reply.status, headers, reply.body)
        return None

    async def _holds(self, session_id: str) -> bool:
        """Whether this node's app holds the session (always, with one node)."""
        if self.node is None or not self.node.running:
            return True
        owner = await self.store.get_key(keys.session_owner(session_id))
        return owner == self.node.node_id
