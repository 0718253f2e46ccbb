"""The life of one stream as a plain object: no I/O, no clock, no `await`.

Every decision the engine makes about a stream lives here, so it can be read in
one place and tested without an event loop (in the style of h11's `Connection`):
which id the app's next event gets, which events are owed to the connection
attached now, when that connection must be closed on purpose and why, when a
keep-alive is due, when a write has stalled, when nobody has come back for the
stream long enough that the app's work must be cancelled.

The hosts feed it what happened (`record`, `attach`, `wrote`, `detach`,
`app_finished`) with the time it happened, ask `next_deadline()` when to look
again, and at that time call `due(now)`, which answers what to do. The same
object serves a stream hosted here and, as a mirror fed from the store
(`StreamCore.mirror`, `observe`), a stream whose app runs on another node.

Where the stream is in its life is its `Phase`; the connection attached now, if
any, is its `Attachment` (orthogonal: none or one):

    NEW --answer held for the app (`hold`: upgrade_json_after_s), or its
          record opened ahead (`open_ahead`: Idempotency-Key, SEP-975...)--> HELD
    NEW|HELD --response start: a 200 SSE answer (`response_started`)--------> OPEN
    NEW|HELD --response start: anything else (not opened ahead)-------------> PASSTHROUGH
    HELD --its answer opens (DECIDE due, the app answered, a retry took
           it over, the app finished): `decided`---------------------------> OPEN
    HELD|CANCELLING --the app refused before that answer opened: `refused`--> FREED
    OPEN --the request's final response recorded (`record`)-----------------> ANSWERED
    NEW|HELD|OPEN|ANSWERED|PASSTHROUGH --`left`, `cancel_asked`, `cancel`---> CANCELLING
    any hosted phase --`app_finished` (once)--------------------------------> DONE (FREED stays)
    DONE|CANCELLING --its record is gone: `freed`---------------------------> FREED
    a mirror (`StreamCore.mirror`): MIRROR only; `record`, `app_finished` refused

A call the phase does not allow raises `IllegalTransition` (a host bug, never
the client's doing). What a phase allows is what the hosts do today: a connection
attaches to any stream that has a record (while CANCELLING or DONE too: what was
recorded is still served), a cancelled app's events are still recorded, and a
core left in NEW by a host that never says what the stream is accepts `record`,
`attach` and `observe` in any order.
"""

from __future__ import annotations

import enum
import functools
import math
from dataclasses import dataclass
from typing import Any, NoReturn

from mcp_resume_asgi.core.answer_mode import Answer, Mode, answer_mode
from mcp_resume_asgi.core.lifecycle import Origin, Record, Run, Stop, StreamState
from mcp_resume_asgi.core.owner_watch import OwnerWatch
from mcp_resume_asgi.policy import Policy
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.side_slots import SideAttribute, side_attribute

__all__ = [
    "AT_WILL",
    "HOLD_HEAD_S",
    "STALL_S",
    "Attachment",
    "Due",
    "FirstGone",
    "IllegalTransition",
    "Phase",
    "Reason",
    "Recorded",
    "StreamCore",
    "close_cancels",
    "mirror_heartbeat_s",
    "primed",
]


class Phase(enum.StrEnum):
    """Where a stream is in its life (see the module docstring)."""

    NEW = "new"
    """The app has not started its answer, and nothing was opened ahead of it."""
    HELD = "held"
    """Opened ahead of the app's answer: the client's answer waits for the app's status."""
    OPEN = "open"
    """Its SSE answer is open: the app's events are recorded and delivered."""
    PASSTHROUGH = "passthrough"
    """The app's answer is not a stream: it passes through, nothing is recorded."""
    ANSWERED = "answered"
    """The request's final response is recorded; nothing after it belongs to the stream."""
    CANCELLING = "cancelling"
    """The app's work is being cancelled (the client closed it, asked, or never came back)."""
    DONE = "done"
    """The app finished; connections may still be catching up."""
    FREED = "freed"
    """Its record is gone (refused, forgotten, expired): nothing may attach to it."""
    MIRROR = "mirror"
    """A stream whose app runs elsewhere, as the store says it is."""


class IllegalTransition(RuntimeError):
    """A host asked the core for something its phase does not allow (a bug of the host)."""

    def __init__(self, phase: Phase, event: str) -> None:
        super().__init__(f"{event} is not allowed when a stream is {phase}")
        self.phase = phase
        self.event = event


