"""One clock for every stream of an engine: a deadline heap and one task that drives it.

Streams need timers - keep-alives, at-will closes, the held head of a first
answer, stalled writes, the resume window - and most of them never fire: a quick
call is over long before its keep-alive is due. A task, a poll or a sleep per
stream would cost every request; an entry in one heap costs a push, and only a
timer that fires costs more. The driver task runs while the heap holds entries
(it is started on demand and ends when the heap is empty, so nothing outlives an
event loop) and calls each due target's callback with the time, which must not block:
anything slow it starts as a task of its own (`spawn`).

Entries are never removed: a target re-arms for its next deadline when it fires,
and a target whose deadline moved later just finds nothing due.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel

__all__ = [
    "Scheduler",
    "Timer",
    "spawn",
]

logger = logging.getLogger(__name__)

_tasks: set[asyncio.Task[Any]] = set()


def spawn(fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
    """Start `fn(*args)` as a task of its own, outside any request's task group.

    Used for work that outlives what started it (the scheduler, a writer for a
    stalled connection, an expiry); its errors are logged, never raised.
    """

    async def guarded() -> None:
        try:
            await fn(*args)
        except Exception:
            logger.exception("background task %s failed", getattr(fn, "__qualname__", fn))

    trio = sys.modules.get("trio")
    if trio is not None and _in_trio(trio):
        trio.lowlevel.spawn_system_task(guarded)
    else:
        task = asyncio.get_running_loop().create_task(guarded())
        _tasks.add(task)
        task.add_done_callback(_tasks.discard)


def _in_trio(trio: Any) -> bool:
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return False
    return True


class Timer:
    """One target's place in the scheduler: its callback and the earliest entry it has there.

    `callback(now)` acts on what is due and returns the next deadline (None: none).
    `cancel()` lets go of the callback at once; the heap's entries for it (they are
    never removed) then hold only this small object until they come due.
    """

    __slots__ = ("armed_at", "callback")

    def __init__(self, callback: Callable[[float], float | None]) -> None:
        self.callback: Callable[[float], float | None] | None = callback
        self.armed_at = float("inf")

    def cancel(self) -> None:
        self.callback = None


class Scheduler:
    """The engine's timers (see the module docstring). Times are `time.monotonic()`."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Timer]] = []
        self._counter = itertools.count()
        self._running = False
        self._wake: anyio.Event | None = None
        self._sleep_until = float("inf")

    def arm(self, target: Timer, when: float | None) -> None:
        """Make sure `target.callback` runs at `when` (or earlier)."""
        if when is None or when >= target.armed_at or target.callback is None:
            return
        target.armed_at = when
        heapq.heappush(self._heap, (when, next(self._counter), target))
        if not self._running:
            self._running = True
            spawn(self._drive)
        elif when < self._sleep_until and self._wake is not None:
            self._wake.set()

    async def _drive(self) -> None:
        try:
            heap = self._heap
            while heap:
                while heap and heap[0][2].callback is None:
                    heapq.heappop(heap)  # a finished target's entry: no need to wake for it
                if not heap:
                    break
                now = time.monotonic()
                when = heap[0][0]
                if when > now:
                    self._sleep_until = when
                    self._wake = anyio.Event()
                    with anyio.move_on_after(when - now):
                        await self._wake.wait()
                    self._wake = None
                    self._sleep_until = float("inf")
                    continue
                due = []
                while self._heap and self._heap[0][0] <= now:
                    entry = heapq.heappop(self._heap)
                    if (
                        entry[2].armed_at == entry[0]
                    ):  # else stale: the target was armed earlier and fired since
                        entry[2].armed_at = float("inf")
                        due.append(entry[2])
                for target in due:
                    callback = target.callback
                    if callback is None:
                        continue
                    try:
                        following = callback(now)
                    except Exception:
                        logger.exception("a stream timer failed")
                        continue
                    self.arm(target, following)
                await anyio.lowlevel.checkpoint()  # what fired may be due again at once: let it act first
        finally:
            self._running = False
            self._wake = None
