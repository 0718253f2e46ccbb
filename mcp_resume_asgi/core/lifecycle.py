"""Where a hosted stream is, beside its answer's `Phase`: its record, its app's call, its stop.

A stream hosted here has three things the answer's phase (`core/stream.py`) does not say,
each a small enum its `StreamCore` holds and its host moves along:

    Record  NONE --answer opened without it: `Recorder.open_later`--------------> DUE
            DUE --its creation starts (with the app's first events, or sooner)--> OPENING
            OPENING --created--> OPEN        OPENING --the store failed--> DUE
            NONE --created before or as the answer opens (`open_record`)--------> OPEN
            DUE --could not be created, its answer passed through (`unrecorded`)--> NONE
            OPEN --the app refused the request it was opened ahead of-----------> NONE

    Run     STARTING --the app reads its request-->  RUNNING
            STARTING|RUNNING --the request and what follows it are done--> OVER

    Stop    NONE --stopped from outside: a cancel it ignored, the drain's budget--> STOPPED
            NONE|STOPPED --the drain hands it to another node to run again--> HANDED_OVER
            any --another node took this one for lost and runs it now--> FENCED
            (each only raises it: FENCED says the most, and stays)

Marks go with them: `expired` (its work is cancelled: nobody may resume it), `indexed`
(listed in the store's index of running requests, `engine/sweep.py`) and `left_early` (the
client that brought the request left before the app decided how to answer). Its `Origin` says
whether the run began here or continues the record of a run lost with its node. A mirror
(a stream whose app runs elsewhere) keeps all of them at their start.

`StreamState` is all of it at once, as one value that prints: what a log line or a test
says of a stream.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

__all__ = ["Origin", "Record", "Run", "Stop", "StreamState", "raised"]


class Record(enum.Enum):
    """Where the stream's record in the store is."""

    NONE = "none"
    """No record: not yet, none (its answer passed through), or refused and deleted."""
    DUE = "due"
    """Its answer opened without it: it is created with the app's first events, or as soon as
    something needs it (its answer's head, its client gone)."""
    OPENING = "opening"
    """Being created (with the events that made it due)."""
    OPEN = "open"
    """It exists: a client may resume from it."""


class Run(enum.Enum):
    """Where the app's call is."""

    STARTING = "starting"
    """Hosted; the app has not read its request."""
    RUNNING = "running"
    """The app read its request (its own auth let it through)."""
    OVER = "over"
    """The request, and what follows it, are done."""


class Origin(enum.Enum):
    """Where the stream's run comes from (fixed when it is hosted)."""

    LOCAL = "local"
    """A request (or a session's GET) that came to this node: its record is created here."""
    RERUN = "rerun"
    """A re-run: it continues the record of a run lost with its node (`StreamCore.continue_from`),
    taken over already, whose request is kept already."""


class Stop(enum.IntEnum):
    """Whether, and why, the app's call was stopped from outside (ordered: see `raised`)."""

    NONE = 0
    STOPPED = 1
    """Cancelled: a cancel it ignored, or the drain's budget ran out."""
    HANDED_OVER = 2
    """The drain's budget stopped it, for another node to run it again."""
    FENCED = 3
    """Another node took this one for lost and runs its request now: nothing more of this run
    is written."""


def raised(stop: Stop, to: Stop) -> Stop:
    """`stop` once `to` happens: the one that says the most (a fenced run stays fenced)."""
    return to if to > stop else stop


class StreamState(NamedTuple):
    """A hosted stream's whole state, as one value (`StreamCore.state`; its `record` is the core's `store_record`)."""

    phase: str
    record: Record
    run: Run
    stop: Stop
    expired: bool
    indexed: bool
    origin: Origin = Origin.LOCAL
    left_early: bool = False

    def __str__(self) -> str:
        """`phase record=... run=...`, and the stop, the origin and the marks that are not the
        usual (a re-run, a client that left early)."""
        out = f"{self.phase} record={self.record.value} run={self.run.value}"
        if self.stop is not Stop.NONE:
            out += f" stop={self.stop.name.lower()}"
        if self.expired:
            out += " expired"
        if self.indexed:
            out += " indexed"
        if self.origin is not Origin.LOCAL:
            out += f" {self.origin.value}"
        if self.left_early:
            out += " left_early"
        return out
