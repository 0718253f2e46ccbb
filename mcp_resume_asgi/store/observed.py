"""A store whose calls are timed and whose outages are counted, for telemetry.

`observed(store, telemetry)` is the store itself when telemetry is off (nothing in the way);
else an `ObservedStore` in front of it, which counts each outage once, when the store stops
answering after it had answered (`mcp_resume.store.outages`), and - for a `shared` store, one
other processes reach over the network - reports each call's duration by store and operation
(`mcp_resume.store.operation.duration`), while something records it (`Telemetry.active`: not
before an SDK is configured under the global providers). A store kept in process (`MemoryStore`) is not timed:
its calls do no I/O and last microseconds, while a histogram sample costs the OpenTelemetry
SDK more than the call itself (~70k instructions, two to four per `tools/call`); one that can
never be down either (`is_unavailable_error` not overridden) is not wrapped at all. `wait`
and `subscribe` are passed through untimed: they last as long as nothing happens, which is no
latency. Any other attribute (a store's own settings) is the wrapped store's.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Coroutine, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

from mcp_resume_asgi.store.base import KeyAndStream, Listing, SessionInfo, Store, StoreUsage, StreamMeta
from mcp_resume_asgi.telemetry import Telemetry

__all__ = ["ObservedStore", "observed", "store_name"]

T = TypeVar("T")


def store_name(store: Store) -> str:
    """`memory`, `redis`, ...: the store's class name without `Store`, lowercased."""
    return type(store).__name__.removesuffix("Store").lower() or "store"


def observed(store: Store, telemetry: Telemetry) -> Store:
    """`store`, timed and watched when telemetry is on (see the module docstring)."""
    if not telemetry.enabled or isinstance(store, ObservedStore):
        return store
    if (
        not store.shared
        and getattr(store.is_unavailable_error, "__func__", None) is Store.is_unavailable_error
    ):
        return store  # (nothing to time, never down: nothing to watch)
    return ObservedStore(store, telemetry)


