"""A real store whose next write of a key can be held, to force an interleaving in a test.

`PausingStore(inner)` is `inner` (a `MemoryStore` or a `RedisStore`: every call goes to it)
except that a write of a key the test armed with `hold_write` waits, before it reaches the
store, until the test releases it. The writer has done its reads by then, so whatever the
test does meanwhile lands between a read-modify-write's read and its write.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from mcp_resume_asgi.store.base import Store


@dataclass
class Held:
    """One armed hold: `reached` once a matching write waits, which goes on at `release`."""

    key: str
    matches: Callable[[str], bool]
    reached: anyio.Event = field(default_factory=anyio.Event)
    release: anyio.Event = field(default_factory=anyio.Event)
    value: str | None = None
    """The value of the write held."""


class PausingStore:
    """See the module docstring. One hold per `hold_write` call: the first matching write."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.holds: list[Held] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def hold_write(self, key: str, matches: Callable[[str], bool] = lambda value: True) -> Held:
        held = Held(key, matches)
        self.holds.append(held)
        return held

    async def _pass(self, key: str, value: str) -> None:
        for held in self.holds:
            if held.key == key and held.matches(value):
                self.holds.remove(held)
                held.value = value
                held.reached.set()
                await held.release.wait()
                return

    async def set_key(self, key: str, value: str, ttl_s: float) -> None:
        await self._pass(key, value)
        await self.inner.set_key(key, value, ttl_s)

    async def replace_key(self, key: str, expected: str | None, value: str, ttl_s: float) -> bool:
        await self._pass(key, value)
        return await self.inner.replace_key(key, expected, value, ttl_s)


Store.register(PausingStore)
