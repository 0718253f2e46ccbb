"""The seam between feature layers (SEP-975, resume tokens, ...) and the stream engine.

A feature layer is a thin ASGI middleware placed *outside* `ResumeMiddleware`.
It does not parse the request again nor run an engine of its own: it adds itself
to the ASGI scope, and the engine - which has already read and classified the
JSON-RPC request - asks each layer, in order, whether it answers the request
itself (`intercept`) and which messages a new stream starts with (`first_messages`).
So every layer is usable alone in a `middleware=[...]` list, as long as it comes
before `ResumeMiddleware`, and all layers share one engine and one store. A list in another
order would leave a layer unasked, silently: the lifespan's startup is refused instead, saying
the order (`stack_place`, `misplaced`). A layer sees
each request as a `RequestContext` (`engine/port.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_resume_asgi.engine.port import Drained, RequestContext
from mcp_resume_asgi.wire.asgi import check_asgi_app
from mcp_resume_asgi.wire.scope_keys import ENGINE_PASSED, FEATURES_KEY

__all__ = ["STACK_ORDER", "FeatureMiddleware", "misplaced"]

logger = logging.getLogger(__name__)

#: The order of a `middleware=[...]` list, outermost first (what `resumable()` builds).
STACK_ORDER = (
    "RestMiddleware, then TasksMiddleware, then ResumeTokenMiddleware and "
    "ResumableRequestsMiddleware, then ResumeMiddleware"
)


@runtime_checkable
class _Drains(Protocol):
    async def drain(self) -> Drained: ...


class FeatureMiddleware:
    """Base class of feature layers: registers itself in the scope, then calls inward."""

    answers: frozenset[str] = frozenset()
    """JSON-RPC methods this layer answers itself (the app does not know them). They need
    the store: while it is down they get a 503 to retry, not the app's "method not found"."""

    stack_place: ClassVar[int] = 2
    """Where the layer goes in a stack, outermost first: the REST face 0 (its calls go inward
    through the Tasks layer), the Tasks layer 1 (a call that becomes a task is its alone, no
    layer outside it may take it first), the others 2; `ResumeMiddleware` after all of them."""

    def __init__(self, app: ASGIApp) -> None:
        check_asgi_app(app, wrapper=type(self).__name__)
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            scope = dict(scope)
            scope[FEATURES_KEY] = (*scope.get(FEATURES_KEY, ()), self)
        elif kind == "lifespan":
            outer: tuple[FeatureMiddleware, ...] = scope.get(FEATURES_KEY, ())
            wrong = misplaced(self, outer, inside_engine=ENGINE_PASSED in scope)
            if wrong is not None:
                await _refuse_startup(receive, send, wrong)
                return
            scope = {**scope, FEATURES_KEY: (*outer, self)}
        await self.app(scope, receive, send)

    async def drain(self) -> Drained:
        """Drain the `ResumeMiddleware` this layer wraps (`ResumeMiddleware.drain`), through the
        layers between."""
        inner = self.app
        if not isinstance(inner, _Drains):
            raise TypeError(f"{type(self).__name__} wraps no ResumeMiddleware to drain")
        return await inner.drain()

    async def intercept(self, ctx: RequestContext, receive: Receive, send: Send) -> bool:
        """Answer the request without the app (return True), or leave it to the engine."""
        return False

    async def first_messages(self, ctx: RequestContext) -> list[dict[str, Any]]:
        """JSON-RPC messages recorded at the start of the request's stream, before the app's.

        Any message makes the engine open the SSE stream at once.
        """
        return []


def misplaced(
    layer: FeatureMiddleware, outer: Sequence[FeatureMiddleware], *, inside_engine: bool
) -> str | None:
    """Why `layer`, reached through the layers `outer` (outermost first), is in the wrong place of
    its stack; None when it is where it works."""
    name = type(layer).__name__
    if inside_engine:
        return (
            f"{name} is inside ResumeMiddleware, where no request reaches it: list the layers "
            f"outermost first, {STACK_ORDER} (or use resumable(), which stacks them so)"
        )
    for other in outer:
        if other.stack_place > layer.stack_place:
            return (
                f"{name} is inside {type(other).__name__}, which would take its requests first: list "
                f"the layers outermost first, {STACK_ORDER} (or use resumable(), which stacks them so)"
            )
    return None


async def _refuse_startup(receive: Receive, send: Send, why: str) -> None:
    """Fail the lifespan's startup with `why` (the server says it and stops)."""
    logger.error("refusing to start: %s", why)
    message = await receive()
    if message["type"] == "lifespan.startup":
        await send({"type": "lifespan.startup.failed", "message": why})
