"""What a client coming back for a stream is answered, decided on the stream's record alone.

A resume names a stream and the last event its client has (`Last-Event-ID`, or
the `Link` URL's position; none: where the stream was last delivered). Before a
connection is attached the record decides whether there is anything to serve:
a position past the stream's end means the store lost events its client already
got - an event is stored before it is delivered, so the store went back (a Redis
primary failing over loses what it acknowledged but had not replicated yet), or the
client made the position up (an id's stream is signed, its seq is not; it only ends
its own resume) - told as a gap like the one below, not as the client's error (what
is recorded for a stream taken from a lost node begins far past its record's end,
`core/orphans.py`, so a position that node handed out lies before it and is served it); a
stream that is over for this client, or waits for its input (SEP-1335), has nothing to send
(204); a position before the events the store still holds is a gap, told as an
error event on a request's stream, as 410 on a standalone one (its client can
only start over). Otherwise the stream is served from there.

The same rules answer a GET with `Last-Event-ID`, a GET on the `Link` URL, and
the stream that continues after a client's answers (`http/client_answers.py`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "RUNNING",
    "STANDALONE",
    "Resume",
    "ResumeAnswer",
    "StreamRecord",
    "answer",
    "from_cursor",
    "lost_text",
    "nothing_to_send",
]

#: `StreamRecord.state` of a stream whose app has not finished (`store.base.StreamState.RUNNING`).
RUNNING = "running"
#: `StreamRecord.kind` of a session's GET stream (`store.base.StreamKind.STANDALONE`).
STANDALONE = "standalone"


class StreamRecord(Protocol):
    """What a resume reads of the stream's record (`store.base.StreamMeta` is one)."""

    @property
    def kind(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def last_seq(self) -> int: ...
    @property
    def first_seq(self) -> int: ...
    @property
    def final_seq(self) -> int | None: ...
    @property
    def delivered_seq(self) -> int: ...
    @property
    def waiting_for_input(self) -> bool: ...


class Resume(enum.Enum):
    """The answer to a resume (see the module docstring)."""

    LOST = 1
    """The position is past the stream's end: the store lost events the client got (not an HTTP
    status: one error event saying so on a request's stream; a standalone one is `GONE`)."""
    NOTHING = 204
    """Nothing to send: the stream is over for this client, or waits for its input."""
    GONE = 410
    """A standalone stream lost events after the position: its client starts over."""
    GAP = 200
    """A request's stream lost events after the position: one error event says so."""
    SERVE = 0
    """Serve the stream after the position."""


@dataclass(frozen=True, slots=True)
class ResumeAnswer:
    kind: Resume
    after_seq: int
    """The position the client is served from (the record's delivered position when it named none)."""


def nothing_to_send(record: StreamRecord, after_seq: int) -> bool:
    """SEP-1335's 204: the stream is over for this client, or it waits for the client's input."""
    if record.final_seq is not None and after_seq >= record.final_seq:
        return True
    if record.state != RUNNING and after_seq >= record.last_seq:
        return True
    return record.waiting_for_input and after_seq >= record.last_seq


def from_cursor(record: StreamRecord, after_seq: int) -> Resume:
    """Whether the events after `after_seq` can be served: `GONE` or `GAP` when the store
    dropped some of them (to stay within its limits), else `SERVE`."""
    if after_seq + 1 >= record.first_seq:
        return Resume.SERVE
    return Resume.GONE if record.kind == STANDALONE else Resume.GAP


def answer(record: StreamRecord, after_seq: int | None, *, via_link: bool) -> ResumeAnswer:
    """A client resumes after `after_seq` (None: where the stream was last delivered).

    `via_link`: it came by the stream's `Link` URL (or posted answers to it), which also
    gets 204 while the stream waits for its input; a `Last-Event-ID` resume gets 204 only
    when it has the final response (some clients, e.g. the TypeScript SDK's, resume even
    after an error response)."""
    position = record.delivered_seq if after_seq is None else after_seq
    if position > record.last_seq:
        lost = Resume.GONE if record.kind == STANDALONE else Resume.LOST
        return ResumeAnswer(lost, position)
    if via_link and nothing_to_send(record, position):
        return ResumeAnswer(Resume.NOTHING, position)
    if record.final_seq is not None and position >= record.final_seq:
        return ResumeAnswer(Resume.NOTHING, position)
    return ResumeAnswer(from_cursor(record, position), position)


def lost_text(record: StreamRecord, after_seq: int) -> str:
    """The error a client gets when the store no longer has events it was sent (`Resume.LOST`)."""
    return (
        f"cannot resume: the server's store lost events {record.last_seq + 1}..{after_seq} of this "
        "stream after they were sent (its Redis failed over before they were replicated?); "
        "what followed them is lost too"
    )
