"""The seam between feature layers (SEP-975, resume tokens, ...) and the stream engine.

A feature layer is a thin ASGI middleware placed *outside* `ResumeMiddleware`.
It does not parse the request again nor run an engine of its own: it adds itself
to the ASGI scope, and the engine - which has already read and classified the
JSON-RPC request - asks each layer, in order, whether it answers the request
itself (`intercept`) and which messages a new stream starts with (`first_messages`).
So every layer is usable alone in a `middleware=[...]` list, as long as it comes
before `ResumeMiddleware`, and all layers share one engine and one store. A layer sees
each request as a `RequestContext` (`engine/port.py`).
"""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_resume_asgi.engine.port import RequestContext
from mcp_resume_asgi.wire.asgi import check_asgi_app
from mcp_resume_asgi.wire.scope_keys import FEATURES_KEY

__all__ = ["FeatureMiddleware"]


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
