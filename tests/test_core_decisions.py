"""The decisions issue 21 moved into `StreamCore` from its hosts: the first connection's client
leaving, letting a connection go, a write's stall deadline, a mirror's outcomes and owner
checks, what the app's end writes, whether a request may still become a task. No event loop.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import pytest

from mcp_resume_asgi.core.answer_mode import Answer, Mode
from mcp_resume_asgi.core.ending import End, next_step
from mcp_resume_asgi.core.lifecycle import Record, Stop
from mcp_resume_asgi.core.owner_watch import OwnerWatch, OwnerWatches
from mcp_resume_asgi.core.stream import (
    STALL_S,
    Due,
    FirstGone,
    Phase,
    Reason,
    StreamCore,
    mirror_heartbeat_s,
)
from mcp_resume_asgi.policy import Policy
from mcp_resume_asgi.wire.sse import SSEParser
from tests.test_stream_core import QUIET, RID, SINGLE, VERSION, answer, attached, make, note

MODES: list[Mode | None] = [None, Mode.PASSTHROUGH, Mode.STREAM, Mode.UPGRADED]


# ---------------------------------------------------------------------- the first connection leaving


@pytest.mark.parametrize(
    ("attached", "busy", "released", "mode", "version"),
    list(itertools.product([False, True], [False, True], [False, True], MODES, [VERSION, SINGLE])),
)
def test_first_gone_is_what_the_hosts_closure_decided(
    attached: bool, busy: bool, released: bool, mode: Mode | None, version: str
) -> None:
    """As `hosted.run_app`'s disconnect listener decided before the rule moved here."""
    core = make(version=version)
    expected: list[FirstGone] = []
    if attached and not busy:
        expected.append(FirstGone.RELEASE)
    elif not released and mode is not Mode.PASSTHROUGH and version == SINGLE:
        expected.append(FirstGone.CANCEL)  # (2026-07-28: a close is a cancel)
    if mode is Mode.PASSTHROUGH:
        expected.append(FirstGone.TELL_APP)
    got = core.first_gone(attached=attached, busy=busy, released=released, mode=mode, survives_close=False)
    assert got == expected
    assert core.left_early is (mode is None)  # (noted: the answer is not decided yet)
    assert core.cancelled is (FirstGone.CANCEL in got)
    assert (core.phase is Phase.CANCELLING) is (FirstGone.CANCEL in got)


def test_first_gone_cancels_once_and_never_work_that_outlives_its_connection() -> None:
    core = make(version=SINGLE)
    kw = {"attached": False, "busy": False, "released": False, "mode": Mode.STREAM}
    assert core.first_gone(**kw, survives_close=True) == []  # a task: the resume window instead
    assert core.first_gone(**kw, survives_close=False) == [FirstGone.CANCEL]
    assert core.first_gone(**kw, survives_close=False) == []
    answered = make(version=SINGLE)
    answered.record([answer()])
    assert answered.first_gone(**kw, survives_close=False) == []


@pytest.mark.parametrize(("status", "media"), [(200, b"application/json"), (200, b"text/event-stream")])
def test_a_client_that_left_early_is_told_to_the_app_only_if_its_answer_passes_through(
    status: int, media: bytes
) -> None:
    """The first client left before the app decided how to answer: an answer that passes
    through tells the app at once (as unwrapped); a recorded one goes on for a resume."""
    core = make()
    assert core.first_gone(attached=False, busy=False, released=False, mode=None, survives_close=False) == []
    assert str(core.state()) == "new record=none run=starting left_early"
    answer_is = core.response_started(status, media, upgraded=False, held=False)
    mode = Mode.PASSTHROUGH if answer_is is Answer.PASSTHROUGH else Mode.STREAM
    assert core.tell_app_gone(mode) is (media != b"text/event-stream")
    stayed = make()
    stayed.response_started(status, media, upgraded=False, held=False)
    assert not stayed.tell_app_gone(Mode.PASSTHROUGH)  # (its client has not left)


# ---------------------------------------------------------------------- letting a connection go


def test_release_says_why_a_connection_was_let_go() -> None:
    core = make()
    att = attached(core, 1)
    assert core.release(att, 2.0, gone=False) == (Reason.ENDED, False)
    assert att.closing is Reason.ENDED and core.conn is None and core.contact_at == 2.0
    gone = attached(core, 2, now=3.0)
    assert core.release(gone, 4.0, gone=True) == (Reason.GONE, False)  # resumable: no cancel
    decided = attached(core, 3, now=5.0)
    core.close(decided, Reason.IDLE)
    assert core.release(decided, 6.0, gone=True) == (Reason.IDLE, False)  # the close decided first


