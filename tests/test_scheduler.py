"""The engine's one clock (`engine/scheduler.py`), on asyncio (one `call_later` handle) and trio
(a driver task): timers fire in deadline order, an earlier deadline moves the wake-up, a
cancelled timer never fires, a callback's next deadline is honoured, and nothing is left
behind once the heap is empty. Deadlines are a few milliseconds off, so only order and
outcome are asserted, never durations."""

from __future__ import annotations

import time

import anyio
import anyio.lowlevel
import pytest

from mcp_resume_asgi.engine.scheduler import COMPACT_MIN, Scheduler, Timer
from tests.support.timing import scaled

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    backend: str = request.param
    return backend


class Recorder:
    """Timers that note their name when they fire, and a way to wait for a number of firings."""

    def __init__(self) -> None:
        self.fired: list[str] = []
        self.changed = anyio.Event()

    def timer(self, name: str, again: list[float] | None = None) -> Timer:
        def callback(now: float) -> float | None:
            self.fired.append(name)
            self.changed.set()
            return again.pop(0) if again else None

        return Timer(callback)

    async def wait_for(self, count: int) -> None:
        with anyio.fail_after(scaled(5)):
            while len(self.fired) < count:
                self.changed = anyio.Event()
                await self.changed.wait()


async def test_timers_fire_in_deadline_order_and_an_earlier_one_moves_the_wake_up() -> None:
    scheduler, seen = Scheduler(), Recorder()
    now = time.monotonic()
    scheduler.arm(seen.timer("late"), now + 0.06)
    scheduler.arm(seen.timer("middle"), now + 0.04)
    scheduler.arm(seen.timer("early"), now + 0.01)  # armed last, due first
    await seen.wait_for(3)
    assert seen.fired == ["early", "middle", "late"]


async def test_a_cancelled_timer_never_fires() -> None:
    scheduler, seen = Scheduler(), Recorder()
    now = time.monotonic()
    dropped = seen.timer("dropped")
    scheduler.arm(dropped, now + 0.01)
    scheduler.arm(seen.timer("kept"), now + 0.03)
    dropped.cancel()
    await seen.wait_for(1)
    await anyio.sleep(0.02)
    assert seen.fired == ["kept"]


async def test_a_callback_re_arms_for_its_next_deadline_and_a_later_arm_changes_nothing() -> None:
    scheduler, seen = Scheduler(), Recorder()
    now = time.monotonic()
    ticking = seen.timer("tick", again=[now + 0.02, now + 0.03])
    scheduler.arm(ticking, now + 0.01)
    scheduler.arm(ticking, now + 0.5)  # later than armed: the earlier entry stands
    await seen.wait_for(3)
    assert seen.fired == ["tick", "tick", "tick"]


async def test_a_failing_callback_is_logged_and_the_others_still_fire(
    caplog: pytest.LogCaptureFixture,
) -> None:
    scheduler, seen = Scheduler(), Recorder()

    def fail(now: float) -> float | None:
        raise RuntimeError("boom")

    now = time.monotonic()
    scheduler.arm(Timer(fail), now + 0.005)
    scheduler.arm(seen.timer("after"), now + 0.01)
    await seen.wait_for(1)
    assert seen.fired == ["after"]
    assert any("a stream timer failed" in r.getMessage() for r in caplog.records)


async def test_a_due_deadline_fires_at_once_and_the_heap_empties() -> None:
    scheduler, seen = Scheduler(), Recorder()
    scheduler.arm(seen.timer("now"), time.monotonic() - 1)
    await seen.wait_for(1)
    await anyio.sleep(0.01)
    assert seen.fired == ["now"]
    assert not scheduler._heap, "nothing is left behind"


async def test_a_far_deadline_armed_by_a_callback_does_not_hide_a_nearer_one_waiting() -> None:
    scheduler, seen = Scheduler(), Recorder()
    now = time.monotonic()
    scheduler.arm(seen.timer("first", again=[now + 3600]), now + 0.005)  # fires, then re-arms for an hour
    scheduler.arm(seen.timer("second"), now + 0.03)  # waiting meanwhile: still fires on time
    await seen.wait_for(2)
    assert seen.fired == ["first", "second"]


