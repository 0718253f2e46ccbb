"""One run of a piece of work per key at a time; whoever asks for the same key meanwhile
waits for that run and takes its value.

The face's OpenAPI document (`openapi_documents.py`) is what it is for: ten clients asking
for it at once must not make ten fetches of a 10 MB tools list and ten builds. A run that
fails or is cancelled gives its waiters nothing: each of them tries again itself (the
next becomes the run), so one caller's failure is never another's answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import anyio

V = TypeVar("V")


@dataclass(slots=True)
class _Run(Generic[V]):
    done: anyio.Event = field(default_factory=anyio.Event)
    value: V | None = None
    ok: bool = False


class SingleFlight(Generic[V]):
    """`await flights.run(key, work)`: `work()`'s value, run once for concurrent callers of `key`."""

    def __init__(self) -> None:
        self._runs: dict[Hashable, _Run[V]] = {}

    async def run(self, key: Hashable, work: Callable[[], Awaitable[V]]) -> V:
        while True:
            running = self._runs.get(key)
            if running is None:
                break
            await running.done.wait()
            if running.ok:
                return running.value  # type: ignore[return-value]  # (set with ok)
        mine: _Run[V] = _Run()
        self._runs[key] = mine
        try:
            value = await work()
            mine.value, mine.ok = value, True
            return value
        finally:
            del self._runs[key]
            mine.done.set()

    def __len__(self) -> int:
        """How many keys have a run under way."""
        return len(self._runs)
