"""Which hosted requests a client's `notifications/cancelled` may name, registered in the store.

A request that such a notice may cancel (`cancel_notices.cancellable`: an opted-in
2026-07-28 request whose close cancels it) is registered, once the app has read it (its auth
has said who is calling), in a store index named by its binding - principal, endpoint,
request id, `Idempotency-Key` - with its stream's TTL, and taken out when its app is done.
This is part of a hosted stream's life, so the engine keeps it; answering the notices, which
reads these indexes, is `http/client_cancels.py`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from mcp_resume_asgi.core.cancel_notices import MAX_SHARING, cancellable
from mcp_resume_asgi.engine.port import Delivery
from mcp_resume_asgi.policy import Policy, running_ttl
from mcp_resume_asgi.store.base import Store, StreamKind
from mcp_resume_asgi.store.keys import cancel_binding
from mcp_resume_asgi.wire.asgi import Scope

__all__ = ["IDEMPOTENCY_KEY", "BindableRequest", "CancelBindings", "header_values"]

IDEMPOTENCY_KEY = b"idempotency-key"


class BindableRequest(Protocol):
    """A hosted request, as far as its binding goes (a `HostedStream`)."""

    @property
    def stream_id(self) -> str: ...
    @property
    def kind(self) -> StreamKind: ...
    @property
    def version(self) -> str: ...
    @property
    def opted_in(self) -> bool: ...
    @property
    def delivery(self) -> Delivery | None: ...
    @property
    def scope(self) -> Scope: ...
    @property
    def path(self) -> str: ...
    @property
    def principal(self) -> str | None: ...
    @property
    def request_id(self) -> Any: ...
    @property
    def policy(self) -> Policy: ...


class CancelBindings:
    """The bindings of the requests hosted here (see the module docstring)."""

    def __init__(self, store: Store, store_outage: Callable[[BaseException], bool]) -> None:
        self.store = store
        self.store_outage = store_outage
        """Whether an error says the store is down (the middleware is told)."""
        self._bindings: dict[str, str] = {}
        """Stream id -> the index it is registered in, for requests hosted here."""

    def may_bind(self, hosted: BindableRequest) -> bool:
        """Whether `taken` has anything to do for `hosted` (asked first: most requests have no
        binding, and then no coroutine of `taken` is made)."""
        delivery = hosted.delivery
        return hosted.stream_id not in self._bindings and cancellable(
            is_request=hosted.kind is StreamKind.REQUEST,
            version=hosted.version,
            opted_in=hosted.opted_in,
            survives_close=delivery is not None and delivery.survives_close,
        )

    def bound(self, stream_id: str) -> bool:
        """Whether the stream is registered under a binding (`forget` has something to do)."""
        return stream_id in self._bindings

    async def taken(self, hosted: BindableRequest) -> None:
        """The app read `hosted`'s request: register it under its binding, if a notice may cancel it."""
        if not self.may_bind(hosted):
            return
        keys = header_values(hosted.scope, IDEMPOTENCY_KEY)
        name = cancel_binding(hosted.path, hosted.principal, hosted.request_id, keys[0] if keys else None)
        if name is None:
            return
        expires_at = time.time() + running_ttl(hosted.policy)
        try:
            added = await self.store.index_add(name, hosted.stream_id, expires_at, cap=MAX_SHARING)
        except Exception as exc:
            if not self.store_outage(exc):
                raise
            return  # (not cancellable by notice; its close still detaches)
        if added:
            self._bindings[hosted.stream_id] = name

    async def forget(self, stream_id: str) -> None:
        """The stream's app is done: no notice names its request any more."""
        name = self._bindings.pop(stream_id, None)
        if name is None:
            return
        try:
            await self.store.index_remove(name, stream_id)
        except Exception as exc:
            if not self.store_outage(exc):
                raise  # (else the member expires with the stream's TTL)


def header_values(scope: Scope, name: bytes) -> list[str]:
    """Every value of the request header `name`, in order."""
    return [value.decode("latin-1") for key, value in scope["headers"] if key == name]
