"""What becomes of a stream whose record says it runs, decided on the record alone.

A stream's record names the node that runs it (`owner`). When that node is gone (its heartbeat
lapsed: killed, drained away, or this very process in an earlier life on the same store) and the
record still says the stream runs without its answer, the stream is an orphan: nobody will ever
record its end. Whoever finds one - a client following it, a task poll, the sweep - runs it
again when its route allows (`Policy.rerun_on_loss`), or ends it (`engine/orphans.py`). Here are
the decisions that need no store and no clock: whether a record may be an orphan at all (only
then is its owner's heartbeat asked), and the error that ends one.
"""

from __future__ import annotations

import enum
from typing import Protocol

__all__ = ["ORPHAN_TEXT", "Orphan", "OrphanRecord", "judge"]

#: The error a request's orphaned stream ends with (its clients, `tasks/get`, the REST face see it).
ORPHAN_TEXT = "the server running this request stopped before it finished"
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
