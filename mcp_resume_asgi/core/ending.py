"""The end of a hosted stream's app, decided on its core: which step its host takes next.

Once the app's call is over, what is left to write depends on what the answer became, on
the stream's state (`StreamCore.state`: its record, whether it was stopped and why, expired,
indexed) and on what each step wrote: an error recorded is a request's answer, and a write
may find the run fenced. So the host asks `next_step`, takes that step, and asks again,
until it says None; each step is taken at most once. Those steps:

    a fenced run ........................ nothing (its record is another node's)
    an UPGRADED answer without its event  RECORD_JSON (the app's JSON answer, as its event)
    a recorded answer (STREAM, UPGRADED)  RECORD_TAIL (an event the app did not end), then
                                          HAND_OVER (the drain stopped it: left for another node)
                                          or RECORD_ERROR (a request without its answer), then
                                          DELETE (expired) or COMPLETE (still unanswered), then
                                          FORGET_RERUN (its kept request is answered)
    no answer started ................... ANSWER_500 (the first connection was sent nothing)
    passed through for want of a record . END_PASSED (its answer is not finished)
    any of them, last ................... UNINDEX (listed for the sweep, and not handed over)

The I/O of each step is `HostedStream._end_step`.
"""

from __future__ import annotations

import enum
from collections.abc import Container
from typing import TYPE_CHECKING, Protocol

from mcp_resume_asgi.core.answer_mode import Mode
from mcp_resume_asgi.core.lifecycle import Record, Stop

if TYPE_CHECKING:
    from mcp_resume_asgi.core.stream import StreamCore
    from mcp_resume_asgi.wire.sse import SSEParser

__all__ = ["End", "EndFacts", "next_step"]


class End(enum.Enum):
    """A step of the app's end (see the module docstring)."""

    RECORD_JSON = 1
    """An UPGRADED stream's one event: the app's JSON answer (or an error saying what it was)."""
    RECORD_TAIL = 2
    """What the app sent last without ending its event: recorded as one."""
    HAND_OVER = 3
    """The drain stopped it to be run again: its record is left owned by no live node."""
    RECORD_ERROR = 4
    """A request ended without its final response: record an error as its answer."""
    DELETE = 5
    """Expired: nobody is coming back for the stream, delete its record."""
    COMPLETE = 6
    """Mark the stream completed (a request's recorded answer did that already)."""
    FORGET_RERUN = 7
    """Its request, kept to be run again were this node lost, is answered: forget it."""
    ANSWER_500 = 8
    """The app failed before starting any answer: its client gets a 500, as unwrapped."""
    END_PASSED = 9
    """An answer passed through because its record could not open: end it."""
    UNINDEX = 10
    """Its end is recorded (or its record deleted): out of the index of running requests."""


class EndFacts(Protocol):
    """What `next_step` asks the host of the app's end (a `HostedStream`), only where a step
    depends on it."""

    @property
    def parser(self) -> SSEParser | None:
        """What parses the app's chunks that are not whole events (what it holds of the last one
        the app did not end is recorded as one)."""

    @property
    def first_waiting(self) -> bool:
        """The first connection is there and was sent nothing."""

    @property
    def passed_through(self) -> bool:
        """Its answer passes through, unfinished, for its record could not open."""

    @property
    def in_cluster(self) -> bool:
        """This node is one of a cluster: with `Policy.rerun_on_loss`, its request may be kept to
        be run again were this node lost."""


# Globals, read on every request's end: on Python 3.11 an enum member read through its class
# costs a few times as much.
_STREAM, _UPGRADED = Mode.STREAM, Mode.UPGRADED
_OPEN, _DUE = Record.OPEN, Record.DUE
_FENCED, _HANDED_OVER = Stop.FENCED, Stop.HANDED_OVER
_RECORD_JSON, _RECORD_TAIL, _HAND_OVER = End.RECORD_JSON, End.RECORD_TAIL, End.HAND_OVER
_RECORD_ERROR, _DELETE, _COMPLETE = End.RECORD_ERROR, End.DELETE, End.COMPLETE
_FORGET_RERUN, _ANSWER_500, _END_PASSED, _UNINDEX = (
    End.FORGET_RERUN,
    End.ANSWER_500,
    End.END_PASSED,
    End.UNINDEX,
)


def next_step(core: StreamCore, done: Container[End], mode: Mode | None, facts: EndFacts) -> End | None:
    """The next step of the end of `core`'s app, or None once nothing is left (see the module
    docstring). `done`: the steps taken; `mode`: what the first answer became when the end began
    (a write of its end may pass it through); `facts`: what only the host knows."""
    stop = core.stop
    handed_over = False
    if stop:  # (stopped from outside: `Stop.NONE` is the only false one)
        if stop is _FENCED:
            return None
        handed_over = stop is _HANDED_OVER and core.is_request and not core.expired and core.final_seq is None
    final_seq = core.final_seq
    if mode is _UPGRADED and not final_seq and not handed_over and _RECORD_JSON not in done:
        return _RECORD_JSON
    record = core.store_record
    if (mode is _STREAM or mode is _UPGRADED) and (
        record is _OPEN
        or record is _DUE
        # (a write of the end that could not create the due record: still this stream's end)
        or _RECORD_TAIL in done
        or _RECORD_ERROR in done
    ):
        if _RECORD_TAIL not in done:
            parser = facts.parser
            if parser is not None and parser.pending.strip():
                return _RECORD_TAIL
        if handed_over:
            if _HAND_OVER not in done:
                return _HAND_OVER
        elif core.is_request and final_seq is None and not core.expired and _RECORD_ERROR not in done:
            return _RECORD_ERROR
        if core.expired:
            if record is _OPEN and _DELETE not in done:
                return _DELETE
        elif final_seq is None and not handed_over and _COMPLETE not in done:
            return _COMPLETE
        if not handed_over and core.policy.rerun_on_loss and _FORGET_RERUN not in done and facts.in_cluster:
            return _FORGET_RERUN
    elif mode is None:
        if _ANSWER_500 not in done and facts.first_waiting:
            return _ANSWER_500
    elif _END_PASSED not in done and facts.passed_through:
        return _END_PASSED
    if core.indexed and not handed_over and _UNINDEX not in done:
        return _UNINDEX
    return None
