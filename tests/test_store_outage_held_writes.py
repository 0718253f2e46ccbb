"""`HeldWrites` and `Backoff` driven directly: no event loop, no store, no clock.

What a hosted stream holds while its store cannot be reached (`held_writes.py`): its
events in order, the input requests among them, the final answer; within the
stream's limits, the oldest dropped first and the newest always kept; a batch that
failed goes back before what came since; a batch written in part is finished without
writing anything twice. The state machine at the end interleaves an app, a store that
fails (before or after taking a batch's events) and recovers, and checks what the
store ends up with against what it would hold had it never failed.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mcp_resume_asgi.core.held_writes import Backoff, HeldBudget, HeldWrites
from mcp_resume_asgi.core.stream import Recorded


def recorded(*seqs: int, size: int = 10, final: int | None = None, inputs: Any = ()) -> Recorded:
    return Recorded(
        [(seq, bytes([65 + seq % 26]) * size) for seq in seqs],
        [list(entry) for entry in inputs],
        final_seq=final,
        final_data=b'{"result":{}}' if final is not None else None,
    )


def seqs(events: Any) -> list[int]:
    return [seq for seq, _ in events]


# ----------------------------------------------------------------------------- holding
def test_events_are_held_in_order_with_their_inputs_and_the_final_answer() -> None:
    held = HeldWrites(max_events=100, max_bytes=10_000)
    assert not held.waiting
    assert held.add(recorded(1, 2, inputs=[("q1", 2)])) == 0
    assert held.add(recorded(3, 4, final=4)) == 0
    assert held.waiting
    batch = held.take()
    assert seqs(batch.events) == [1, 2, 3, 4]
    assert batch.inputs == [["q1", 2]]
    assert (batch.final_seq, batch.final_data) == (4, b'{"result":{}}')
    assert not batch.after_gap and not batch.complete
    assert not held.waiting, "taken: what the app sends next is held anew"


def test_a_stream_ended_without_an_answer_is_completed_once_written() -> None:
    held = HeldWrites(max_events=100, max_bytes=10_000)
    held.complete = True
    assert held.waiting
    batch = held.take()
    assert batch.complete and batch.final_seq is None and not held.waiting


def test_beyond_the_event_limit_the_oldest_are_dropped_and_the_final_answer_kept() -> None:
    held = HeldWrites(max_events=3, max_bytes=10_000)
    held.add(recorded(1, 2, 3))
    assert held.add(recorded(4, 5, final=5)) == 2
    assert held.dropped == 2
    batch = held.take()
    assert seqs(batch.events) == [3, 4, 5] and batch.final_seq == 5
    assert batch.after_gap


def test_beyond_the_byte_limit_the_newest_event_is_kept_whatever_its_size() -> None:
    held = HeldWrites(max_events=100, max_bytes=25)
    held.add(recorded(1, 2, size=10))
    assert held.add(recorded(3, size=40, final=3)) == 2
    batch = held.take()
    assert seqs(batch.events) == [3] and batch.final_seq == 3 and batch.after_gap


def test_input_requests_dropped_with_their_events_are_not_noted() -> None:
    held = HeldWrites(max_events=2, max_bytes=10_000)
    held.add(recorded(1, 2, 3, inputs=[("old", 1), ("kept", 3)]))
    assert held.take().inputs == [["kept", 3]]


def test_after_a_gap_the_batch_is_appended_with_limits_that_keep_only_it() -> None:
    """The store then drops everything older, and learns where the stream starts now (a client
    resuming from before it is told); without a gap the policy's limits apply."""
    held = HeldWrites(max_events=2, max_bytes=10_000)
    held.add(recorded(1, 2, 3, size=7))
    gap = held.take()
    assert gap.limits(10_000, 8 * 1024 * 1024) == (2, 14) and gap.first_seq == 2
    held.add(recorded(4, size=7))
    plain = held.take()
    assert not plain.after_gap and plain.limits(10_000, 8 * 1024 * 1024) == (10_000, 8 * 1024 * 1024)
    assert plain.first_seq is None


def test_a_batch_that_failed_goes_back_before_what_came_since() -> None:
    held = HeldWrites(max_events=100, max_bytes=10_000)
    held.add(recorded(1, 2, inputs=[("q", 1)]))
    batch = held.take()
    held.add(recorded(3, 4, final=4))
    held.put_back(batch)
    again = held.take()
    assert seqs(again.events) == [1, 2, 3, 4]
    assert again.inputs == [["q", 1]] and again.final_seq == 4


def test_a_batch_put_back_is_trimmed_with_what_came_since_and_remembers_its_gap() -> None:
    held = HeldWrites(max_events=3, max_bytes=10_000)
    held.add(recorded(1, 2, 3, 4))  # 1 dropped: a gap
    batch = held.take()
    held.add(recorded(5, 6, final=6))
    held.put_back(batch)
    again = held.take()
    assert seqs(again.events) == [4, 5, 6] and again.final_seq == 6 and again.after_gap
    held.put_back(held.take())  # an empty batch back: nothing changes
    assert not held.waiting


def test_a_batch_written_in_part_is_finished_without_writing_anything_twice() -> None:
    held = HeldWrites(max_events=100, max_bytes=10_000)
    held.add(recorded(5, 6, 7, inputs=[("a", 5), ("b", 7)]))
    batch = held.take()
    events, inputs = batch.unwritten(stored_last_seq=6, issued=["a"])
    assert seqs(events) == [7] and inputs == [["b", 7]]
    assert batch.unwritten(stored_last_seq=4, issued=[]) == (batch.events, batch.inputs)


