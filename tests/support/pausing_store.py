"""A real store whose next write of a key can be held, to force an interleaving in a test.

`PausingStore(inner)` is `inner` (a `MemoryStore` or a `RedisStore`: every call goes to it)
except that a write of a key the test armed with `hold_write` waits, before it reaches the
store, until the test releases it. The writer has done its reads by then, so whatever the
test does meanwhile lands between a read-modify-write's read and its write. `hold_attach`
holds the next `attach` of a stream the same way (a connection's answer on its way to open),
`hold_append` the next `append` of events to one (its value: their payloads, decoded; an
`append_final` or `open_with` counts as one), and `hold_read` the answer of the next `read` of
one: the store has answered (what it held then), and the answer is held on its way back, as a
reply in flight over the network is while another call lands.
A key is named exactly, or by a predicate (`startswith("task:")`, say, for an id not known yet).

The app may run in another thread (`tests.support.server.serve` runs uvicorn in one), so
the hold is signalled with `threading.Event`s, waited for in a worker thread: an anyio
event set from another thread's loop does not wake its waiter.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread

from mcp_resume_asgi.store.base import Store, StreamMeta


@dataclass
class Held:
    """One armed hold: `reached()` once a matching call waits, which goes on at `release()`."""

    key: str | Callable[[str], bool]
    matches: Callable[[str], bool]
    operation: str = "write"
    """`write` (`set_key`, `replace_key`), `attach`, `append` or `read`."""
    _reached: threading.Event = field(default_factory=threading.Event)
    _released: threading.Event = field(default_factory=threading.Event)
    value: str | None = None
    """The value of the write held."""
    held_key: str | None = None
    """The key (or stream id) of the call held."""

    def holds(self, operation: str, key: str, value: str) -> bool:
        named = self.key(key) if callable(self.key) else self.key == key
        return self.operation == operation and named and self.matches(value)

    async def reached(self, within_s: float = 5.0) -> None:
        """Return once a matching write waits (TimeoutError after `within_s`)."""
        if not await anyio.to_thread.run_sync(self._reached.wait, within_s, abandon_on_cancel=True):
            raise TimeoutError(f"no write of {self.key} matched within {within_s} s")

    def release(self) -> None:
        self._released.set()

    async def _hold(self, key: str, value: str) -> None:
        self.held_key, self.value = key, value
        self._reached.set()
        await anyio.to_thread.run_sync(self._released.wait, abandon_on_cancel=True)


class PausingStore:
    """See the module docstring. One hold per `hold_write` call: the first matching write."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.holds: list[Held] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def hold_write(
        self, key: str | Callable[[str], bool], matches: Callable[[str], bool] = lambda value: True
    ) -> Held:
        held = Held(key, matches)
        self.holds.append(held)
        return held

    def hold_attach(self, stream_id: str | Callable[[str], bool] = lambda stream_id: True) -> Held:
        held = Held(stream_id, lambda value: True, operation="attach")
        self.holds.append(held)
        return held

    def hold_append(
        self,
        stream_id: str | Callable[[str], bool] = lambda stream_id: True,
        matches: Callable[[str], bool] = lambda payloads: True,
    ) -> Held:
        held = Held(stream_id, matches, operation="append")
        self.holds.append(held)
        return held

    def hold_read(self, stream_id: str | Callable[[str], bool] = lambda stream_id: True) -> Held:
        held = Held(stream_id, lambda value: True, operation="read")
        self.holds.append(held)
        return held

    async def read(self, stream_id: str, after_seq: int, limit: int = 1000) -> list[tuple[int, bytes]]:
        events = await self.inner.read(stream_id, after_seq, limit)
        await self._pass("read", stream_id, "")
        return events

    async def _pass(self, operation: str, key: str, value: str) -> None:
        for held in self.holds:
            if held.holds(operation, key, value):
                self.holds.remove(held)
                await held._hold(key, value)
                return

    async def set_key(self, key: str, value: str, ttl_s: float) -> None:
        await self._pass("write", key, value)
        await self.inner.set_key(key, value, ttl_s)

    async def replace_key(self, key: str, expected: str | None, value: str, ttl_s: float) -> bool:
        await self._pass("write", key, value)
        return await self.inner.replace_key(key, expected, value, ttl_s)

    async def attach(self, stream_id: str, now: float) -> StreamMeta | None:
        await self._pass("attach", stream_id, "")
        return await self.inner.attach(stream_id, now)

    async def append(
        self,
        stream_id: str,
        events: Sequence[tuple[int, bytes]],
        *,
        max_events: int,
        max_bytes: int,
        owner: str | None = None,
    ) -> None:
        await self._pass_events(stream_id, events)
        await self.inner.append(stream_id, events, max_events=max_events, max_bytes=max_bytes, owner=owner)

    async def append_final(self, stream_id: str, events: Sequence[tuple[int, bytes]], **kwargs: Any) -> bool:
        """An append that also completes the stream: held as an `append`."""
        await self._pass_events(stream_id, events)
        return await self.inner.append_final(stream_id, events, **kwargs)

    async def open_with(
        self, meta: StreamMeta, ttl_s: float, events: Sequence[tuple[int, bytes]], **kwargs: Any
    ) -> None:
        """A stream created with its first events: held as an `append` of them."""
        if events:
            await self._pass_events(meta.stream_id, events)
        await self.inner.open_with(meta, ttl_s, events, **kwargs)

    async def _pass_events(self, stream_id: str, events: Sequence[tuple[int, bytes]]) -> None:
        payloads = b"".join(payload for _, payload in events).decode("utf-8", "replace")
        await self._pass("append", stream_id, payloads)


Store.register(PausingStore)