def test_releasing_a_replaced_connection_detaches_nothing() -> None:
    core = make(version=SINGLE)
    first = attached(core, 1)
    second = attached(core, 2, now=1.0)
    assert core.release(first, 2.0, gone=True) == (Reason.REPLACED, False)
    assert core.conn is second and not core.cancelled


def test_a_2026_client_closing_its_stream_cancels_when_released() -> None:
    core = make(version=SINGLE)
    att = attached(core, 1)
    assert core.release(att, 1.0, gone=True) == (Reason.GONE, True)
    assert core.phase is Phase.CANCELLING and core.cancelled
    task = make(version=SINGLE)
    att = attached(task, 1)
    assert task.release(att, 1.0, gone=True, survives_close=True) == (Reason.GONE, False)


# ---------------------------------------------------------------------- a write in flight


def test_writing_returns_its_stall_deadline_and_write_ended_clears_it() -> None:
    core = make()
    att = attached(core, 1)
    core.record([note(1)])
    assert core.writing(att, 10.0) == 10.0 + STALL_S
    assert att.write_since == 10.0 and core.next_deadline() == 10.0 + STALL_S
    core.write_ended(att)
    assert att.write_since is None and core.due(20.0) == []


def test_stall_at_is_the_attached_connections_write_in_flight_only() -> None:
    core = make()
    assert core.stall_at() is None  # nothing attached
    att = attached(core, 1)
    core.record([note(1)])
    assert core.stall_at() is None  # attached, nothing being written
    core.writing(att, 10.0)
    assert core.stall_at() == 10.0 + STALL_S
    core.wrote(att, 1, 10.1)
    assert core.stall_at() is None  # written: nothing left to arm for it
    core.writing(att, 11.0)
    core.detach(att.gen, 11.0)
    assert core.stall_at() is None  # (`due` looks only at the attached connection's write too)


# ---------------------------------------------------------------------- a mirror


def test_a_mirror_heartbeats_from_its_start() -> None:
    policy = Policy(keepalive_s=None, max_wait_s=30.0)
    core = StreamCore.mirror(policy, version=VERSION, is_request=True, request_id=RID, now=100.0)
    assert core.heartbeat_s == mirror_heartbeat_s(policy) == 10.0
    attached(core, 1, now=100.0)
    assert core.next_deadline() == 110.0
    assert core.due(110.0) == [Due.HEARTBEAT]
    assert core.next_deadline() == 120.0


@pytest.mark.parametrize(("max_wait_s", "beat"), [(0.06, 0.05), (3.0, 1.0), (600.0, 10.0)])
def test_the_heartbeat_is_a_third_of_the_window_within_bounds(max_wait_s: float, beat: float) -> None:
    assert mirror_heartbeat_s(Policy(max_wait_s=max_wait_s)) == pytest.approx(beat)


def test_a_mirror_is_told_whether_its_app_still_runs() -> None:
    core = StreamCore.mirror(QUIET, version=VERSION, is_request=False)
    att = attached(core, 4, cursor=0)
    core.observe(2, None, [], running=True)
    assert not core.app_done
    core.wrote(att, 2, 1.0)
    assert core.followed(att, 4) is None
    core.observe(2, None, [], running=False)
    assert core.followed(att, 4) is Reason.ENDED
    core.observe(2, None, [])  # not said: unchanged
    assert core.app_done


def test_a_mirror_stops_when_its_record_is_gone_or_taken_over() -> None:
    core = StreamCore.mirror(QUIET, version=VERSION, is_request=True, request_id=RID)
    att = attached(core, 4, cursor=0)
    assert core.followed(att, None) is Reason.DELETED
    assert core.followed(att, 5) is Reason.REPLACED
    core.observe(1, 1, [])
    assert core.followed(att, 4) is None  # owed the answer still
    core.wrote(att, 1, 1.0)
    assert core.followed(att, 4) is Reason.COMPLETE