# ----------------------------------------------------------------------------- retrying
def test_streams_share_the_engines_budget_and_each_keeps_at_least_its_newest_event() -> None:
    budget = HeldBudget(max_bytes=50)
    first = HeldWrites(max_events=100, max_bytes=10_000, budget=budget)
    second = HeldWrites(max_events=100, max_bytes=10_000, budget=budget)
    assert first.add(recorded(1, 2, 3)) == 0 and budget.used == 30
    # The second stream passes the budget: it drops its own oldest, down to what fits.
    assert second.add(recorded(1, 2, 3)) == 1 and budget.used == 50
    assert seqs(second.take().events) == [2, 3] and budget.used == 30, "a taken batch is in flight"
    # Over the budget whatever it drops, a stream keeps its newest event (the final answer).
    assert second.add(recorded(4, 5, 6, size=30, final=6)) == 2 and budget.used == 60
    batch = second.take()
    assert seqs(batch.events) == [6] and batch.final_seq == 6
    second.put_back(batch)
    assert budget.used == 60, "put back: counted again"
    second.discard()
    first.discard()
    assert budget.used == 0 and not first.waiting, "a discarded stream gives its bytes back"


def test_a_budget_must_be_positive() -> None:
    with pytest.raises(ValueError):
        HeldBudget(0)


def test_the_backoff_doubles_up_to_its_cap() -> None:
    backoff = Backoff(0.1, 2.0)
    delays = [backoff.next_delay() for _ in range(7)]
    assert delays == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0])


@pytest.mark.parametrize(("first", "cap"), [(0.0, 1.0), (-1.0, 1.0), (2.0, 1.0)])
def test_a_backoff_needs_a_positive_first_wait_within_its_cap(first: float, cap: float) -> None:
    with pytest.raises(ValueError, match="first_s"):
        Backoff(first, cap)


# ----------------------------------------------------------------------------- a store that fails
class FlakyStoreModel:
    """A stream in a store that keeps at most `max_events` events (`Store.append`'s trim)."""

    def __init__(self, max_events: int) -> None:
        self.max_events = max_events
        self.events: list[int] = []
        self.first_seq = 1
        self.final_seq: int | None = None

    @property
    def last_seq(self) -> int:
        return self.events[-1] if self.events else self.first_seq - 1

    def append(self, new: list[int], max_events: int) -> None:
        assert all(seq > self.last_seq for seq in new), "written twice or out of order"
        assert new == sorted(new)
        self.events += new
        while len(self.events) > max_events:
            self.first_seq = self.events.pop(0) + 1


class HeldWritesMachine(RuleBasedStateMachine):
    """The app records events (the last one its final answer); the store takes a batch, fails
    before taking it, or fails after taking its events but before the rest."""

    MAX_EVENTS = 5

    def __init__(self) -> None:
        super().__init__()
        self.held = HeldWrites(max_events=self.MAX_EVENTS, max_bytes=10**9)
        self.store = FlakyStoreModel(self.MAX_EVENTS)
        self.seq = 0
        self.done = False
        self.sent: list[int] = []
        self.dropped_any = False

    @precondition(lambda self: not self.done)
    @rule(count=st.integers(1, 4), final=st.booleans())
    def app_sends(self, count: int, final: bool) -> None:
        new = list(range(self.seq + 1, self.seq + count + 1))
        self.seq += count
        self.done = final
        self.sent += new
        if self.held.add(recorded(*new, final=self.seq if final else None)):
            self.dropped_any = True

    def _write(self, *, fail: str | None) -> None:
        batch = self.held.take()
        events, _ = batch.unwritten(self.store.last_seq, [])
        if fail == "before":
            self.held.put_back(batch)
            return
        max_events, _ = batch.limits(self.MAX_EVENTS, 10**9)
        if events:
            self.store.append(seqs(events), max_events)
        if batch.first_seq is not None:
            self.store.first_seq = max(self.store.first_seq, batch.first_seq)
        if fail == "after_events":
            self.held.put_back(batch)
            return
        if batch.final_seq is not None:
            self.store.final_seq = batch.final_seq

    @rule()
    def store_takes_a_batch(self) -> None:
        self._write(fail=None)

    @rule(when=st.sampled_from(["before", "after_events"]))
    def store_fails(self, when: str) -> None:
        self._write(fail=when)

    @invariant()
    def the_store_holds_the_newest_events_in_order(self) -> None:
        events = self.store.events
        assert events == sorted(set(events))
        assert len(events) <= self.MAX_EVENTS
        if events and not self.dropped_any:
            # Nothing dropped: the store holds exactly the newest events it took, none missing.
            assert events == self.sent[self.sent.index(events[0]) : self.sent.index(events[-1]) + 1]

    def teardown(self) -> None:
        self._write(fail=None)
        if self.done:
            assert self.store.final_seq == self.seq, "the final answer reaches the store"
        if self.sent:
            assert self.store.last_seq == self.seq, "everything held was written"
            events = self.store.events
            # Whatever was dropped, the store holds a contiguous run ending with the newest event,
            # and a client resuming from before it is told of the gap (first_seq).
            assert events == list(range(events[0], self.seq + 1))
            assert self.store.first_seq == events[0]


HeldWritesMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_held_writes_against_a_failing_store = pytest.mark.slow(HeldWritesMachine.TestCase)
