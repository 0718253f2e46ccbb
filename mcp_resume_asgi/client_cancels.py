"""A client's `notifications/cancelled` for an opted-in 2026-07-28 request: find it, cancel it.

What and why are in `core/cancel_notices.py` (sans-IO); here is the I/O. A hosted request that
such a notice may cancel is registered, once the app has read it (its auth has said who
is calling), in a store index named by its binding - principal, endpoint, request id,
`Idempotency-Key` - with its stream's TTL, and taken out when its app is done. A notice
is answered by the middleware, never shown to the app: the app is asked who is calling
(the admission probe, with the notice's own credentials; its 401 / 403 is the answer),
the binding names the stream, and its request is cancelled where it runs - here (the app
sees `http.disconnect`, as a close would have told it) or on the node hosting it, to which
the notice is relayed as any request of that node is. Whatever it names, or not, the
answer is `202`: a notice that names nothing (unknown, finished, another principal's)
changes nothing.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from starlette.types import Receive, Scope, Send

from mcp_resume_asgi import expiry
from mcp_resume_asgi.admission import Refusal
from mcp_resume_asgi.core.cancel_notices import (
    MAX_SHARING,
    CancelNotice,
    Where,
    cancellable,
    named,
    notice_of,
    valid_key,
    where,
)
from mcp_resume_asgi.scheduler import spawn
from mcp_resume_asgi.store.base import StreamKind, StreamState
from mcp_resume_asgi.store.keys import cancel_binding
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.headers import header
from mcp_resume_asgi.wire.replies import send_bytes
from mcp_resume_asgi.wire.scope_keys import RELAYED_FROM

if TYPE_CHECKING:
    from mcp_resume_asgi.engine import Engine
    from mcp_resume_asgi.hosted import HostedStream

logger = logging.getLogger(__name__)

IDEMPOTENCY_KEY = b"idempotency-key"


class ClientCancels:
    """The engine's part in cancelling by notice (see the module docstring)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._bindings: dict[str, str] = {}
        """Stream id -> the index it is registered in, for requests hosted here."""

    # ------------------------------------------------------------------ the requests
    async def taken(self, hosted: HostedStream) -> None:
        """The app read `hosted`'s request: register it under its binding, if a notice may cancel it."""
        delivery = hosted.delivery
        if hosted.stream_id in self._bindings or not cancellable(
            is_request=hosted.kind is StreamKind.REQUEST,
            version=hosted.version,
            opted_in=hosted.opted_in,
            survives_close=delivery is not None and delivery.survives_close,
        ):
            return
        keys = _headers(hosted.scope, IDEMPOTENCY_KEY)
        name = cancel_binding(hosted.path, hosted.principal, hosted.request_id, keys[0] if keys else None)
        if name is None:
            return
        engine = self.engine
        expires_at = time.time() + engine.running_ttl(hosted.policy)
        try:
            added = await engine.store.index_add(name, hosted.stream_id, expires_at, cap=MAX_SHARING)
        except Exception as exc:
            if not engine.store_outage(exc):
                raise
            return  # (not cancellable by notice; its close still detaches)
        if added:
            self._bindings[hosted.stream_id] = name

    async def forget(self, hosted: HostedStream) -> None:
        """`hosted`'s app is done: no notice names its request any more."""
        name = self._bindings.pop(hosted.stream_id, None)
        if name is None:
            return
        try:
            await self.engine.store.index_remove(name, hosted.stream_id)
        except Exception as exc:
            if not self.engine.store_outage(exc):
                raise  # (else the member expires with the stream's TTL)

    # ------------------------------------------------------------------ the notices
    @staticmethod
    def notice(scope: Scope, message: Any) -> CancelNotice | None:
        """A POSTed `message` this layer answers (see `cancel_notices.notice_of`), or None."""
        return notice_of(
            message,
            header(scope, p.VERSION_HEADER.encode()),
            in_session=header(scope, p.SESSION_HEADER.encode()) is not None,
        )

    async def handle(
        self, scope: Scope, receive: Receive, send: Send, body: bytes, notice: CancelNotice
    ) -> None:
        """Cancel the request `notice` names, if the caller has one running; answer 202 (or the
        app's refusal of the caller; or, relayed, what the node hosting the request answers)."""
        engine = self.engine
        version = p.valid_version(header(scope, p.VERSION_HEADER.encode())) or p.SINGLE_EXCHANGE_VERSION
        caller = await engine.admission.identify(scope, scope["path"], version)
        if isinstance(caller, Refusal):
            await caller.send(send)
            return
        name = None
        if notice.request_id is not None:
            name = cancel_binding(
                scope["path"], caller, notice.request_id, valid_key(_headers(scope, IDEMPOTENCY_KEY))
            )
        stream_id = named(await engine.store.index_page(name, limit=2)) if name is not None else None
        if stream_id is not None:
            hosted = engine.live.get(stream_id)
            meta = await engine.store.get_stream(stream_id) if hosted is None else None
            node = engine.node
            target = where(
                hosted_here=hosted is not None,
                hosted_principal=hosted.principal if hosted is not None else None,
                caller=caller,
                running=meta is not None and meta.state is StreamState.RUNNING,
                owner=meta.owner if meta is not None else None,
                node_id=engine.node_id,
                relayed=RELAYED_FROM in scope,
            )
            if target is Where.HERE and hosted is not None:
                self._cancel(hosted, notice)
            elif (
                target is Where.OWNER
                and meta is not None
                and node is not None
                and node.running
                and await node.alive(meta.owner)
            ):
                await node.relay(meta.owner, scope, receive, send, body)
                return
        await send_bytes(send, 202)

    @staticmethod
    def _cancel(hosted: HostedStream, notice: CancelNotice) -> None:
        delivery = hosted.delivery
        survives = delivery is not None and delivery.survives_close
        if hosted.expired or not hosted.core.cancel_asked(survives_close=survives):
            logger.debug("stream %s: a cancel came for a request with nothing left to stop", hosted.stream_id)
            return
        reason = f": {notice.reason!r}" if notice.reason else ""
        logger.info(
            "stream %s: the client cancelled request %r%s", hosted.stream_id, hosted.request_id, reason
        )
        spawn(expiry.cancel_app, hosted, "the client cancelled the request")


def _headers(scope: Scope, name: bytes) -> list[str]:
    return [value.decode("latin-1") for key, value in scope["headers"] if key == name]
