"""One clock for every stream of an engine: a deadline heap and one task that drives it.

Streams need timers - keep-alives, at-will closes, the held head of a first
answer, stalled writes, the resume window - and most of them never fire: a quick
call is over long before its keep-alive is due. A task, a poll or a sleep per
stream would cost every request; an entry in one heap costs a push, and only a
timer that fires costs more. On asyncio one `call_later` handle stands for the
earliest entry (moved only when an earlier one comes more than `SLACK_S` before
it); on trio a driver task runs while the heap holds entries (started on demand,
ended when the heap is empty, so nothing outlives an event loop). Either calls each
due target's callback with the time, which must not block: anything slow it starts
as a task of its own (`spawn`).

Entries are not removed one by one: a target re-arms for its next deadline when it
fires, and a target whose deadline moved later just finds nothing due. A target armed
for no deadline (`arm` None: a quick call, over) lets its entries go stale: they
are dropped without a call, and no wake-up is set for them. Stale entries are
dropped in bulk when they outnumber the live ones (`COMPACT_MIN` at least): a call
that armed its resume window for a moment (its answer written before its app
returned, as most are under load) would otherwise leave an entry for that whole
window, tens of thousands on a busy server, each walked by every full collection
of the garbage collector. A deadline that what
set it nearly always takes back at once (a write's stall) is not armed per write:
one handle checks, by the earliest such deadline, every target that asked, and
those still in need arm it then (`check_by`).

The app's requests run here too (`AppTasks`): as tasks of the engine's, not of the
server's request task, so a POST's ASGI call ends when its client is gone while
the app's work goes on, recorded, until it ends or the lifespan's drain ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import heapq
import logging
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import anyio
import anyio.lowlevel

from mcp_resume_asgi.engine.event_loop import running_asyncio_loop

__all__ = [
    "SLACK_S",
    "AppTasks",
    "Scheduler",
    "Timer",
    "spawn",
]

logger = logging.getLogger(__name__)

_tasks: set[asyncio.Task[Any]] = set()

#: (asyncio) An entry due this little before the pending wake-up does not move it: it fires
#: that much late, and a burst of arms costs no handle each.
SLACK_S = 0.002


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


_NEVER = float("inf")

COMPACT_MIN = 1024
"""The heap is rid of its stale entries once it holds more than this many, and more than twice
the live ones it held after its last clean-up (a pass over the heap: amortized, one step per push)."""


class Timer:
    """One target's place in the scheduler: its callback and the earliest entry it has there.

    `callback(now)` acts on what is due and returns the next deadline (None: none).
    `cancel()` lets go of the callback at once; the heap's entries for it (they are
    never removed) then hold only this small object until they come due.
    """

    __slots__ = ("armed_at", "callback")

    def __init__(self, callback: Callable[[float], float | None]) -> None:
        self.callback: Callable[[float], float | None] | None = callback
        self.armed_at = _NEVER

    def cancel(self) -> None:
        self.callback = None

    def __lt__(self, other: Timer) -> bool:
        """Two timers' entries due at the same moment: any fixed order will do."""
        return id(self) < id(other)


def _stale(entry: tuple[float, Timer]) -> bool:
    """An entry that calls nothing: its target was cancelled, or armed for another moment since
    (the earliest entry a target has is the one that counts; `arm` None: none counts)."""
    target = entry[1]
    return target.armed_at != entry[0] or target.callback is None


APP_TASK_NAME = "mcp-resume-asgi app request"
"""The name of every app task on asyncio (`AppTasks.start`)."""