#: Phases of a hosted stream whose app's work may still be stopped.
_CANCELLABLE = frozenset({Phase.NEW, Phase.HELD, Phase.OPEN, Phase.ANSWERED, Phase.PASSTHROUGH})
#: Phases in which the app's events may be recorded (NEW: a host that never said what it is).
_RECORDING = frozenset({Phase.NEW, Phase.HELD, Phase.OPEN, Phase.ANSWERED, Phase.CANCELLING})


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
    DRAIN = "drain"
    """This node is shutting down: its client resumes elsewhere (a shared store serves it)."""
    STORE_DOWN = "store_down"
    """What it is owed is in the store, which cannot be read now: its client resumes later."""
    INPUT_REQUIRED = "input_required"
    """This node drains and its client's close would cancel the request (2026-07-28): it is
    answered `input_required` with a sealed `requestState`, and the retry that echoes it follows
    the stream, wherever it lands (`core/mrtr.py`)."""


#: Closes made on purpose: the client is told (`retry:`) when to come back.
AT_WILL = frozenset(
    {Reason.MAX_CONNECTION, Reason.IDLE, Reason.INPUT, Reason.REPLACED, Reason.DRAIN, Reason.STORE_DOWN}
)


# Both kept per (revision, opt-in): a few pairs in practice, asked several times per request.
@functools.lru_cache(maxsize=64)
def close_cancels(version: str, opted_in: bool) -> bool:
    """Whether the client closing a stream of this revision cancels its request: 2026-07-28
    removed resumable streams (no event ids, no priming, no at-will close, no resume window),
    but a client that declares `protocol.RESUMABLE_STREAMS_EXTENSION` keeps 2025-11-25's."""
    return p.at_least(version, p.SINGLE_EXCHANGE_VERSION) and not opted_in


@functools.lru_cache(maxsize=64)
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


#: A write to a connection that takes longer than this (a client that stopped reading)
#: is given up by the app's side: the connection is handed to a writer of its own.
STALL_S = 0.25
#: The first connection's headers and priming event wait this long for the app's first
#: event, so that a quick answer goes out in one write to the client and its record in the
#: same store write as its events. A head sent alone costs a write of its own to the client
#: and to the store (a SQLite commit, a Redis round trip). On a busy server, with tens of
#: requests in flight, even a quick answer takes tens of milliseconds to come through the
#: event loop: the hold covers that. A slow answer's client gets its head (the `Link` and
#: the priming event id) this late; the head carries no data.
HOLD_HEAD_S = 0.05


class FirstGone(enum.Enum):
    """What `StreamCore.first_gone` asks the host to do when the first connection's client left."""

    RELEASE = 1
    """Let its attached connection go (`release`): the resume window starts, or the close cancels."""
    CANCEL = 2
    """It left before its answer opened, and where a close is a cancel that cancels the app's work."""
    TELL_APP = 3
    """The app's answer passes through: the app is told (`http.disconnect`), as it would be unwrapped."""


def mirror_heartbeat_s(policy: Policy) -> float:
    """How often a mirror tells the store a client is in contact: thrice per resume window,
    between 50 ms and 10 s."""
    return min(max(policy.max_wait_s / 3, 0.05), 10.0)


#: Every core's `input_seqs` until its first input (never appended to: a stream that asks its
#: client nothing, nearly all of them, holds no list of its own).
_NO_INPUTS: list[int] = []
#: `Recorded.inputs` of a record that asks its client nothing (never appended to: one list for
#: all of them).
_NOTHING_ASKED: list[list[Any]] = []
#: `next_deadline`'s start: no deadline (it returns None then).
_NEVER = math.inf
#: A hosted stream's `store_record`, `run` and `stop` as it starts (one global: on Python 3.11 an
#: enum member read through its class costs a few times as much, and every request makes a core).
_LIFE_STARTS = (Record.NONE, Run.STARTING, Stop.NONE)
_LOCAL = Origin.LOCAL


class _Timing:
    """A stream's deadlines that most streams never set (the feature layer's deadline, a mirror's
    heartbeat and owner checks), apart from `StreamCore`: an idle
    detached stream lives on for its resume window, thousands at a time."""

    __slots__ = (
        "answer_at_once",
        "answer_by",
        "heartbeat_s",
        "next_beat",
        "owner_watch",
    )

    def __init__(self) -> None:
        self.answer_by: float | None = None
        """When the first connection's answer is due by the feature layer's deadline
        (`answer_within`), counted from the request's arrival."""
        self.answer_at_once = False
        self.heartbeat_s: float | None = None
        self.next_beat = 0.0
        self.owner_watch: OwnerWatch | None = None
        """A mirror: when to ask whether the stream's owner is still alive, shared with every
        connection serving the stream on this node (None: never)."""


