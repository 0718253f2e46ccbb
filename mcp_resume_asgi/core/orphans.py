"""What becomes of a stream whose record says it runs, decided on the record alone.

A stream's record names the node that runs it (`owner`). When that node is gone (its heartbeat
lapsed: killed, drained away, or this very process in an earlier life on the same store) and the
record still says the stream runs without its answer, the stream is an orphan: nobody will ever
record its end. Whoever finds one - a client following it, a task poll, the sweep - runs it
again when its route allows (`Policy.rerun_on_loss`), or ends it (`engine/orphans.py`). Here are
the decisions that need no store and no clock: whether a record may be an orphan at all (only
then is its owner's heartbeat asked), the error that ends one, and where the ids of what is
recorded for it next begin (`after_loss`).

Those ids begin far past the record's last event, `LOST_TAIL` past it, not right after it. A
node hands its client an event once its store took the event, and a store's taking is not its
keeping: `SQLiteStore` commits a write after it returned (its group commit), a Redis primary
acknowledges a write before its replicas have it. A node lost within that window may have
handed out ids past the last event its record holds, of events no store has; ids right after
that event would name them again, and a client holding one resumes after it: it skips what
was recorded under its id (the error that ends the stream, a re-run's first events, maybe its
answer), and gets no answer. An event id's seq is all a resume goes by (it is not signed, and
need not be: `wire/tokens.py`), so the ids must differ. From `last_seq + LOST_TAIL` on, they do
while the lost node handed out fewer than `LOST_TAIL` ids its store did not keep, which is far
more events than one stream records while a store lags behind what it acknowledged. Every id
it handed out then lies before what its taker records: a resume after any of them is served
that, and a resume after the taker's own last id gets nothing more. (The store needs no rule
of its own for the ids in between: events are read by seq, after a position, whatever the
seqs skip; a position past the record's last event, an id the store lost of a stream whose
taker recorded nothing yet, is told as events lost, `core/resume.py`.) A stream is taken over
once per loss of its node, so its seqs stay below 2**53, where stores that keep them as
doubles (Redis's Lua) are still exact, for some 900,000 losses. What cannot be told apart: a
client that got the lost node's own answer, which the store lost too, and resumes after it
anyway gets the taker's error after it - an answer too many, to a request it has the answer
of, where the ids right after the record's last event would leave a client that lacks the
answer without any.
"""

from __future__ import annotations

import enum
from typing import Protocol

__all__ = ["LOST_TAIL", "ORPHAN_TEXT", "Orphan", "OrphanRecord", "after_loss", "judge"]

#: The error a request's orphaned stream ends with (its clients, `tasks/get`, the REST face see it).
ORPHAN_TEXT = "the server running this request stopped before it finished"
#: How far past its record's last event the ids of a stream taken from a lost node begin (see
#: the module docstring): more ids than a node hands out of events its store does not keep.
LOST_TAIL = 10**10
#: `OrphanRecord.state` of a stream whose app has not finished (`store.base.StreamState.RUNNING`).
_RUNNING = "running"


class OrphanRecord(Protocol):
    """What the decision reads of a stream's record (`store.base.StreamMeta` is one)."""

    @property
    def state(self) -> str: ...
    @property
    def final_seq(self) -> int | None: ...
    @property
    def owner(self) -> str: ...


class Orphan(enum.Enum):
    """What a stream's record says of it, before its owner's heartbeat is asked."""

    OVER = "over"
    """Its end is recorded (answered, completed, expired): nothing is left to do for it."""
    OURS = "ours"
    """It runs on the node that asks (or names no node): not an orphan."""
    ASK = "ask"
    """It runs on another node: an orphan if that node's heartbeat lapsed."""


def judge(record: OrphanRecord | None, this_node: str) -> Orphan:
    """`OVER` for a record that is gone or has its end, `OURS` for one this node runs (or that
    names no owner), else `ASK`: whether its owner lives decides."""
    if record is None or record.state != _RUNNING or record.final_seq is not None:
        return Orphan.OVER
    if not record.owner or record.owner == this_node:
        return Orphan.OURS
    return Orphan.ASK


def after_loss(last_seq: int) -> int:
    """The seq of the first event recorded for a stream taken from a lost node (the error that
    ends it, a re-run's first event) whose record holds events up to `last_seq`: past every id
    that node can have handed out (see the module docstring)."""
    return last_seq + LOST_TAIL