async def test_timers_due_at_the_same_moment_all_fire() -> None:
    scheduler, seen = Scheduler(), Recorder()
    when = time.monotonic() + 0.005
    for name in ("a", "b", "c"):
        scheduler.arm(seen.timer(name), when)  # (entries `(when, timer)` tie: ordered by the timers)
    await seen.wait_for(3)
    assert sorted(seen.fired) == ["a", "b", "c"]


async def test_arming_for_no_deadline_lets_the_targets_entries_go_without_a_call() -> None:
    scheduler, seen = Scheduler(), Recorder()
    now = time.monotonic()
    done = seen.timer("done")
    scheduler.arm(done, now + 0.01)
    scheduler.arm(done, None)  # its next deadline is none: what it armed is stale
    scheduler.arm(seen.timer("kept"), now + 0.03)
    await seen.wait_for(1)
    await anyio.sleep(0.02)
    assert seen.fired == ["kept"]
    assert not scheduler._heap, "the stale entry went too"
    scheduler.arm(done, time.monotonic() + 0.005)  # armed again later: it fires
    await seen.wait_for(2)
    assert seen.fired == ["kept", "done"]


async def test_stale_entries_far_off_are_dropped_once_they_outnumber_the_live_ones() -> None:
    """Calls that armed a far deadline for a moment (their resume window, while their answer was
    written before their app returned) leave no entry each for that long: the heap stays within
    twice its live entries (and `COMPACT_MIN`), and what is live still fires, in order."""
    scheduler, seen = Scheduler(), Recorder()
    far = time.monotonic() + 3600
    kept = [seen.timer(f"kept{i}") for i in range(3)]
    for i, timer in enumerate(kept):
        scheduler.arm(timer, far + i)
    for _ in range(10 * COMPACT_MIN):
        passing = seen.timer("passing")
        scheduler.arm(passing, far)
        passing.cancel()
        assert len(scheduler._heap) <= COMPACT_MIN + 1
    for _ in range(10 * COMPACT_MIN):
        rearmed = seen.timer("rearmed")
        scheduler.arm(rearmed, far)
        scheduler.arm(rearmed, None)  # its next deadline is none: what it armed is stale
        assert len(scheduler._heap) <= COMPACT_MIN + 1
    assert sorted(entry[1] for entry in scheduler._heap if entry[1] in kept) == sorted(kept)
    soon = time.monotonic() + 0.01
    for i, timer in enumerate(reversed(kept)):
        scheduler.arm(timer, soon + 0.005 * i)
    await seen.wait_for(3)
    assert seen.fired == ["kept2", "kept1", "kept0"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_check_by_calls_each_check_once_by_the_earliest_time_asked() -> None:
    scheduler, calls = Scheduler(), []

    def late() -> None:
        calls.append("late")

    def soon() -> None:
        calls.append("soon")

    now = time.monotonic()
    assert scheduler.check_by(now + 60, late)
    await anyio.lowlevel.checkpoint()
    await anyio.lowlevel.checkpoint()
    assert calls == []  # not before its time (a minute away)
    assert scheduler.check_by(now, soon)  # earlier: the one handle moves
    assert scheduler.check_by(now, soon)  # asked twice before it ran: called once
    with anyio.fail_after(scaled(5)):
        while len(calls) < 2:
            await anyio.sleep(0.001)
    await anyio.sleep(0.01)
    assert sorted(calls) == ["late", "soon"]  # every check asked for by then, each once
    assert scheduler.check_by(time.monotonic(), soon)  # a new one after it ran: called again
    with anyio.fail_after(scaled(5)):
        while len(calls) < 3:
            await anyio.sleep(0.001)
    assert calls[2:] == ["soon"]


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_check_by_is_refused_on_trio() -> None:
    assert not Scheduler().check_by(time.monotonic(), lambda: None)