def test_a_mirror_checks_its_owner_every_check_s() -> None:
    watch = OwnerWatch(2.5, now=10.0)
    core = StreamCore.mirror(QUIET, version=VERSION, is_request=True, now=10.0, owner_watch=watch)
    attached(core, 1, now=10.0)
    assert core.next_deadline() == 12.5
    assert not core.owner_check_due(12.4)
    assert core.owner_check_due(12.5)
    assert not core.owner_check_due(12.6)  # once per interval
    assert core.next_deadline() == 15.0
    assert core.due(15.0) == []  # `due` does not say it: the host asks `owner_check_due`
    alone = StreamCore.mirror(QUIET, version=VERSION, is_request=True, now=10.0)
    attached(alone, 1, now=10.0)
    assert not alone.owner_check_due(1e9)  # no cluster: never


def test_connections_replacing_each_other_faster_than_check_s_still_check_the_owner() -> None:
    """Two clients resuming one stream take it over from each other every 0.1 s: each connection
    gets a mirror of its own, all on the stream's watch, so the check falls due on time."""
    watches = OwnerWatches(check_s=1.0)
    checks: list[float] = []
    now = 0.0
    for gen in range(1, 40):
        core = StreamCore.mirror(
            QUIET, version=VERSION, is_request=True, now=now, owner_watch=watches.of("s", now)
        )
        attached(core, gen, now=now)
        deadline = core.next_deadline()
        assert deadline is not None and deadline <= (checks[-1] if checks else 0.0) + 1.0
        if core.owner_check_due(now):
            checks.append(now)
        now = round(now + 0.1, 1)  # replaced by the other client's resume
    assert checks == [1.0, 2.0, 3.0]
    assert len(watches) == 1


def test_owner_watches_are_per_stream_and_bounded() -> None:
    watches = OwnerWatches(check_s=1.0, max_watched=3)
    first = watches.of("a", 0.0)
    assert watches.of("a", 0.5) is first  # a connection taking "a" over keeps its schedule
    assert watches.of("b", 0.5) is not first
    watches.of("c", 0.5)
    watches.of("a", 0.6)  # looked up last: "b" is now the oldest
    watches.of("d", 0.7)  # full: the oldest goes
    assert watches.of("a", 0.7) is first and len(watches) == 3
    assert watches.of("b", 0.8) is not None and len(watches) == 3  # "c" went, "b" is new
    # Nobody asked for a whole interval after it was due: forgotten when room is made.
    assert watches.of("e", 10.0) is not None and len(watches) == 1
    with pytest.raises(ValueError):
        OwnerWatches(check_s=0)


# ---------------------------------------------------------------------- the app's end


@dataclass
class Facts:
    """What the host knows of the app's end (`EndFacts`)."""

    parser: SSEParser | None = None
    first_waiting: bool = False
    passed_through: bool = False
    in_cluster: bool = False


def unended() -> SSEParser:
    """A parser holding the start of an event the app did not end."""
    parser = SSEParser(1 << 16)
    assert parser.feed(b"event: message\ndata: {") == []
    return parser


RERUN = Policy(keepalive_s=None, max_wait_s=1000.0, rerun_on_loss=True)


def steps(core: StreamCore, mode: Mode | None, **facts: Any) -> list[End]:
    """Every step `next_step` asks for, each taken as the host takes it (on the core only: a recorded
    error is the request's answer, an unindexed stream is no longer indexed)."""
    done: list[End] = []
    while (step := next_step(core, done, mode, Facts(**facts))) is not None:
        assert step not in done
        done.append(step)
        if step is End.RECORD_ERROR:
            core.record([answer()])
        elif step is End.UNINDEX:
            core.indexed = False
    return done


def recorded(mode: Mode = Mode.STREAM, **kw: Any) -> StreamCore:
    core = make(**kw)
    core.store_record = Record.OPEN
    core.record([note(1)])
    return core


@pytest.mark.parametrize("mode", [Mode.STREAM, Mode.UPGRADED])
def test_a_recorded_request_without_its_answer_ends_with_an_error(mode: Mode) -> None:
    if mode is Mode.UPGRADED:
        core = recorded(mode)
        assert next_step(core, [], mode, Facts()) is End.RECORD_JSON  # (its JSON answer first)
        assert next_step(core, [End.RECORD_JSON], mode, Facts()) is End.RECORD_ERROR  # (none recorded)
    assert steps(recorded(mode), mode) == ([End.RECORD_JSON] if mode is Mode.UPGRADED else []) + [
        End.RECORD_ERROR
    ]
    expired = recorded(mode)
    expired.expired = True
    assert steps(expired, mode) == ([End.RECORD_JSON] if mode is Mode.UPGRADED else []) + [End.DELETE]