class ObservedStore(Store):
    """Times and watches the calls of the store it wraps (see the module docstring)."""

    def __init__(self, inner: Store, telemetry: Telemetry) -> None:
        self.inner = inner
        self.telemetry = telemetry
        self.name = store_name(inner)
        self.shared = inner.shared
        self.durable = inner.durable
        self.write_behind = inner.write_behind
        self.down = False
        """The last call failed as an outage (the next one that succeeds ends it)."""
        self.timed = inner.shared
        """Its calls' durations are reported (a store reached over the network)."""

    def __getattr__(self, name: str) -> Any:
        # Only for what this class does not have: the wrapped store's own attributes.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    async def _timed(self, operation: str, call: Awaitable[T]) -> T:
        # (Its callers return this coroutine, not one of their own around it: one per store call.)
        timed = self.timed and self.telemetry.active().enabled  # (no SDK configured: not timed)
        start = time.perf_counter() if timed else 0.0
        try:
            result = await call
        except BaseException as exc:
            if timed:
                elapsed = time.perf_counter() - start
                self.telemetry.store_operation(self.name, operation, elapsed, type(exc).__qualname__)
            if self.inner.is_unavailable_error(exc) and not self.down:
                self.down = True
                self.telemetry.store_outage(self.name)
            raise
        if timed:
            self.telemetry.store_operation(self.name, operation, time.perf_counter() - start, None)
        self.down = False
        return result

    def is_unavailable_error(self, exc: BaseException) -> bool:
        return self.inner.is_unavailable_error(exc)

    def own_secret(self) -> bytes | None:
        return self.inner.own_secret()

    async def flush(self) -> None:
        await self.inner.flush()

    def detached(
        self, stream_id: str, gen: int, *, last_contact: float, delivered_seq: int
    ) -> Coroutine[Any, Any, Any]:
        # The wrapped store's own (`MemoryStore`, `SQLiteStore`: cheaper than its compare-and-set),
        # timed under the compare-and-set's name, which it is.
        call = self.inner.detached(stream_id, gen, last_contact=last_contact, delivered_seq=delivered_seq)
        return self._timed("update_stream_if", call)

    def create_stream(self, meta: StreamMeta, ttl_s: float) -> Coroutine[Any, Any, None]:
        return self._timed("create_stream", self.inner.create_stream(meta, ttl_s))

    def get_stream(self, stream_id: str) -> Coroutine[Any, Any, StreamMeta | None]:
        return self._timed("get_stream", self.inner.get_stream(stream_id))

    def update_stream(
        self, stream_id: str, ttl_s: float | None = None, *, returning: bool = False, **changes: Any
    ) -> Coroutine[Any, Any, StreamMeta | None]:
        return self._timed(
            "update_stream", self.inner.update_stream(stream_id, ttl_s, returning=returning, **changes)
        )

    def update_stream_if(
        self, stream_id: str, expect: Mapping[str, Any], ttl_s: float | None = None, **changes: Any
    ) -> Coroutine[Any, Any, tuple[bool, StreamMeta | None]]:
        return self._timed(
            "update_stream_if", self.inner.update_stream_if(stream_id, expect, ttl_s, **changes)
        )

    def attach(self, stream_id: str, now: float) -> Coroutine[Any, Any, StreamMeta | None]:
        return self._timed("attach", self.inner.attach(stream_id, now))

    def delete_stream(self, stream_id: str) -> Coroutine[Any, Any, None]:
        return self._timed("delete_stream", self.inner.delete_stream(stream_id))

    def append(
        self,
        stream_id: str,
        events: Sequence[tuple[int, bytes]],
        *,
        max_events: int,
        max_bytes: int,
        owner: str | None = None,
    ) -> Coroutine[Any, Any, None]:
        return self._timed(
            "append",
            self.inner.append(stream_id, events, max_events=max_events, max_bytes=max_bytes, owner=owner),
        )

    def open_with(
        self,
        meta: StreamMeta,
        ttl_s: float,
        events: Sequence[tuple[int, bytes]],
        *,
        max_events: int,
        max_bytes: int,
        final_seq: int | None = None,
        retain_s: float | None = None,
        listing: Listing | None = None,
    ) -> Coroutine[Any, Any, bool]:
        return self._timed(
            "open_with",
            self.inner.open_with(
                meta,
                ttl_s,
                events,
                max_events=max_events,
                max_bytes=max_bytes,
                final_seq=final_seq,
                retain_s=retain_s,
                listing=listing,
            ),
        )

    def append_final(
        self,
        stream_id: str,
        events: Sequence[tuple[int, bytes]],
        *,
        max_events: int,
        max_bytes: int,
        final_seq: int,
        retain_s: float | None = None,
        owner: str | None = None,
        unlist: str | None = None,
    ) -> Coroutine[Any, Any, bool]:
        return self._timed(
            "append_final",
            self.inner.append_final(
                stream_id,
                events,
                max_events=max_events,
                max_bytes=max_bytes,
                final_seq=final_seq,
                retain_s=retain_s,
                owner=owner,
                unlist=unlist,
            ),
        )

    def read(
        self, stream_id: str, after_seq: int, limit: int = 1000
    ) -> Coroutine[Any, Any, list[tuple[int, bytes]]]:
        return self._timed("read", self.inner.read(stream_id, after_seq, limit))

    def read_with_meta(
        self, stream_id: str, after_seq: int, limit: int = 1000
    ) -> Coroutine[Any, Any, tuple[list[tuple[int, bytes]], StreamMeta | None]]:
        return self._timed("read_with_meta", self.inner.read_with_meta(stream_id, after_seq, limit))

    def read_key_and_stream(self, key: str, stream_id: str) -> Coroutine[Any, Any, KeyAndStream]:
        return self._timed("read_key_and_stream", self.inner.read_key_and_stream(key, stream_id))

    async def wait(
        self, stream_id: str, after_seq: int, within_s: float, *, version: int | None = None
    ) -> None:
        await self.inner.wait(stream_id, after_seq, within_s, version=version)

    def put_session(self, info: SessionInfo, ttl_s: float) -> Coroutine[Any, Any, None]:
        return self._timed("put_session", self.inner.put_session(info, ttl_s))

    def get_session(self, session_id: str) -> Coroutine[Any, Any, SessionInfo | None]:
        return self._timed("get_session", self.inner.get_session(session_id))

    def delete_session(self, session_id: str) -> Coroutine[Any, Any, list[str]]:
        return self._timed("delete_session", self.inner.delete_session(session_id))

    def set_key(self, key: str, value: str, ttl_s: float) -> Coroutine[Any, Any, None]:
        return self._timed("set_key", self.inner.set_key(key, value, ttl_s))

    def get_key(self, key: str) -> Coroutine[Any, Any, str | None]:
        return self._timed("get_key", self.inner.get_key(key))

    def delete_key(self, key: str, value: str | None = None) -> Coroutine[Any, Any, bool]:
        return self._timed("delete_key", self.inner.delete_key(key, value))

    def publish(self, channel: str, message: bytes) -> Coroutine[Any, Any, int]:
        return self._timed("publish", self.inner.publish(channel, message))

    def subscribe(self, channel: str) -> AbstractAsyncContextManager[AsyncIterator[bytes]]:
        return self.inner.subscribe(channel)

    def usage(self) -> Coroutine[Any, Any, StoreUsage]:
        return self._timed("usage", self.inner.usage())

    def add_key(self, key: str, value: str, ttl_s: float) -> Coroutine[Any, Any, str | None]:
        return self._timed("add_key", self.inner.add_key(key, value, ttl_s))

    def replace_key(
        self, key: str, expected: str | None, value: str, ttl_s: float
    ) -> Coroutine[Any, Any, bool]:
        return self._timed("replace_key", self.inner.replace_key(key, expected, value, ttl_s))

    def index_add(self, index: str, member: str, expires_at: float, *, cap: int) -> Coroutine[Any, Any, bool]:
        return self._timed("index_add", self.inner.index_add(index, member, expires_at, cap=cap))

    def index_remove(self, index: str, member: str) -> Coroutine[Any, Any, None]:
        return self._timed("index_remove", self.inner.index_remove(index, member))

    def index_page(
        self, index: str, *, after: tuple[float, str] | None = None, limit: int = 100
    ) -> Coroutine[Any, Any, list[tuple[str, float]]]:
        return self._timed("index_page", self.inner.index_page(index, after=after, limit=limit))

    def index_count(self, index: str) -> Coroutine[Any, Any, int]:
        return self._timed("index_count", self.inner.index_count(index))

    async def aclose(self) -> None:
        await self.inner.aclose()
