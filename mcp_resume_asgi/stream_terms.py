"""What a stream's core and its hosts say to each other: why a connection stops being served,
what is due now, what the app's frames became, where the attached connection is.

Plain values, no behaviour of their own beyond the protocol revision's two rules
(`close_cancels`, `primed`); the decisions are `stream_core.StreamCore`'s.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from mcp_resume_asgi import protocol as p


class Reason(enum.StrEnum):
    """Why a connection stopped being served."""

    COMPLETE = "complete"
    """It has the final response."""
    ENDED = "ended"
    """The stream ended (the app finished) and it has everything."""
    GONE = "gone"
    REPLACED = "replaced"
    """A newer connection (a resume) took the stream over."""
    MAX_CONNECTION = "max_connection"
    IDLE = "idle"
    INPUT = "input"
    """SEP-1335: the server waits for the client's answer by disconnecting."""
    DEADLINE = "deadline"
    """The feature layer's deadline (the resume-token layer's interim result)."""
    GAP = "gap"
    DELETED = "deleted"
    OWNER_DEAD = "owner_dead"


#: Closes made on purpose: the client is told (`retry:`) when to come back.
AT_WILL = frozenset({Reason.MAX_CONNECTION, Reason.IDLE, Reason.INPUT, Reason.REPLACED})


def close_cancels(version: str, opted_in: bool) -> bool:
    """Whether the client closing a stream of this revision cancels its request: 2026-07-28
    removed resumable streams (no event ids, no priming, no at-will close, no resume window),
    but a client that declares `protocol.RESUMABLE_STREAMS_EXTENSION` keeps 2025-11-25's."""
    return p.at_least(version, p.SINGLE_EXCHANGE_VERSION) and not opted_in


def primed(version: str, opted_in: bool) -> bool:
    """Whether a stream of this revision is primed and may be closed at will (SEP-1699)."""
    return p.at_least(version, p.RESUMABLE_VERSION) and not close_cancels(version, opted_in)


class Due(enum.Enum):
    """What `StreamCore.due` asks the host to do now."""

    HEAD = 1
    """Send the held headers and priming event of the attached connection."""
    KEEPALIVE = 2
    CLOSE = 3
    """Close the attached connection (its `closing` says why)."""
    STALLED = 4
    """The write in flight is stuck: stop waiting for it, hand the connection over."""
    CHECK_EXPIRY = 5
    """Nobody has been in contact for the resume window: the host checks the store
    (another node may serve a client) and then calls `contact` or expires the stream."""
    DECIDE = 6
    """The app has not answered in time: open the client's answer without it."""
    HEARTBEAT = 7
    """A mirror: tell the store a client is still in contact."""


@dataclass(slots=True)
class Recorded:
    """What `StreamCore.record` made of the app's frames."""

    batch: list[tuple[int, bytes]]
    """`(seq, frame without id)` to store and deliver."""
    inputs: list[list[Any]]
    """`[message id, seq]` of server-to-client requests."""
    final_seq: int | None = None
    final_data: bytes | None = None


class Attachment:
    """The connection attached to a stream now: where it is and its timers."""

    __slots__ = (
        "at_will",
        "attached_at",
        "closing",
        "cursor",
        "deadline",
        "gen",
        "head_due",
        "last_event_at",
        "last_write_at",
        "start_cursor",
        "write_since",
    )

    def __init__(
        self,
        gen: int,
        cursor: int,
        now: float,
        *,
        at_will: bool,
        deadline: float | None,
        head_due: float | None,
    ) -> None:
        self.gen = gen
        self.cursor = cursor
        """The seq of the last event written to it."""
        self.start_cursor = cursor
        self.attached_at = self.last_event_at = self.last_write_at = now
        self.at_will = at_will
        self.deadline = deadline
        self.head_due = head_due
        """When its held head must go out on its own (None: sent, or nothing held)."""
        self.write_since: float | None = None
        self.closing: Reason | None = None
        """Set once a close is decided; the writer closes it when its write in flight ends."""