def test_a_request_whose_answer_is_recorded_has_nothing_left_to_write() -> None:
    core = recorded()
    core.record([answer()])
    assert steps(core, Mode.STREAM, in_cluster=True) == []
    kept = recorded(policy=RERUN)  # (its request may be kept to be run again: forgotten now)
    kept.record([answer()])
    assert steps(kept, Mode.STREAM) == []  # (not in a cluster: nothing kept)
    assert steps(kept, Mode.STREAM, in_cluster=True) == [End.FORGET_RERUN]
    core.indexed = True
    assert steps(core, Mode.STREAM) == [End.UNINDEX]


def test_an_error_that_could_not_be_recorded_leaves_the_stream_completed() -> None:
    core = recorded()
    assert next_step(core, [End.RECORD_ERROR], Mode.STREAM, Facts()) is End.COMPLETE


def test_the_last_unended_event_is_recorded_first() -> None:
    assert steps(recorded(), Mode.STREAM, parser=unended()) == [End.RECORD_TAIL, End.RECORD_ERROR]
    assert steps(recorded(), Mode.STREAM, parser=SSEParser(1 << 16)) == [End.RECORD_ERROR]  # (nothing held)
    due = make()
    due.store_record = Record.DUE  # (created with those events)
    assert next_step(due, [], Mode.STREAM, Facts(parser=unended())) is End.RECORD_TAIL


def test_a_standalone_stream_is_completed_when_its_app_ends() -> None:
    core = make(is_request=False)
    core.store_record = Record.OPEN
    assert steps(core, Mode.STREAM) == [End.COMPLETE]
    core.expired = True
    assert steps(core, Mode.STREAM) == [End.DELETE]


def test_a_fenced_run_writes_nothing_of_its_end() -> None:
    core = recorded(Mode.UPGRADED, policy=RERUN)
    core.indexed = True
    core.stop = Stop.FENCED
    for mode in MODES:
        facts = {"parser": unended(), "first_waiting": True, "passed_through": True, "in_cluster": True}
        assert steps(core, mode, **facts) == []


def test_a_run_fenced_while_its_end_is_written_stops_writing_it() -> None:
    """The error's write found the record owned by another node (`HostedStream.fenced_by`):
    nothing more of this run's end is written - no completion, no forgetting, no unindexing."""
    core = recorded(policy=RERUN)
    core.indexed = True
    assert next_step(core, [], Mode.STREAM, Facts(in_cluster=True)) is End.RECORD_ERROR
    core.stop = Stop.FENCED
    assert next_step(core, [End.RECORD_ERROR], Mode.STREAM, Facts(in_cluster=True)) is None


def test_a_request_handed_over_leaves_its_record_running_and_indexed() -> None:
    core = recorded(Mode.UPGRADED, policy=RERUN)
    core.indexed = True
    core.stop = Stop.HANDED_OVER
    assert steps(core, Mode.UPGRADED, in_cluster=True) == [End.HAND_OVER]
    core.record([answer()])  # answered before it stopped: it ends as any answered request
    assert steps(core, Mode.UPGRADED, in_cluster=True) == [End.FORGET_RERUN, End.UNINDEX]


def test_an_app_that_failed_before_answering_leaves_its_client_a_500() -> None:
    core = make()
    assert steps(core, None, first_waiting=True) == [End.ANSWER_500]
    assert steps(core, None, first_waiting=False) == []
    for mode in (Mode.PASSTHROUGH, Mode.STREAM):  # an answer started, or no record
        assert steps(core, mode, first_waiting=True) == []


def test_an_answer_passed_through_for_want_of_its_record_is_ended() -> None:
    core = make()
    assert steps(core, Mode.PASSTHROUGH, passed_through=True) == [End.END_PASSED]
    assert steps(core, None, passed_through=True) == []  # (no answer started)


# ---------------------------------------------------------------------- becoming a task


def test_a_request_may_become_a_task_while_its_deadline_is_ahead_and_its_work_goes_on() -> None:
    core = make(version=SINGLE, opted_in=True)
    assert not core.may_become_task()  # no deadline: never
    core.answer_within(1.0)
    assert core.may_become_task()
    core.record([answer()])
    assert not core.may_become_task()  # answered
    cancelled = make(version=SINGLE)
    cancelled.answer_within(1.0)
    assert cancelled.left(Reason.GONE)
    assert not cancelled.may_become_task()
