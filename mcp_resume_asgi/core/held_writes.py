"""What a hosted stream could not write while its store was down, kept to be written later.

The app's events get their seqs (`StreamCore.record`) before they are stored; when
the store fails (`Store.is_unavailable_error`) those events, the input requests
among them and the request's final answer are kept here, in order, and written
once the store answers again (`store_recovery.py`): a task whose tool returned
during an outage ends `completed` with its result, and a client resuming a plain
stream gets the answer, instead of a stream that stays `running` until its TTL.

Kept within the stream's own limits (`Policy.max_events_per_stream`,
`max_bytes_per_stream`): beyond them the oldest kept events are dropped, as the
store would have dropped them had it taken them all. The newest event - the
final answer, when there is one - is always kept. A stream that lost events that
way is written with limits that make the store drop everything before what was
kept, and its `first_seq` set to the first event kept, so a client resuming from
before them is told of the gap (`GapError`) instead of silently missing events in
the middle.

All the streams of one engine also share one budget (`HeldBudget`, the engine's
`StoreRecovery.budget`): a long outage with many busy streams cannot hold more than
it in memory. A stream that would pass it drops its own oldest held events - the
same gap as above - down to its newest one, so what is kept over the budget is at
most one event (the final answer) per stream.

No I/O and no clock: the rules are tested without an event loop.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mcp_resume_asgi.core.stream import Recorded

#: What one engine holds at most, over all its streams, while the store is down.
MAX_HELD_BYTES = 64 * 1024 * 1024


class HeldBudget:
    """The bytes held over all the streams of one engine (see the module docstring)."""

    __slots__ = ("max_bytes", "used")

    def __init__(self, max_bytes: int = MAX_HELD_BYTES) -> None:
        if max_bytes <= 0:
            raise ValueError("HeldBudget needs max_bytes > 0")
        self.max_bytes = max_bytes
        self.used = 0

    @property
    def over(self) -> bool:
        return self.used > self.max_bytes


@dataclass(slots=True)
class Batch:
    """Everything held at one moment, to be written as one: events, then what they imply."""

    events: list[tuple[int, bytes]] = field(default_factory=list)
    inputs: list[list[Any]] = field(default_factory=list)
    """`[message id, seq]` of the server-to-client requests among the events."""
    final_seq: int | None = None
    final_data: bytes | None = None
    complete: bool = False
    """The app ended a stream without a final answer: mark it completed once written."""
    after_gap: bool = False
    """Events before `events` were dropped: the store must keep nothing older than them."""

    def unwritten(
        self, stored_last_seq: int, issued: Sequence[Any]
    ) -> tuple[list[tuple[int, bytes]], list[list[Any]]]:
        """The events the store does not hold yet (a batch written in part before the store failed
        again holds its first ones) and the input requests it has not noted yet (by id)."""
        events = [event for event in self.events if event[0] > stored_last_seq]
        inputs = [entry for entry in self.inputs if entry[0] not in issued]
        return events, inputs

    def limits(self, max_events: int, max_bytes: int) -> tuple[int, int]:
        """The stream limits to append with: the policy's, or after a gap exactly this batch's
        events, so that the store drops everything before them."""
        if not self.after_gap or not self.events:
            return max_events, max_bytes
        return len(self.events), sum(len(payload) for _, payload in self.events)

    @property
    def first_seq(self) -> int | None:
        """After a gap, the stream's `first_seq` once the batch is written: the store dropped what
        it held before (`limits`) but has never seen the events dropped here, so it is told where
        its events start (a client resuming from before then gets `GapError`). None: no gap."""
        return self.events[0][0] if self.after_gap and self.events else None


class HeldWrites:
    """One stream's writes waiting for the store (see the module docstring)."""

    __slots__ = (
        "budget",
        "complete",
        "dropped",
        "events",
        "final_data",
        "final_seq",
        "gap",
        "inputs",
        "max_bytes",
        "max_events",
        "nbytes",
    )

    def __init__(self, max_events: int, max_bytes: int, budget: HeldBudget | None = None) -> None:
        self.max_events = max(1, max_events)
        self.max_bytes = max_bytes
        self.budget = budget if budget is not None else HeldBudget(max(1, max_bytes) * 2)
        """Shared by the engine's streams; alone (tests), one that never binds before `max_bytes`."""
        self.events: deque[tuple[int, bytes]] = deque()
        self.nbytes = 0
        self.inputs: list[list[Any]] = []
        self.final_seq: int | None = None
        self.final_data: bytes | None = None
        self.complete = False
        self.gap = False
        """Events were dropped since the last batch was taken."""
        self.dropped = 0
        """Events dropped in all, while held (to say so once)."""

    @property
    def waiting(self) -> bool:
        return bool(self.events) or bool(self.inputs) or self.final_seq is not None or self.complete

    def add(self, recorded: Recorded) -> int:
        """Hold what `StreamCore.record` made of the app's frames; returns how many of the oldest
        events held were dropped to stay within the stream's limits."""
        for event in recorded.batch:
            self.events.append(event)
            self._count(len(event[1]))
        self.inputs += recorded.inputs
        if recorded.final_seq is not None:
            self.final_seq, self.final_data = recorded.final_seq, recorded.final_data
        return self._trim()

    def _trim(self) -> int:
        events = self.events
        dropped = 0
        budget = self.budget
        while len(events) > 1 and (
            len(events) > self.max_events or self.nbytes > self.max_bytes or budget.over
        ):
            _, payload = events.popleft()
            self._count(-len(payload))
            dropped += 1
        if dropped:
            self.gap = True
            self.dropped += dropped
            first = events[0][0]
            self.inputs = [entry for entry in self.inputs if entry[1] >= first]
        return dropped

    def take(self) -> Batch:
        """Everything held now, as one batch to write; what the app sends meanwhile is held anew."""
        batch = Batch(
            list(self.events), self.inputs, self.final_seq, self.final_data, self.complete, self.gap
        )
        self.events = deque()
        self._count(-self.nbytes)  # in flight now: counted again if it is put back
        self.inputs = []
        self.final_seq = self.final_data = None
        self.complete = self.gap = False
        return batch

    def put_back(self, batch: Batch) -> None:
        """Writing `batch` failed (the store is down again): hold it again, before what came since."""
        self.events.extendleft(reversed(batch.events))
        self._count(sum(len(payload) for _, payload in batch.events))
        self.inputs = batch.inputs + self.inputs
        if self.final_seq is None:
            self.final_seq, self.final_data = batch.final_seq, batch.final_data
        self.complete = self.complete or batch.complete
        self.gap = self.gap or batch.after_gap
        self._trim()

    def discard(self) -> None:
        """Give up what is held (the stream is gone): its bytes leave the engine's budget."""
        self.events.clear()
        self._count(-self.nbytes)
        self.inputs = []
        self.final_seq = self.final_data = None

    def _count(self, nbytes: int) -> None:
        self.nbytes += nbytes
        self.budget.used += nbytes


class Backoff:
    """How long to wait before trying the store again: `first_s`, doubling up to `cap_s`."""

    __slots__ = ("cap_s", "delay_s", "first_s")

    def __init__(self, first_s: float, cap_s: float) -> None:
        if not 0 < first_s <= cap_s:
            raise ValueError("Backoff needs 0 < first_s <= cap_s")
        self.first_s = first_s
        self.cap_s = cap_s
        self.delay_s = first_s

    def next_delay(self) -> float:
        delay = self.delay_s
        self.delay_s = min(self.cap_s, delay * 2)
        return delay
