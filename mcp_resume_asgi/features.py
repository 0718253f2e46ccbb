"""The seam between feature layers (SEP-975, resume tokens, ...) and the stream engine.

A feature layer is a thin ASGI middleware placed *outside* `ResumeMiddleware`.
It does not parse the request again nor run an engine of its own: it adds itself
to the ASGI scope, and the engine - which has already read and classified the
JSON-RPC request - asks each layer, in order, whether it answers the request
itself (`intercept`) and which messages a new stream starts with (`first_messages`).
So every layer is usable alone in a `middleware=[...]` list, as long as it comes
before `ResumeMiddleware`, and all layers share one engine and one store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_resume_asgi.connection import Delivery
from mcp_resume_asgi.policy import Policy
from mcp_resume_asgi.wire.asgi import check_asgi_app
from mcp_resume_asgi.wire.scope_keys import FEATURES_KEY

if TYPE_CHECKING:
    from mcp_resume_asgi.engine import Engine, RetryAnswer


@dataclass(slots=True)
class RequestContext:
    """A JSON-RPC request on its way into the engine, as the layers see it."""

    engine: Engine
    scope: Scope
    body: bytes
    message: dict[str, Any]
    method: str
    tool: str | None
    session_id: str | None
    version: str
    principal: str | None
    route: int
    policy: Policy
    stream_id: str
    """The id the request's stream will have if the engine runs it."""
    capabilities: dict[str, Any] = field(default_factory=dict)
    """The client's capabilities: per request (`_meta`, 2026-07-28) or from the session's `initialize`."""
    survives_close: bool = False
    """Set by a layer that gives the client a way back to the request's work (SEP-975's
    resume token): its connection closing detaches instead of cancelling (2026-07-28)."""

    @property
    def request_id(self) -> Any:
        return self.message["id"]

    @property
    def params(self) -> dict[str, Any]:
        params = self.message.get("params")
        return params if isinstance(params, dict) else {}

    async def host(
        self,
        receive: Receive,
        send: Send,
        *,
        delivery: Delivery | None = None,
        policy: Policy | None = None,
        first_messages: list[dict[str, Any]] | None = None,
        idempotency_key: str | None = None,
        on_retry: RetryAnswer | None = None,
    ) -> tuple[str, int] | None:
        """Hand the request to the engine as it stands here (a layer that serves it its own way:
        with a `Delivery`, another policy, its own answer to a retry); see `Engine.handle_request`."""
        return await self.engine.handle_request(
            self.scope,
            receive,
            send,
            body=self.body,
            message=self.message,
            route=self.route,
            policy=policy or self.policy,
            version=self.version,
            session_id=self.session_id,
            accepts_sse=True,
            idempotency_key=idempotency_key,
            stream_id=self.stream_id,
            first_messages=first_messages,
            delivery=delivery,
            on_retry=on_retry,
        )


class FeatureMiddleware:
    """Base class of feature layers: registers itself in the scope, then calls inward."""

    answers: frozenset[str] = frozenset()
    """JSON-RPC methods this layer answers itself (the app does not know them). They need
    the store: while it is down they get a 503 to retry, not the app's "method not found"."""

    def __init__(self, app: ASGIApp) -> None:
        check_asgi_app(app, wrapper=type(self).__name__)
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope = dict(scope)
            scope[FEATURES_KEY] = (*scope.get(FEATURES_KEY, ()), self)
        await self.app(scope, receive, send)

    async def intercept(self, ctx: RequestContext, receive: Receive, send: Send) -> bool:
        """Answer the request without the app (return True), or leave it to the engine."""
        return False

    async def first_messages(self, ctx: RequestContext) -> list[dict[str, Any]]:
        """JSON-RPC messages recorded at the start of the request's stream, before the app's.

        Any message makes the engine open the SSE stream at once.
        """
        return []