_NO_TIMING = _Timing()
"""The defaults, shared by every core that set none of them (never written itself)."""


def _timed(name: str) -> Any:
    """A `StreamCore` attribute kept in its `_Timing` (`side_slots`)."""
    return side_attribute("_timing", _NO_TIMING, _Timing, name)


class StreamCore:
    """One stream's state and decisions (see the module docstring)."""

    __slots__ = (
        "_timing",
        "app_done",
        "cancelled",
        "close_cancels",
        "conn",
        "contact_at",
        "decide_by",
        "expired",
        "expiry_paused",
        "final_seq",
        "indexed",
        "input_seqs",
        "is_request",
        "left_early",
        "opted_in",
        "origin",
        "phase",
        "policy",
        "request_id",
        "responded",
        "resumable",
        "run",
        "seq",
        "stop",
        "store_record",
    )

    def __init__(
        self,
        policy: Policy,
        *,
        version: str,
        is_request: bool,
        request_id: Any = None,
        now: float = 0.0,
        opted_in: bool = False,
    ) -> None:
        self.policy = policy
        self.phase = Phase.NEW
        self.opted_in = opted_in
        """The client asked for a resumable stream (`protocol.RESUMABLE_STREAMS_EXTENSION`)."""
        self.origin = _LOCAL
        """A run that began here, or a re-run (`continue_from`)."""
        self.resumable = primed(version, opted_in)
        """Clients of this revision are primed and may be closed at will."""
        self.close_cancels = close_cancels(version, opted_in)
        """The client closing the stream cancels the app's work (see `close_cancels`); its
        events carry no ids and nothing of it is kept once it is over."""
        self.cancelled = False
        """`left` said the app's work is cancelled (it says so once)."""
        self.is_request = is_request
        self.request_id = request_id
        self.seq = 0
        self.final_seq: int | None = None
        self.input_seqs: list[int] = _NO_INPUTS  # (a list of its own from its first input)
        self.conn: Attachment | None = None
        self.contact_at = now
        """Last moment a client was known to be in contact (the resume window counts from it); the
        request's arrival until a client attaches (no slot of its own for that: `answer_within`)."""
        self.app_done = False
        self.responded = False
        """The app's response start was seen (`response_started`; it comes once)."""
        self.expiry_paused = False
        """Set while the host checks the store before expiring (and for good once it expires)."""
        self.decide_by: float | None = None
        # Where the stream's record in the store is, where the app's call is, and whether (and
        # why) that call was stopped from outside (`core/lifecycle.py`; `stop` moves by `raised`).
        self.store_record, self.run, self.stop = _LIFE_STARTS
        self.expired = False
        """The app's work is cancelled, or its session ended: nobody may resume the stream."""
        self.left_early = False
        """The first connection's client left before the app decided how to answer
        (`first_gone`): an answer that passes through tells the app at once (`tell_app_gone`)."""
        self.indexed = False
        """Listed in the store's index of running requests (`sweep.indexed`), from its record's
        opening without its answer until its app's end is recorded."""
        self._timing = _NO_TIMING
        """The deadlines of features and mirrors (`_Timing`), shared defaults until one is set."""

    answer_at_once: SideAttribute[bool] = _timed("answer_at_once")
    answer_by: SideAttribute[float | None] = _timed("answer_by")
    """When the first connection's answer is due by the feature layer's deadline (`answer_within`),
    counted from the request's arrival."""
    heartbeat_s: SideAttribute[float | None] = _timed("heartbeat_s")
    next_beat: SideAttribute[float] = _timed("next_beat")
    owner_watch: SideAttribute[OwnerWatch | None] = _timed("owner_watch")
    """A mirror: when to ask whether the stream's owner is still alive, shared with every
    connection serving the stream on this node (None: never)."""

    @classmethod
    def mirror(
        cls,
        policy: Policy,
        *,
        version: str,
        is_request: bool,
        request_id: Any = None,
        opted_in: bool = False,
        now: float = 0.0,
        owner_watch: OwnerWatch | None = None,
    ) -> StreamCore:
        """A stream whose app runs elsewhere (or has finished), as the store says it is: it
        heartbeats while a client is attached (`Due.HEARTBEAT`, `mirror_heartbeat_s`) and, given
        the stream's `owner_watch` on this node, says when to check that the owner is alive
        (`owner_check_due`): on the stream's schedule, which a connection taking the stream over
        from another does not restart."""
        core = cls(
            policy, version=version, is_request=is_request, request_id=request_id, now=now, opted_in=opted_in
        )
        core.phase = Phase.MIRROR
        core.heartbeat_s = mirror_heartbeat_s(policy)
        core.next_beat = now + core.heartbeat_s
        if owner_watch is not None:
            core.owner_watch = owner_watch
        return core

    def state(self) -> StreamState:
        """The stream's whole state as one value that prints (`core/lifecycle.py`)."""
        return StreamState(
            self.phase,
            self.store_record,
            self.run,
            self.stop,
            self.expired,
            self.indexed,
            self.origin,
            self.left_early,
        )

    def _refuse(self, event: str) -> NoReturn:
        raise IllegalTransition(self.phase, event)

    def continue_from(self, last_seq: int) -> None:
        """The stream continues a record another node began and lost (a re-run): the
        ids of what it records go on after `last_seq`. Only before anything is recorded."""
        if self.phase is not Phase.NEW or self.seq or last_seq < 0:
            self._refuse("continue_from")
        self.seq = last_seq
        self.origin = Origin.RERUN

    # ------------------------------------------------------------------ the app's events
    def record(self, frames: list[tuple[bytes, bytes]]) -> Recorded | None:
        """Give the app's `(frame without id, data)` pairs their seqs; None if nothing to keep.

        Frames without data (an app's own priming event) carry nothing to deliver;
        nothing after a request's final response belongs to its stream. Refused where
        nothing is recorded: a passed-through answer, a mirror, once the app is done.
        """
        if self.phase not in _RECORDING:
            self._refuse("record")
        if self.final_seq is not None:
            return None
        batch: list[tuple[int, bytes]] = []
        inputs = _NOTHING_ASKED
        final_seq: int | None = None
        final_data: bytes | None = None
        seq = self.seq
        for payload, data in frames:
            if not data:
                continue
            seq += 1
            batch.append((seq, payload))
            kind, message_id = p.classify(data)
            if kind is p.Kind.SERVER_REQUEST and p.valid_id(message_id):
                if inputs is _NOTHING_ASKED:
                    inputs = []
                inputs.append([message_id, seq])
                if self.input_seqs is _NO_INPUTS:
                    self.input_seqs = []
                self.input_seqs.append(seq)
            elif kind is p.Kind.RESPONSE and self.is_request and message_id == self.request_id:
                self.final_seq = final_seq = seq
                final_data = data
                if self.phase is Phase.OPEN:
                    self.phase = Phase.ANSWERED
                break  # (nothing after a request's answer belongs to its stream)
        if not batch:
            return None
        self.seq = seq
        return Recorded(batch, inputs, final_seq, final_data)

    def observe(
        self, last_seq: int, final_seq: int | None, input_seqs: list[int], *, running: bool | None = None
    ) -> None:
        """A mirror learns what the stream's owner has recorded (from the store), and whether its
        app still runs (`running`; None: not said)."""
        if self.phase is Phase.NEW:
            self.phase = Phase.MIRROR  # (a host that built it as a plain core)
        elif self.phase is not Phase.MIRROR:
            self._refuse("observe")
        self.seq = max(self.seq, last_seq)
        self.final_seq = final_seq
        self.input_seqs = input_seqs
        if running is not None:
            self.app_done = not running

    def app_finished(self) -> None:
        """The app's call returned (once; a mirror learns it from `observe`)."""
        if self.app_done or self.phase is Phase.MIRROR:
            self._refuse("app_finished")
        self.app_done = True
        self.decide_by = None
        if self.phase is not Phase.FREED:
            self.phase = Phase.DONE

    def freed(self) -> None:
        """The stream's record is gone (forgotten once over, or expired): nothing attaches any more."""
        if self.phase not in (Phase.DONE, Phase.CANCELLING, Phase.FREED):
            self._refuse("freed")
        self.phase = Phase.FREED

    # ------------------------------------------------------------------ the first answer
    def open_ahead(self) -> None:
        """The stream's record opens before the app answers (an Idempotency-Key, first messages,
        a feature layer's Delivery): its client's answer is held for the app's status."""
        if self.phase is not Phase.NEW:
            self._refuse("open_ahead")
        self.phase = Phase.HELD

    def answer_within(self, deadline_s: float) -> None:
        """The first connection's answer is the feature layer's deadline frame once the request
        has run `deadline_s` since it arrived (however long the app takes to start its answer);
        0: at once, whatever the app answers (a task from the start). Set when the request is
        hosted, before any client contact: `contact_at` is still its arrival."""
        if self.phase not in (Phase.NEW, Phase.HELD):
            self._refuse("answer_within")
        self.answer_by = self.contact_at + deadline_s
        self.answer_at_once = deadline_s == 0

    def hold(self, now: float, hold_s: float) -> None:
        """Hold the client's answer for the app's decision, at most `hold_s` and never past
        the answer's deadline (one due at once waits only for `request_read`)."""
        if self.phase not in (Phase.NEW, Phase.HELD):
            self._refuse("hold")
        self.phase = Phase.HELD
        until = now + hold_s
        if self.answer_by is not None and not self.answer_at_once:
            until = min(until, self.answer_by)
        self.decide_by = until

    def request_read(self, now: float) -> bool:
        """The app read the request: its own auth let it through and said who is calling, so
        an answer due at once is due now. True when that moved the next deadline."""
        if not self.answer_at_once or self.decide_by is None or self.decide_by <= now:
            return False
        self.decide_by = now
        return True

    def response_started(
        self,
        status: int,
        content_type: bytes,
        *,
        upgraded: bool,
        held: bool,
        refusal_recorded: bool = False,
    ) -> Answer:
        """The app started its answer (once): how its first connection is answered
        (`answer_mode.answer_mode`). A stream answered without it (a held answer opened when
        DECIDE fell due) keeps its phase; a refusal leaves it to `refused`, an upgrade to `decided`.
        """
        if self.responded or self.phase in (Phase.MIRROR, Phase.DONE, Phase.FREED):
            self._refuse("response_started")
        self.responded = True
        answer = answer_mode(
            status=status,
            content_type=content_type,
            upgraded=upgraded,
            held=held,
            refusal_recorded=refusal_recorded,
        )
        if answer is Answer.STREAM or answer is Answer.PASSTHROUGH:
            self.decide_by = None  # the app decided in time
            if self.phase is Phase.NEW or self.phase is Phase.HELD:
                self.phase = Phase.PASSTHROUGH if answer is Answer.PASSTHROUGH else self._open_phase()
        return answer

    def _open_phase(self) -> Phase:
        return Phase.OPEN if self.final_seq is None else Phase.ANSWERED

    def record_unavailable(self) -> None:
        """The app's SSE answer could not get a record (the store is down): it passes through."""
        if self.phase not in (Phase.OPEN, Phase.CANCELLING) or self.seq:
            self._refuse("record_unavailable")
        if self.phase is Phase.OPEN:
            self.phase = Phase.PASSTHROUGH

    def record_unavailable_after_all(self) -> None:
        """The record of a stream opened without one (created with its first events) could not
        be created (the store is down) before anything of it was stored or delivered: what its
        events were given is taken back, its connection dropped, and its answer passes through
        (as `record_unavailable`)."""
        if self.phase not in (Phase.OPEN, Phase.ANSWERED, Phase.CANCELLING):
            self._refuse("record_unavailable_after_all")
        self.seq = 0
        self.final_seq = None
        self.input_seqs = []
        self.conn = None
        if self.phase is not Phase.CANCELLING:
            self.phase = Phase.PASSTHROUGH

    def decided(self) -> bool:
        """The held answer opens now (DECIDE fell due, the app answered, or the app finished):
        True when that opened it, False when it was no longer held (opened already, refused,
        cancelled: the host still serves or lets go the connection it held)."""
        if self.phase is Phase.MIRROR:
            self._refuse("decided")
        self.decide_by = None
        if self.phase is not Phase.HELD:
            return False
        self.phase = self._open_phase()
        return True

    def refused(self) -> None:
        """The app refused a request whose stream was opened ahead of its answer, before that
        answer opened: the client gets its status, and the stream is forgotten."""
        if self.phase is not Phase.HELD and self.phase is not Phase.CANCELLING:
            self._refuse("refused")
        self.decide_by = None
        self.phase = Phase.FREED

    def first_gone(
        self, *, attached: bool, busy: bool, released: bool, mode: Mode | None, survives_close: bool
    ) -> list[FirstGone]:
        """The first connection's client left (its app's disconnect listener heard it): what
        to do. `attached`/`busy`/`released`: its connection is attached, being written,
        let go already; `mode`: what its answer became (None: not decided yet: the core notes
        `left_early`, for an answer that passes through later, `tell_app_gone`)."""
        out: list[FirstGone] = []
        if attached and not busy:
            out.append(FirstGone.RELEASE)  # the writer notes where it stopped; its close may cancel
        elif (
            not released
            and mode is not Mode.PASSTHROUGH
            and self.left(Reason.GONE, survives_close=survives_close)
        ):
            out.append(FirstGone.CANCEL)  # before its answer opened (or while it is written)
        if mode is None:
            self.left_early = True
        elif mode is Mode.PASSTHROUGH:
            out.append(FirstGone.TELL_APP)
        return out

    def tell_app_gone(self, mode: Mode) -> bool:
        """The answer became `mode`: whether the app is to be told now that its client is gone
        (`http.disconnect`, as it would be unwrapped): an answer that passes through, whose
        client left before the app decided (`left_early`). A recorded answer goes on for its
        client to resume."""
        return self.left_early and mode is Mode.PASSTHROUGH

    def may_become_task(self) -> bool:
        """The request still waits for the feature layer's deadline that makes it a task (its
        answer is not recorded and its work was not cancelled)."""
        return self.answer_by is not None and self.final_seq is None and not self.cancelled

    # ------------------------------------------------------------------ connections
    def attach(
        self,
        gen: int,
        cursor: int,
        now: float,
        *,
        at_will: bool = True,
        deadline_s: float | None = None,
        hold_head: bool = False,
        first: bool = False,
    ) -> Attachment | None:
        """A connection takes the stream over; returns the one it replaces (to be closed).

        `deadline_s` counts from now, but the `first` connection's from the request's arrival
        (`answer_within`): one due already is closed at once with the deadline frame, unless
        the final answer is recorded (it keeps its plain result) and it is not `at once`.
        Refused for a stream that has no record (passed through, or freed)."""
        if self.phase is Phase.PASSTHROUGH or self.phase is Phase.FREED:
            self._refuse("attach")
        replaced = self.conn
        if replaced is not None and replaced.closing is None:
            replaced.closing = Reason.REPLACED
        deadline = None if deadline_s is None else now + deadline_s
        if first and self.answer_by is not None:
            deadline = self.answer_by
        conn = self.conn = Attachment(
            gen,
            cursor,
            now,
            at_will=at_will and self.resumable,
            deadline=deadline,
            head_due=now + HOLD_HEAD_S if hold_head else None,
        )
        if first and self.answer_at_once:
            conn.closing = Reason.DEADLINE
        elif deadline is not None and now >= deadline:
            if self.final_seq is None:
                conn.closing = Reason.DEADLINE
            else:
                conn.deadline = None
        self.contact_at = now
        self.decide_by = None
        return replaced

    def detach(self, gen: int, now: float) -> bool:
        """The connection `gen` left or was let go; False if another had taken over."""
        if self.conn is None or self.conn.gen != gen:
            return False
        self.conn = None
        self.contact_at = now
        return True

    def release(
        self, conn: Attachment, now: float, *, gone: bool, survives_close: bool = False
    ) -> tuple[Reason, bool]:
        """The host lets `conn` go: why (the close decided for it, else `GONE` when its client
        left, else `ENDED`), and whether that cancels the app's work (`left`; only for the
        connection attached now, which this detaches)."""
        reason = conn.closing or (Reason.GONE if gone else Reason.ENDED)
        conn.closing = reason
        if self.conn is not conn:
            return reason, False
        self.detach(conn.gen, now)
        return reason, self.left(reason, survives_close=survives_close)

    def followed(self, conn: Attachment, attach_gen: int | None) -> Reason | None:
        """A mirror read the stream's record: why to stop serving `conn` now, if it must
        (`attach_gen` None: the record is gone; another generation: a newer connection took
        the stream over; else `settle`)."""
        if attach_gen is None:
            return Reason.DELETED
        if attach_gen != conn.gen:
            return Reason.REPLACED
        return self.settle(conn)

    def owner_check_due(self, now: float) -> bool:
        """A mirror: whether to ask now if the stream's owner is alive (then not again, by any
        connection serving the stream here, for the watch's `check_s`)."""
        watch = self._timing.owner_watch
        return watch is not None and watch.due(now)

    def left(self, reason: Reason, *, survives_close: bool = False) -> bool:
        """The stream's connection was let go for `reason`: True when that cancels the app's work
        (then there is no resume window). Only the client closing it (`GONE`) cancels, only
        where a close is a cancel, and only while there is work to stop. `survives_close`: the
        work outlives the connection (a task), so it gets the resume window instead."""
        if (
            not self.close_cancels
            or self.cancelled
            or survives_close
            or reason is not Reason.GONE
            or self.app_done
            or self.final_seq is not None
        ):
            return False
        self._cancelling()
        return True

    def cancel_asked(self, *, survives_close: bool = False) -> bool:
        """The client asked to cancel the request (`notifications/cancelled`: how a client whose
        close only detaches - the resumable-streams opt-in - cancels): True when that cancels the
        app's work. As for `left`, once and while there is work to stop; not for work that
        outlives its request's answer (a task: `survives_close`), which is cancelled its own way."""
        if (
            not self.is_request
            or self.cancelled
            or survives_close
            or self.app_done
            or self.final_seq is not None
        ):
            return False
        self._cancelling()
        return True

    def _cancelling(self) -> None:
        self.cancelled = self.expiry_paused = True
        if self.phase in _CANCELLABLE:
            self.phase = Phase.CANCELLING

    def cancel(self) -> bool:
        """The host cancels the app's work (nobody came back, the stream was deleted, a feature
        layer's limit): no resume window from now on. True when this started the cancelling,
        False when it is under way or over already (the host's steps are `expiry.cancel_plan`)."""
        if self.phase is Phase.MIRROR:
            self._refuse("cancel")
        self.expiry_paused = True
        if self.phase not in _CANCELLABLE:
            return False
        self.phase = Phase.CANCELLING
        return True

    def contact(self, at: float) -> None:
        """Someone (a client on another node) was in contact at `at`; expiry counts from there."""
        self.contact_at = max(self.contact_at, at)
        self.expiry_paused = False

    def owed(self, conn: Attachment) -> bool:
        """Whether `conn` should be written more events now."""
        return conn is self.conn and conn.closing is None and conn.cursor < self.seq

    def writing(self, conn: Attachment, now: float) -> float:
        """A write to `conn` starts: returns when it counts as stalled (`Due.STALLED`)."""
        conn.write_since = now
        return now + STALL_S

    def stall_at(self) -> float | None:
        """When the write in flight to the attached connection counts as stalled (`Due.STALLED`;
        None: no write in flight)."""
        conn = self.conn
        if conn is None or conn.write_since is None:
            return None
        return conn.write_since + STALL_S

    def write_ended(self, conn: Attachment) -> None:
        conn.write_since = None

    def wrote(self, conn: Attachment, cursor: int, now: float) -> Reason | None:
        """Events up to `cursor` were written to `conn`; returns why to close it, if it must be."""
        conn.cursor = cursor
        conn.last_event_at = conn.last_write_at = now
        conn.write_since = None
        if conn.closing is None:
            conn.closing = self._settled(conn)
        return conn.closing

    def _settled(self, conn: Attachment) -> Reason | None:
        if self.final_seq is not None and conn.cursor >= self.final_seq:
            return Reason.COMPLETE
        if (
            conn.at_will
            and self.input_seqs
            and self.policy.disconnect_on_input_request
            and any(conn.start_cursor < seq <= conn.cursor for seq in self.input_seqs)
        ):
            return Reason.INPUT
        return None

    def settle(self, conn: Attachment) -> Reason | None:
        """After the app finished: close a connection that has everything (`ENDED`)."""
        if conn.closing is None:
            conn.closing = self._settled(conn)
            if conn.closing is None and self.app_done and conn.cursor >= self.seq:
                conn.closing = Reason.ENDED
        return conn.closing

    def wrote_other(self, conn: Attachment, now: float) -> None:
        """A keep-alive or the held head was written."""
        conn.last_write_at = now
        conn.write_since = None

    def head_sent(self, conn: Attachment) -> None:
        conn.head_due = None

    def drain(self, conn: Attachment, *, input_required: bool = False) -> bool:
        """This node drains: close `conn` on the next event boundary, if its client may be closed
        at will (it resumes on another node, `DRAIN`), or if `input_required` (its close would
        cancel the request, which may be answered `input_required`: `core/mrtr.py`) and its
        answer is not recorded yet (`INPUT_REQUIRED`): from then on no close cancels the app's
        work, which goes on, recorded, for the retry to follow. True when it is to be closed.
        Any other client whose close cancels (2026-07-28 without the opt-in) keeps its
        connection: its request is left to finish."""
        if conn is not self.conn or conn.closing is not None:
            return False
        if conn.at_will:
            conn.closing = Reason.DRAIN
            return True
        if input_required and self.final_seq is None:
            conn.closing = Reason.INPUT_REQUIRED
            self.close_cancels = False
            return True
        return False

    def close(self, conn: Attachment, reason: Reason) -> None:
        if conn.closing is None:
            conn.closing = reason

    # ------------------------------------------------------------------ time
    def next_deadline(self) -> float | None:
        """The next moment `due` (or a mirror's `owner_check_due`) may have something to say
        (None: nothing pending)."""
        # The earliest so far, kept as it goes (no list: this runs several times per request).
        at = _NEVER
        conn = self.conn
        if conn is not None:
            if conn.write_since is not None:
                at = conn.write_since + STALL_S
            if conn.closing is None:
                policy = self.policy
                if conn.head_due is not None and conn.head_due < at:
                    at = conn.head_due
                if policy.keepalive_s is not None and conn.last_write_at + policy.keepalive_s < at:
                    at = conn.last_write_at + policy.keepalive_s
                if conn.deadline is not None and self.final_seq is None and conn.deadline < at:
                    at = conn.deadline  # (a recorded answer is never replaced)
                if conn.at_will:
                    if (
                        policy.max_connection_s is not None
                        and conn.attached_at + policy.max_connection_s < at
                    ):
                        at = conn.attached_at + policy.max_connection_s
                    if (
                        policy.idle_disconnect_s is not None
                        and conn.last_event_at + policy.idle_disconnect_s < at
                    ):
                        at = conn.last_event_at + policy.idle_disconnect_s
                timing = self._timing
                if timing.heartbeat_s is not None and timing.next_beat < at:
                    at = timing.next_beat
        elif not self.app_done and not self.expiry_paused:
            at = self.contact_at + self.policy.max_wait_s
        if self.decide_by is not None and self.decide_by < at:
            at = self.decide_by
        timing = self._timing
        if timing.owner_watch is not None and timing.owner_watch.next_check < at:
            at = timing.owner_watch.next_check  # (a mirror's: `owner_check_due`, not `due`)
        return None if at == _NEVER else at

    def due(self, now: float) -> list[Due]:
        """What to do at `now` (in this order)."""
        out: list[Due] = []
        if self.decide_by is not None and now >= self.decide_by:
            self.decide_by = None
            out.append(Due.DECIDE)
        conn = self.conn
        if conn is None:
            if (
                not self.app_done
                and not self.expiry_paused
                and now >= self.contact_at + self.policy.max_wait_s
            ):
                self.expiry_paused = True
                out.append(Due.CHECK_EXPIRY)
            return out
        if conn.write_since is not None and now >= conn.write_since + STALL_S:
            conn.write_since = None  # told once; the writer hands the connection over
            out.append(Due.STALLED)
            return out
        if conn.closing is not None:
            return out
        heartbeat_s = self._timing.heartbeat_s
        if heartbeat_s is not None and now >= self.next_beat:
            self.next_beat = now + heartbeat_s
            out.append(Due.HEARTBEAT)
        policy = self.policy
        reason = None
        if conn.deadline is not None and now >= conn.deadline and self.final_seq is None:
            reason = Reason.DEADLINE
        elif (
            conn.at_will
            and policy.max_connection_s is not None
            and now >= conn.attached_at + policy.max_connection_s
        ):
            reason = Reason.MAX_CONNECTION
        elif (
            conn.at_will
            and policy.idle_disconnect_s is not None
            and now >= conn.last_event_at + policy.idle_disconnect_s
        ):
            reason = Reason.IDLE
        if reason is not None:
            conn.closing = reason
            out.append(Due.CLOSE)
            return out
        if conn.head_due is not None and now >= conn.head_due:
            conn.head_due = None
            out.append(Due.HEAD)
        elif policy.keepalive_s is not None and now >= conn.last_write_at + policy.keepalive_s:
            conn.last_write_at = now  # due once per interval, whether or not the write succeeds
            out.append(Due.KEEPALIVE)
        return out
