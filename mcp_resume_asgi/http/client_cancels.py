"""A client's `notifications/cancelled` for an opted-in 2026-07-28 request: find it, cancel it.

What and why are in `core/cancel_notices.py` (sans-IO); here is the I/O. A hosted request that
such a notice may cancel is registered by the engine under its binding - principal,
endpoint, request id, `Idempotency-Key` - in a store index (`engine/cancel_bindings.py`). A
notice (told apart by `post_sorting.py`) is answered by the middleware, never shown to the app: the app is asked who is calling
(the admission probe, with the notice's own credentials; its 401 / 403 is the answer),
the binding names the stream, and its request is cancelled where it runs - here (the app
sees `http.disconnect`, as a close would have told it) or on the node hosting it, to which
the notice is relayed as any request of that node is. Whatever it names, or not, the
answer is `202`: a notice that names nothing (unknown, finished, another principal's)
changes nothing. Each is reported (`telemetry`) as a `notifications/cancelled` SERVER span,
linked to the request it cancels where that request's record is read here.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from mcp_resume_asgi.core.cancel_notices import CancelNotice, Where, named, valid_key, where
from mcp_resume_asgi.engine import cancellation
from mcp_resume_asgi.engine.admission import Admission
from mcp_resume_asgi.engine.cancel_bindings import IDEMPOTENCY_KEY, header_values
from mcp_resume_asgi.engine.port import Refusal
from mcp_resume_asgi.engine.scheduler import spawn
from mcp_resume_asgi.store.base import StreamState
from mcp_resume_asgi.store.keys import cancel_binding
from mcp_resume_asgi.telemetry import Operation
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.asgi import Receive, Scope, Send
from mcp_resume_asgi.wire.headers import header
from mcp_resume_asgi.wire.replies import send_bytes
from mcp_resume_asgi.wire.scope_keys import RELAYED_FROM

if TYPE_CHECKING:
    from mcp_resume_asgi.engine.hosted import HostedStream
    from mcp_resume_asgi.engine.services import StreamServices

logger = logging.getLogger(__name__)


class ClientCancels:
    """Answers cancel notices (see the module docstring)."""

    def __init__(self, services: StreamServices[HostedStream], admission: Admission) -> None:
        self.services = services
        self.admission = admission

    async def handle(
        self, scope: Scope, receive: Receive, send: Send, body: bytes, notice: CancelNotice
    ) -> None:
        """Cancel the request `notice` names, if the caller has one running; answer 202 (or the
        app's refusal of the caller; or, relayed, what the node hosting the request answers)."""
        with self.services.telemetry.operation(scope, "notifications/cancelled") as op:
            await self._handle(scope, receive, op.watch(send), body, notice, op)

    async def _handle(
        self, scope: Scope, receive: Receive, send: Send, body: bytes, notice: CancelNotice, op: Operation
    ) -> None:
        services = self.services
        version = p.valid_version(header(scope, p.VERSION_HEADER.encode())) or p.SINGLE_EXCHANGE_VERSION
        caller = await self.admission.identify(scope, scope["path"], version)
        if isinstance(caller, Refusal):
            await caller.send(send)
            return
        name = None
        if notice.request_id is not None:
            name = cancel_binding(
                scope["path"], caller, notice.request_id, valid_key(header_values(scope, IDEMPOTENCY_KEY))
            )
        stream_id = named(await services.store.index_page(name, limit=2)) if name is not None else None
        if stream_id is not None:
            hosted = services.live.get(stream_id)
            meta = await services.store.get_stream(stream_id) if hosted is None else None
            node = services.node
            target = where(
                hosted_here=hosted is not None,
                hosted_principal=hosted.principal if hosted is not None else None,
                caller=caller,
                running=meta is not None and meta.state is StreamState.RUNNING,
                owner=meta.owner if meta is not None else None,
                node_id=services.node_id,
                relayed=RELAYED_FROM in scope,
            )
            if target is not Where.NOWHERE and meta is not None:
                op.created_by(meta.trace, stream_id=stream_id)  # (the caller's own: its binding says so)
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
        if hosted.core.expired or not hosted.core.cancel_asked(survives_close=survives):
            logger.debug("stream %s: a cancel came for a request with nothing left to stop", hosted.stream_id)
            return
        reason = f": {notice.reason!r}" if notice.reason else ""
        logger.info(
            "stream %s: the client cancelled request %r%s", hosted.stream_id, hosted.request_id, reason
        )
        spawn(cancellation.cancel_app, hosted, "the client cancelled the request")
