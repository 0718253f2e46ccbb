"""The end of a stream nobody came back for, decided on plain data.

The core says when a hosted stream's resume window has passed by what its node
knows (`Due.CHECK_EXPIRY`); a client may be attached on another node, so the
store's record has the last word (`verdict`). Cancelling follows the request's
protocol revision (`cancel_plan`): a 2025 request in a session is sent
`notifications/cancelled`, as its client would have; then (and first, for a
2026-07-28 request, whose closed stream is its cancel) its app's `receive`
reports `http.disconnect`; an app that ignores both for `CANCEL_GRACE_S` each
has its call cancelled. A stream nobody may resume is freed once it is over
(`forgets`). The I/O of all this is `engine/cancellation.py`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from mcp_resume_asgi.wire import jsonrpc as p

__all__ = [
    "CANCEL_GRACE_S",
    "ContactRecord",
    "Step",
    "Verdict",
    "VerdictKind",
    "cancel_plan",
    "forgets",
    "verdict",
]

#: Grace given to an app to wind a cancelled request down before the next, harder step.
CANCEL_GRACE_S = 5.0
#: `ContactRecord.state` of a stream whose app has not finished (`store.base.StreamState`).
RUNNING = "running"


class ContactRecord(Protocol):
    """What the expiry check reads of the stream's record (`store.base.StreamMeta` is one)."""

    @property
    def state(self) -> str: ...
    @property
    def attached(self) -> bool: ...
    @property
    def last_contact(self) -> float: ...


class VerdictKind(enum.Enum):
    EXPIRE = 1
    """Nobody is in contact: cancel the app's work and free the stream."""
    CONTACT = 2
    """A client is (or was, within the window) in contact elsewhere: the window counts from `seen`."""
    CANCEL_DELETED = 3
    """The record is gone (the stream was deleted): cancel the app's work."""
    NONE = 4
    """The answer is complete: the app winds down on its own."""


@dataclass(frozen=True, slots=True)
class Verdict:
    kind: VerdictKind
    seen: float | None = None
    """`CONTACT`: the last contact, on the host's monotonic clock."""


def verdict(
    record: ContactRecord | None,
    *,
    record_open: bool,
    max_wait_s: float,
    now_wall: float,
    now_mono: float,
) -> Verdict:
    """The store's word once the core's resume window passed. `record`: the stream's record as
    read now (None: none, or none was read because `record_open` is False: nothing was ever
    recorded); the store's contact times are wall-clock, the core's monotonic."""
    if record_open and record is None:
        return Verdict(VerdictKind.CANCEL_DELETED)
    if record is not None and record.state != RUNNING:
        return Verdict(VerdictKind.NONE)
    if record is not None and (record.attached or record.last_contact + max_wait_s > now_wall):
        seen = now_mono if record.attached else now_mono - (now_wall - record.last_contact)
        return Verdict(VerdictKind.CONTACT, seen)
    return Verdict(VerdictKind.EXPIRE)


class Step(enum.Enum):
    """One step of cancelling an app's work (`cancel_plan`)."""

    NOTIFY = 1
    """Send the app `notifications/cancelled` for the request, on its session."""
    WAIT = 2
    """Give the app `CANCEL_GRACE_S` to finish."""
    DISCONNECT = 3
    """Report `http.disconnect` on the app's `receive`."""
    HARD = 4
    """Cancel the app's call, if it has not finished."""


def cancel_plan(*, is_request: bool, in_session: bool, version: str) -> tuple[Step, ...]:
    """How the app's work on a stream is stopped: the way its protocol revision expects."""
    steps = (Step.DISCONNECT, Step.WAIT, Step.HARD)
    if is_request and in_session and not p.at_least(version, p.SINGLE_EXCHANGE_VERSION):
        return (Step.NOTIFY, Step.WAIT, *steps)
    return steps


def forgets(*, close_cancels: bool, record_open: bool, expired: bool, survives_close: bool) -> bool:
    """Whether a stream's record is freed as soon as its request is over: one nobody may resume
    (a close is its cancel: 2026-07-28), unless its work outlives its connection (a task needs
    it) or it was expired (deleted then)."""
    return close_cancels and record_open and not expired and not survives_close