class AppTasks:
    """The app's requests, each a task of the engine's (see the module docstring).

    On asyncio a task of the loop's (`create_task`) whose coroutine is the app's own call, whether
    or not the lifespan ran; what follows the app is a task of its own (`then`), started by the
    app task's done callback. The loop keeps only weak references to tasks: an app's is held by
    its stream (`HostedStream.app_call`, the stream held by the engine's live streams) while it
    runs, here once its stream lets go of it (`hold`), and a follow-up is held here. On trio, in
    the nursery the middleware opens around the app's lifespan (`lifespan`), else a system task:
    the app's call and what follows it, one task. Either way the task runs in a copy of the
    context of the request that started it (an outer middleware's context variables reach the
    app), and its errors are logged, never raised. A task's app call is stopped from inside it
    (`HostedStream.stop_app`).
    """

    __slots__ = ("_idle", "_lifespan", "_nursery", "_on_done", "_tasks", "_warned", "running")

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._nursery: Any = None
        self._lifespan = False
        self._warned = False
        self._idle: anyio.Event | None = None
        self.running = 0
        """How many app requests run now (an app's call, or what follows it)."""
        self._on_done = self._finished
        """Every follow-up's done callback: one bound method for all of them, not one each."""

    def start(self, run: Callable[[], Awaitable[Any]], begin: Callable[[contextvars.Context], None]) -> None:
        """Run an app request, in a copy of the calling task's context: on trio `run()` as a task;
        on asyncio `begin(context)`, called in that context, which starts the app's task (`task`)
        and, once it is over, what follows it (`then`), which ends the count."""
        if not self._lifespan and not self._warned:
            self._warned = True
            logger.warning(
                "ResumeMiddleware runs outside the server's lifespan (a mounted app? Starlette's Mount "
                "and FastAPI's mount do not pass it on): the app's requests run as loose tasks, which "
                "no shutdown waits for. Wrap the outermost app, or pass the lifespan on, to drain them."
            )
        self.running += 1
        trio = sys.modules.get("trio")
        if trio is not None and _in_trio(trio):
            if self._nursery is not None:
                self._nursery.start_soon(self._run_counted, run)  # (trio copies the caller's context)
            else:
                trio.lowlevel.spawn_system_task(self._run_counted, run, context=contextvars.copy_context())
            return
        context = contextvars.copy_context()
        context.run(begin, context)

    def task(self, coro: Coroutine[Any, Any, Any], context: contextvars.Context) -> asyncio.Task[Any]:
        """(asyncio) An app's task on `coro` (its own call), in `context`; not held here (`start`).
        One name for all of them (asyncio's own, "Task-<n>", is a string per task: held by every
        idle stream's for as long as its app runs)."""
        return asyncio.get_running_loop().create_task(coro, name=APP_TASK_NAME, context=context)

    def then(self, coro: Coroutine[Any, Any, Any]) -> None:
        """(asyncio) Run `coro`, what follows an app's call, as a task held here, in a copy of the
        current context (the app task's); when it ends, its app request is over (`running`)."""
        task = asyncio.get_running_loop().create_task(coro, name=APP_TASK_NAME)
        self._tasks.add(task)
        task.add_done_callback(self._on_done)  # (also for a task cancelled before it ran)

    async def _run_counted(self, run: Callable[[], Awaitable[Any]]) -> None:
        try:
            await run()
        except Exception:
            logger.exception("the app's request task failed")
        finally:
            self._ended()

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            exc = task.exception()
            if isinstance(exc, Exception):
                logger.error("the app's request task failed", exc_info=exc)
        self._ended()

    def hold(self, task: asyncio.Task[Any]) -> None:
        """(asyncio) Keep an app's `task` until `let_go` (the loop keeps only weak references)."""
        self._tasks.add(task)

    def let_go(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)

    def ended(self) -> None:
        """(asyncio) An app request whose end was taken at once is over (`HostedStream.app_done`)."""
        self._ended()

    def _ended(self) -> None:
        self.running -= 1
        if not self.running and self._idle is not None:
            self._idle.set()
            self._idle = None

    async def idle(self) -> None:
        """Return once no app task runs."""
        while self.running:
            if self._idle is None:
                self._idle = anyio.Event()
            await self._idle.wait()

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Around the app's lifespan: app tasks started meanwhile belong to it (trio: to a
        nursery of its own), and are not loose."""
        self._lifespan = True
        try:
            trio = sys.modules.get("trio")
            if trio is None or not _in_trio(trio):
                yield
                return
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                try:
                    yield
                finally:
                    self._nursery = None
                    nursery.cancel_scope.cancel()  # (after the drain: what is left is stopped)
        finally:
            self._lifespan = False


class Scheduler:
    """The engine's timers (see the module docstring). Times are `time.monotonic()`."""

    def __init__(self) -> None:
        self.apps = AppTasks()
        """The app's requests, run as tasks of the engine's."""
        # `(when, timer)`: no tie-break counter per entry (an idle stream's entry lives for its
        # resume window); timers due at the same moment are ordered by `Timer.__lt__`.
        self._heap: list[tuple[float, Timer]] = []
        self._compact_at = COMPACT_MIN
        """The heap's size past which its stale entries are dropped (`_compact`)."""
        # asyncio: one `call_later` handle for the earliest entry
        self._handle: asyncio.TimerHandle | None = None
        self._handle_at = float("inf")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._checks: set[Callable[[], object]] = set()
        """(asyncio) What to call by `_checks_at` (`check_by`), each once."""
        self._checks_handle: asyncio.TimerHandle | None = None
        self._checks_at = float("inf")
        self._checks_loop: asyncio.AbstractEventLoop | None = None
        # trio: a driver task while the heap holds entries
        self._running = False
        self._wake: anyio.Event | None = None
        self._sleep_until = float("inf")

    def arm(self, target: Timer, when: float | None) -> None:
        """Make sure `target.callback` runs at `when` (or earlier, or up to `SLACK_S` later).

        None: the target has nothing pending (its next deadline is none): its entries go stale,
        and are dropped without a call, nor a wake-up once they are the earliest (`_fire`)."""
        if when is None:
            target.armed_at = _NEVER  # (a quick call's entries: no wake-up for any of them)
            return
        if when >= target.armed_at or target.callback is None:
            return
        target.armed_at = when
        heap = self._heap
        heapq.heappush(heap, (when, target))
        if len(heap) > self._compact_at:
            self._compact()
        loop = running_asyncio_loop()  # (None under trio; no exception raised to learn it)
        if loop is not None:
            if loop is not self._loop or when < self._handle_at - SLACK_S:
                self._call_at(loop, when)
        elif self._running:
            if when < self._sleep_until and self._wake is not None:
                self._wake.set()
        else:
            self._running = True
            spawn(self._drive)

    def _compact(self) -> None:
        """Drop the heap's stale entries (in place: a driver holds the list)."""
        heap = self._heap
        heap[:] = [entry for entry in heap if not _stale(entry)]
        heapq.heapify(heap)
        self._compact_at = max(COMPACT_MIN, 2 * len(heap))

    def check_by(self, when: float, check: Callable[[], object]) -> bool:
        """(asyncio) Call `check()` once, by `when` (a `time.monotonic()`), on one handle with every
        other check asked for before it runs: for a deadline that what set it nearly always takes
        back long before (a write's stall: nearly every write completes at once), which `check`
        arms only if it is still needed then. A write that completes costs no entry, no wake-up
        and no loop callback of its own: one handle serves every write that starts while it is
        pending. False on trio, where nothing is called (arm it at once)."""
        loop = running_asyncio_loop()
        if loop is None:
            return False
        self._checks.add(check)
        if when < self._checks_at or loop is not self._checks_loop:
            if self._checks_handle is not None:
                self._checks_handle.cancel()
            self._checks_at = when
            self._checks_loop = loop
            self._checks_handle = loop.call_later(max(when - time.monotonic(), 0.0), self._run_checks)
        return True

    def _run_checks(self) -> None:
        checks, self._checks = self._checks, set()
        self._checks_handle = None
        self._checks_at = float("inf")
        for check in checks:
            try:
                check()
            except Exception:
                logger.exception("a stream timer failed")

    # ------------------------------------------------------------------ asyncio: one handle
    def _call_at(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._loop = loop
        self._handle_at = when
        self._handle = loop.call_later(max(when - time.monotonic(), 0.0), self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._handle_at = float("inf")
        for target, now in self._due():
            self.arm(target, self._call(target, now))
        heap = self._heap
        while heap and _stale(heap[0]):
            heapq.heappop(heap)  # no need to wake for it
        if heap and heap[0][0] < self._handle_at - SLACK_S and self._loop is not None:
            # (what the callbacks armed may be later than what was waiting already; one due
            # again at once fires on the loop's next round: what fired acts first)
            self._call_at(self._loop, heap[0][0])

    # ------------------------------------------------------------------ both
    def _due(self) -> list[tuple[Timer, float]]:
        """Pop the entries due now (stale ones are dropped): their targets, with the time."""
        now = time.monotonic()
        heap = self._heap
        due = []
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)
            if not _stale(entry):
                entry[1].armed_at = _NEVER
                due.append((entry[1], now))
        return due

    @staticmethod
    def _call(target: Timer, now: float) -> float | None:
        callback = target.callback
        if callback is None:
            return None
        try:
            return callback(now)
        except Exception:
            logger.exception("a stream timer failed")
            return None

    # ------------------------------------------------------------------ trio: a driver task
    async def _drive(self) -> None:
        try:
            heap = self._heap
            while heap:
                while heap and _stale(heap[0]):
                    heapq.heappop(heap)  # no need to wake for it
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
                for target, at in self._due():
                    self.arm(target, self._call(target, at))
                await anyio.lowlevel.checkpoint()  # what fired may be due again at once: let it act first
        finally:
            self._running = False
            self._wake = None
