"""POST on the MCP endpoint: what the body is, and who answers it.

A POST body is read once (bounded by `max_body_bytes`) and then sorted: a session
held by another node is relayed there; a client's `notifications/cancelled` goes
to `client_cancels.py`; a JSON-RPC request that may be answered with SSE is
routed (its `Policy`, its protocol revision, a well-formed `Idempotency-Key`),
offered to the feature layers in front (`features.py`) and else hosted by the
engine; anything else (a notification, a client's answer to a server request,
a batch) goes to the app as it was sent. A store outage met before anything was
sent hands the request to the app without the store (`store_outage.py`).

Kept apart from `middleware.py`, which decides which handler an HTTP request
goes to, because this is the one handler with a body to parse and the most cases.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_resume_asgi._http import read_body_or_refuse, replay_receive
from mcp_resume_asgi.engine.port import Delivery, RequestContext
from mcp_resume_asgi.features import FeatureMiddleware
from mcp_resume_asgi.store.health import StoreHealth
from mcp_resume_asgi.store_outage import TrackedSend, without_store
from mcp_resume_asgi.wire import header_rules
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.headers import accepts_sse, header, header_count, is_json
from mcp_resume_asgi.wire.replies import send_bytes, send_jsonrpc_error
from mcp_resume_asgi.wire.scope_keys import FEATURES_KEY
from mcp_resume_asgi.wire.tokens import new_stream_id

if TYPE_CHECKING:
    from mcp_resume_asgi.engine.cluster import Node
    from mcp_resume_asgi.engine.engine import Engine
    from mcp_resume_asgi.policy import RouteTable

__all__ = ["PostHandling"]


class PostHandling:
    """The POST half of `ResumeMiddleware` (see the module docstring)."""

    # Provided by `ResumeMiddleware`:
    app: ASGIApp
    engine: Engine
    routes: RouteTable
    node: Node | None
    outage: StoreHealth
    max_body_bytes: int
    _local_path: Callable[[Scope], str]
    """The request's path under the app's root path."""
    _owner_elsewhere: Callable[[Scope, Send], Awaitable[str | None]]
    """The live node holding the request's session, if not this one ("": answered 404)."""

    async def _post(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not is_json(scope):
            await self.app(scope, receive, send)
            return
        body = await read_body_or_refuse(receive, send, self.max_body_bytes)
        if body is None:
            return
        # `__call__` already tracks this request's send (nothing was sent since): one wrapper is enough.
        tracked = send if isinstance(send, TrackedSend) else TrackedSend(send)
        try:
            await self._post_body(scope, receive, tracked, body)
        except Exception as exc:
            if tracked.started or not self.outage.is_outage(exc):
                raise
            self.outage.failed(exc)
            await without_store(
                self.app,
                scope,
                receive,
                send,
                stream_url=False,
                max_body_bytes=self.max_body_bytes,
                body=body,
            )

    async def _post_body(self, scope: Scope, receive: Receive, send: Send, body: bytes) -> None:
        owner = await self._owner_elsewhere(scope, send)
        if owner is not None:
            if owner and self.node is not None:
                await self.node.relay(owner, scope, receive, send, body)
            return
        message = p.loads_wire(body)
        if message is None and p.non_finite(body):
            await send_jsonrpc_error(send, 400, p.PARSE_ERROR, "Parse error: NaN and Infinity are not JSON")
            return
        if (notice := self.engine.cancels.notice(scope, message)) is not None:
            await self.engine.cancels.handle(scope, receive, send, body, notice)
            return
        if (
            isinstance(message, dict)
            and isinstance(message.get("method"), str)
            and "id" in message
            and p.valid_id(message["id"])
            and accepts_sse(scope)
        ):
            await self._request(scope, receive, send, body, message)
            return
        await self.app(scope, replay_receive(body, receive), send)
        # A stock client answers a server-to-client request by POSTing it to the endpoint.
        answers: list[Any] = message if isinstance(message, list) else [message]
        session_id = header(scope, b"mcp-session-id")
        for answer in answers:
            if p.is_response(answer):
                await self.engine.answers.answered(session_id, answer["id"])

    async def _request(
        self, scope: Scope, receive: Receive, send: Send, body: bytes, message: dict[str, Any]
    ) -> None:
        method: str = message["method"]
        params = message.get("params")
        tool = params.get("name") if method == "tools/call" and isinstance(params, dict) else None
        route, policy = self.routes.choose(
            self._local_path(scope), method, tool if isinstance(tool, str) else None
        )
        session_id = header(scope, b"mcp-session-id")
        if method == "initialize":
            requested = params.get("protocolVersion") if isinstance(params, dict) else None
            version = p.valid_version(requested if isinstance(requested, str) else None) or p.DEFAULT_VERSION
        else:
            version = await self.engine.version_for(scope, session_id)
        idempotency_key = header(scope, b"idempotency-key")
        if idempotency_key is not None and (
            header_count(scope, b"idempotency-key") > 1
            or not 0 < len(idempotency_key) <= 255
            or not idempotency_key.isascii()
            or not idempotency_key.isprintable()
        ):
            await send_jsonrpc_error(
                send, 400, p.INVALID_REQUEST, "Idempotency-Key must be 1-255 printable ASCII characters"
            )
            return
        stream_id = new_stream_id()
        first_messages: list[dict[str, Any]] = []
        delivery: Delivery | None = None
        features: tuple[FeatureMiddleware, ...] = scope.get(FEATURES_KEY, ())
        if any(method in feature.answers for feature in features) and await self._refused_as_the_app_would(
            scope, send, message, session_id
        ):
            return
        if features:
            ctx = RequestContext(
                engine=self.engine,
                scope=scope,
                body=body,
                message=message,
                method=method,
                tool=tool if isinstance(tool, str) else None,
                session_id=session_id,
                version=version,
                principal=self.engine.principal(scope),
                route=route,
                policy=policy,
                stream_id=stream_id,
                capabilities=await self.engine.client_capabilities(session_id, message),
            )
            for feature in features:
                if await feature.intercept(ctx, receive, send):
                    return
            for feature in features:
                first_messages += await feature.first_messages(ctx)
            if ctx.survives_close:
                delivery = Delivery(survives_close=True)
        await self.engine.handle_request(
            scope,
            receive,
            send,
            body=body,
            message=message,
            route=route,
            policy=policy,
            version=version,
            session_id=session_id,
            accepts_sse=True,
            idempotency_key=idempotency_key,
            stream_id=stream_id,
            first_messages=first_messages,
            delivery=delivery,
        )

    async def _refused_as_the_app_would(
        self, scope: Scope, send: Send, message: dict[str, Any], session_id: str | None
    ) -> bool:
        """A request a feature layer answers itself gets the app's refusals first: the transport's
        header rules (`wire/header_rules.py`) and, for a session's request whose session the store
        does not know (none named, or one the store lost), the app's word on that session. True
        when refused (answered)."""
        refusal = header_rules.refusal(scope["headers"], message)
        if refusal is not None:
            content_type = [(b"content-type", b"application/json")] if refusal.body else []
            await send_bytes(send, refusal.status, refusal.body, content_type)
            return True
        if header_rules.era_of(scope["headers"]) is not header_rules.Era.SESSION:
            return False
        if session_id is not None and await self.engine.store.get_session(session_id) is not None:
            return False
        version = header(scope, b"mcp-protocol-version") or p.DEFAULT_VERSION
        refused = await self.engine.admission.session_refusal(
            scope, self._local_path(scope), session_id, version
        )
        if refused is None:
            return False
        await refused.send(send)
        return True
