"""`StreamCore` driven directly: no event loop, no clock, every `now` given explicitly.

The unit tests walk one stream's life (recording, attaching, writing, closing on
purpose, keep-alives, the held head, stalls, the resume window, the feature
deadline, settling, the mirror); the state machine interleaves an app, a client
that resumes (sometimes re-asking from an earlier cursor) and a host acting on
`due`, and checks that what the client keeps is every recorded event, in order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from mcp_resume_asgi.core.stream import (
    AT_WILL,
    HOLD_HEAD_S,
    STALL_S,
    Attachment,
    Due,
    Reason,
    StreamCore,
    close_cancels,
    primed,
)
from mcp_resume_asgi.policy import Policy

VERSION = "2025-11-25"
"""A revision whose clients are primed and may be closed at will."""
SINGLE = "2026-07-28"
"""A revision without resumable streams: closing one cancels its request."""
OLD_VERSION = "2025-03-26"
RID = "r1"
QUIET = Policy(keepalive_s=None, max_wait_s=1000.0)
"""No timer but the resume window (far away): each test switches on what it looks at."""


def frame(message: dict[str, Any]) -> tuple[bytes, bytes]:
    """`(frame without id, data)` as the recorder builds it."""
    data = json.dumps(message, separators=(",", ":")).encode()
    return b"event: message\ndata: " + data + b"\n\n", data


def note(i: int) -> tuple[bytes, bytes]:
    return frame({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": i}})


def ask(message_id: Any = "e1") -> tuple[bytes, bytes]:
    return frame({"jsonrpc": "2.0", "id": message_id, "method": "elicitation/create", "params": {}})


def answer(request_id: Any = RID) -> tuple[bytes, bytes]:
    return frame({"jsonrpc": "2.0", "id": request_id, "result": {}})


PRIMING = (b"id: x\ndata: \n\n", b"")
"""An app's own priming event: no data, nothing to deliver."""


def make(
    policy: Policy = QUIET,
    *,
    version: str = VERSION,
    is_request: bool = True,
    now: float = 0.0,
    opted_in: bool = False,
) -> StreamCore:
    return StreamCore(
        policy, version=version, is_request=is_request, request_id=RID, now=now, opted_in=opted_in
    )


def attached(core: StreamCore, gen: int = 1, cursor: int = 0, now: float = 0.0, **kw: Any) -> Attachment:
    """Attach connection `gen` and return its attachment."""
    core.attach(gen, cursor, now, **kw)
    att = core.conn
    assert att is not None and att.gen == gen
    return att


# ---------------------------------------------------------------------- recording


def test_record_gives_consecutive_seqs_and_skips_frames_without_data() -> None:
    core = make()
    recorded = core.record([note(1), PRIMING, note(2)])
    assert recorded is not None
    assert recorded.batch == [(1, note(1)[0]), (2, note(2)[0])]
    assert recorded.inputs == [] and recorded.final_seq is None
    recorded = core.record([note(3)])
    assert recorded is not None and recorded.batch == [(3, note(3)[0])]
    assert core.record([PRIMING]) is None
    assert core.record([]) is None
    assert core.seq == 3


def test_a_server_request_with_an_id_becomes_an_input() -> None:
    core = make()
    recorded = core.record([note(1), ask("e1"), ask(7), ask(None), ask(True)])
    assert recorded is not None
    assert [seq for seq, _ in recorded.batch] == [1, 2, 3, 4, 5]
    assert recorded.inputs == [["e1", 2], [7, 3]]  # a null or boolean id is no request id
    assert core.input_seqs == [2, 3]
    recorded = core.record([ask("e2")])
    assert recorded is not None and recorded.inputs == [["e2", 6]]
    assert core.input_seqs == [2, 3, 6]


def test_the_response_to_the_streams_request_is_final_and_ends_the_record() -> None:
    core = make()
    recorded = core.record([note(1), answer("someone-else"), answer(RID), note(2), ask()])
    assert recorded is not None
    assert [seq for seq, _ in recorded.batch] == [1, 2, 3]
    assert recorded.final_seq == core.final_seq == 3
    assert recorded.final_data == answer(RID)[1]
    assert recorded.inputs == []
    assert core.record([note(3), answer(RID)]) is None
    assert core.seq == 3 and core.final_seq == 3 and core.input_seqs == []


def test_a_standalone_stream_has_no_final_response() -> None:
    core = make(is_request=False)
    recorded = core.record([answer(RID), note(1)])
    assert recorded is not None and recorded.final_seq is None
    assert core.final_seq is None and core.seq == 2


# ---------------------------------------------------------------------- connections


def test_attach_and_detach_follow_generations() -> None:
    core = make()
    assert core.attach(1, 0, 1.0) is None
    first = core.conn
    assert first is not None and first.gen == 1 and first.closing is None
    replaced = core.attach(2, 0, 2.0)
    second = core.conn
    assert replaced is first and second is not None and second.gen == 2
    assert first.closing is Reason.REPLACED and second.closing is None
    assert core.detach(1, 3.0) is False  # the old connection leaving lets nothing go
    assert core.conn is second
    assert core.contact_at == 2.0
    assert core.detach(2, 4.0) is True
    assert core.conn is None and core.contact_at == 4.0
    assert core.detach(2, 5.0) is False
    assert core.contact_at == 4.0


def test_a_replaced_connection_keeps_the_reason_it_was_already_closing_for() -> None:
    core = make()
    core.record([answer()])
    first = attached(core, 1)
    assert core.wrote(first, 1, 1.0) is Reason.COMPLETE
    core.attach(2, 0, 2.0)
    assert first.closing is Reason.COMPLETE


def test_owed_is_for_the_attached_open_connection_behind_the_record() -> None:
    core = make()
    att = attached(core, 1)
    assert not core.owed(att)
    core.record([note(1), note(2)])
    assert core.owed(att)
    core.wrote(att, 2, 1.0)
    assert not core.owed(att)
    core.record([note(3)])
    assert core.owed(att)
    core.attach(2, 2, 2.0)
    assert not core.owed(att)  # replaced
    new = core.conn
    assert new is not None and core.owed(new)


def test_nothing_is_owed_once_a_close_is_decided() -> None:
    core = make(Policy(keepalive_s=None, idle_disconnect_s=1.0))
    att = attached(core, 1, now=0.0)
    core.record([note(1)])
    assert core.owed(att)
    assert core.due(1.0) == [Due.CLOSE]
    assert core.conn is att and not core.owed(att)
    core.record([note(2)])
    assert not core.owed(att)


def test_writing_up_to_the_final_response_completes() -> None:
    core = make()
    core.record([note(1), note(2), answer()])
    att = attached(core, 1)
    assert core.owed(att)
    assert core.wrote(att, 2, 1.0) is None
    assert att.cursor == 2 and att.closing is None and core.owed(att)
    assert core.wrote(att, 3, 2.0) is Reason.COMPLETE
    assert att.closing is Reason.COMPLETE and not core.owed(att)


@pytest.mark.parametrize(
    ("version", "at_will", "disconnect", "expected"),
    [
        (VERSION, True, True, Reason.INPUT),
        (OLD_VERSION, True, True, None),
        (VERSION, False, True, None),
        (VERSION, True, False, None),
    ],
)
def test_writing_a_server_request_closes_for_input_only_when_at_will(
    version: str, at_will: bool, disconnect: bool, expected: Reason | None
) -> None:
    core = make(Policy(keepalive_s=None, disconnect_on_input_request=disconnect), version=version)
    core.record([note(1), ask(), note(2)])
    att = attached(core, 1, at_will=at_will)
    assert att.at_will is (at_will and version == VERSION)
    assert core.wrote(att, 1, 1.0) is None
    assert core.wrote(att, 3, 2.0) is expected
    assert att.closing is expected


def test_a_resume_after_the_input_is_not_closed_for_it_again() -> None:
    core = make()
    core.record([note(1), ask(), note(2)])
    first = attached(core, 1)
    assert core.wrote(first, 2, 1.0) is Reason.INPUT
    core.detach(1, 1.0)
    second = attached(core, 2, cursor=2, now=2.0)
    assert core.wrote(second, 3, 3.0) is None
    again = attached(core, 3, cursor=1, now=4.0)  # re-asks from before the input
    assert core.wrote(again, 3, 5.0) is Reason.INPUT


# ---------------------------------------------------------------------- timers


def test_max_connection_closes_at_its_time_and_not_before() -> None:
    core = make(Policy(keepalive_s=None, max_connection_s=10.0))
    att = attached(core, 1, now=5.0)
    core.record([note(1)])
    core.wrote(att, 1, 12.0)  # events do not move it
    assert core.next_deadline() == 15.0
    assert core.due(14.999) == []
    assert core.due(15.0) == [Due.CLOSE]
    assert att.closing is Reason.MAX_CONNECTION and att.closing in AT_WILL
    assert core.due(30.0) == []
    assert core.next_deadline() is None


def test_max_connection_and_idle_spare_clients_that_cannot_resume() -> None:
    policy = Policy(keepalive_s=None, max_connection_s=1.0, idle_disconnect_s=1.0)
    for core, at_will in ((make(policy, version=OLD_VERSION), True), (make(policy), False)):
        att = attached(core, 1, at_will=at_will)
        assert core.next_deadline() is None
        assert core.due(100.0) == [] and att.closing is None


def test_idle_closes_after_no_event_for_its_time() -> None:
    core = make(Policy(keepalive_s=None, idle_disconnect_s=3.0))
    att = attached(core, 1, now=0.0)
    assert core.next_deadline() == 3.0
    core.record([note(1)])
    core.wrote(att, 1, 2.0)
    assert core.next_deadline() == 5.0
    core.wrote_other(att, 4.0)  # a keep-alive is no event
    assert core.due(4.999) == []
    assert core.due(5.0) == [Due.CLOSE]
    assert att.closing is Reason.IDLE


def test_keepalive_is_due_once_per_interval_without_writes() -> None:
    core = make(Policy(keepalive_s=2.0), version=OLD_VERSION)  # not an at-will close: any client
    att = attached(core, 1, now=0.0)
    assert core.next_deadline() == 2.0
    assert core.due(1.999) == []
    assert core.due(2.0) == [Due.KEEPALIVE]
    assert core.next_deadline() == 4.0
    assert core.due(3.999) == []  # not again until another interval
    assert core.due(4.0) == [Due.KEEPALIVE]
    core.record([note(1)])
    core.wrote(att, 1, 4.5)
    assert core.next_deadline() == 6.5
    assert core.due(6.4) == []
    core.wrote_other(att, 6.0)
    assert core.next_deadline() == 8.0
    assert core.due(8.0) == [Due.KEEPALIVE]


def test_the_held_head_is_due_after_hold_head_s() -> None:
    core = make()
    att = attached(core, 1, now=1.0, hold_head=True)
    assert att.head_due == 1.0 + HOLD_HEAD_S
    assert core.next_deadline() == 1.0 + HOLD_HEAD_S
    assert core.due(1.0) == []
    assert core.due(1.0 + HOLD_HEAD_S) == [Due.HEAD]
    assert att.head_due is None
    assert core.due(2.0) == [] and core.next_deadline() is None
    other = attached(make(), 1, now=1.0, hold_head=False)
    assert other.head_due is None


def test_a_head_sent_with_the_first_event_is_not_due_again() -> None:
    core = make()
    att = attached(core, 1, now=1.0, hold_head=True)
    core.head_sent(att)
    assert core.next_deadline() is None
    assert core.due(2.0) == []


def test_a_stalled_write_is_reported_once() -> None:
    core = make()
    att = attached(core, 1, now=0.0)
    core.record([note(1)])
    core.writing(att, 10.0)
    assert core.next_deadline() == 10.0 + STALL_S
    assert core.due(10.0 + STALL_S / 2) == []
    assert core.due(10.0 + STALL_S) == [Due.STALLED]
    assert att.write_since is None
    assert core.due(11.0) == [] and core.next_deadline() is None
    core.writing(att, 12.0)
    core.write_ended(att)
    assert core.due(20.0) == []


def test_a_stall_is_reported_even_when_the_close_is_decided() -> None:
    core = make(Policy(keepalive_s=None, idle_disconnect_s=1.0))
    att = attached(core, 1, now=0.0)
    core.writing(att, 0.9)
    assert core.due(1.0) == [Due.CLOSE]  # closes when the write in flight ends
    assert att.closing is Reason.IDLE
    assert core.next_deadline() == 0.9 + STALL_S
    assert core.due(0.9 + STALL_S) == [Due.STALLED]
    assert core.next_deadline() is None


def test_the_feature_deadline_closes_even_a_connection_not_at_will() -> None:
    core = make(Policy(keepalive_s=None, max_connection_s=4.0))
    att = attached(core, 1, now=1.0, at_will=False, deadline_s=3.0)
    assert core.next_deadline() == 4.0
    assert core.due(3.999) == []
    assert core.due(4.0) == [Due.CLOSE]
    assert att.closing is Reason.DEADLINE and att.closing not in AT_WILL
    # When it falls with an at-will close, the deadline wins.
    core = make(Policy(keepalive_s=None, max_connection_s=3.0))
    att = attached(core, 1, now=1.0, deadline_s=3.0)
    assert core.due(4.0) == [Due.CLOSE] and att.closing is Reason.DEADLINE


def test_the_first_connections_deadline_counts_from_the_requests_arrival() -> None:
    core = make(now=10.0)
    core.answer_within(0.4)
    core.hold(10.01, 1.0)  # the app's status is waited for, but not past the deadline
    assert core.decide_by == 10.4 and core.next_deadline() == 10.4
    assert not core.request_read(10.02) and core.decide_by == 10.4  # not due at once
    assert core.due(10.4) == [Due.DECIDE]
    att = attached(core, 1, now=10.41, at_will=False, deadline_s=0.4, first=True)
    assert att.closing is Reason.DEADLINE, "due when it attaches: closed at once with the deadline frame"
    # Attached in time (the app started its answer), it is closed when the deadline falls.
    core = make(now=10.0)
    core.answer_within(2.0)
    core.hold(10.0, 1.0)
    assert core.decide_by == 11.0
    att = attached(core, 1, now=10.5, at_will=False, deadline_s=2.0, first=True)
    assert att.deadline == 12.0 and core.next_deadline() == 12.0
    assert core.due(12.0) == [Due.CLOSE] and att.closing is Reason.DEADLINE
    # A resume's deadline still counts from its own attach.
    att = attached(core, 2, now=20.0, at_will=False, deadline_s=2.0)
    assert att.deadline == 22.0 and att.closing is None


def test_a_call_complete_when_its_deadline_falls_keeps_its_plain_result() -> None:
    core = make(now=0.0)
    core.answer_within(1.0)
    att = attached(core, 1, now=0.5, at_will=False, deadline_s=1.0, first=True)
    assert core.record([answer()]) is not None  # recorded, not written yet
    assert core.next_deadline() is None and core.due(1.0) == []
    assert core.wrote(att, 1, 1.01) is Reason.COMPLETE
    # Recorded before the connection attached, past the deadline: the plain result too.
    core = make(now=0.0)
    core.answer_within(1.0)
    core.record([answer()])
    att = attached(core, 1, now=1.5, at_will=False, deadline_s=1.0, first=True)
    assert att.closing is None and att.deadline is None and core.owed(att)


def test_an_answer_at_once_is_the_deadline_frame_whatever_the_app_answered() -> None:
    core = make(now=5.0)
    core.answer_within(0)
    core.hold(5.0, 1.0)
    assert core.decide_by == 6.0, "the app's auth is waited for (at most the status hold)"
    assert core.request_read(5.01) and core.decide_by == 5.01, "but nothing more"
    assert not core.request_read(5.02) and core.decide_by == 5.01
    core.record([answer()])
    att = attached(core, 1, now=5.001, at_will=False, deadline_s=0, first=True)
    assert att.closing is Reason.DEADLINE and not core.owed(att)


def test_the_resume_window_asks_for_an_expiry_check_once() -> None:
    core = make(Policy(keepalive_s=None, max_wait_s=30.0), now=0.0)
    assert core.next_deadline() == 30.0
    assert core.due(29.999) == []
    assert core.due(30.0) == [Due.CHECK_EXPIRY]
    assert core.expiry_paused
    assert core.next_deadline() is None  # paused while the host checks the store
    assert core.due(100.0) == []
    core.contact(90.0)  # the store knew of a client at 90
    assert not core.expiry_paused
    assert core.next_deadline() == 120.0
    assert core.due(119.0) == []
    assert core.due(120.0) == [Due.CHECK_EXPIRY]
    assert core.due(121.0) == []


def test_contact_moves_the_resume_window_later_never_earlier() -> None:
    core = make(Policy(keepalive_s=None, max_wait_s=30.0), now=0.0)
    core.contact(10.0)
    assert core.next_deadline() == 40.0
    core.contact(5.0)
    assert core.next_deadline() == 40.0
    assert core.due(39.0) == []
    assert core.due(40.0) == [Due.CHECK_EXPIRY]


def test_the_resume_window_counts_from_the_last_detach_and_not_while_attached() -> None:
    core = make(Policy(keepalive_s=None, max_wait_s=30.0), now=0.0)
    attached(core, 1, now=5.0)
    assert core.next_deadline() is None
    assert core.due(1000.0) == []
    assert core.detach(1, 1010.0)
    assert core.next_deadline() == 1040.0
    assert core.due(1039.0) == []
    assert core.due(1040.0) == [Due.CHECK_EXPIRY]


def test_no_expiry_once_the_app_finished() -> None:
    core = make(Policy(keepalive_s=None, max_wait_s=30.0), now=0.0)
    core.app_finished()
    assert core.next_deadline() is None
    assert core.due(1e9) == []
    attached(core, 1, now=1.0)
    core.detach(1, 2.0)
    assert core.next_deadline() is None
    assert core.due(1e9) == []


def test_decide_is_due_at_decide_by_once() -> None:
    core = make()
    core.decide_by = 7.0
    assert core.next_deadline() == 7.0
    assert core.due(6.9) == []
    assert core.due(7.0) == [Due.DECIDE]
    assert core.decide_by is None
    assert core.due(8.0) == []
    core.decide_by = 9.0
    attached(core, 1, now=8.0)  # a connection attached: its answer is open
    assert core.decide_by is None
    core.decide_by = 9.0
    core.app_finished()
    assert core.decide_by is None and core.due(10.0) == []


def test_decide_and_the_expiry_check_come_together() -> None:
    core = make(Policy(keepalive_s=None, max_wait_s=5.0), now=0.0)
    core.decide_by = 5.0
    assert core.due(5.0) == [Due.DECIDE, Due.CHECK_EXPIRY]


# ---------------------------------------------------------------------- protocol eras


@pytest.mark.parametrize(
    ("version", "opted_in", "is_primed", "cancels"),
    [
        ("2025-03-26", False, False, False),
        ("2025-06-18", False, False, False),
        ("2025-11-25", False, True, False),
        ("2025-11-25", True, True, False),  # the extension changes nothing before 2026-07-28
        (SINGLE, False, False, True),
        (SINGLE, True, True, False),
        ("2099-01-01", False, False, True),  # later revisions keep 2026-07-28's rule
        ("not-a-date", False, False, False),
    ],
)
def test_each_era_decides_priming_and_what_a_close_means(
    version: str, opted_in: bool, is_primed: bool, cancels: bool
) -> None:
    assert primed(version, opted_in) is is_primed
    assert close_cancels(version, opted_in) is cancels
    core = make(version=version, opted_in=opted_in)
    assert core.resumable is is_primed and core.close_cancels is cancels


def test_a_2026_stream_is_never_closed_at_will() -> None:
    policy = Policy(keepalive_s=None, max_wait_s=1000.0, max_connection_s=1.0, idle_disconnect_s=0.5)
    core = make(policy, version=SINGLE)
    att = attached(core, 1, now=0.0)
    assert not att.at_will
    assert core.next_deadline() is None
    assert core.due(100.0) == [] and att.closing is None
    opted = make(policy, version=SINGLE, opted_in=True)
    att = attached(opted, 1, now=0.0)
    assert opted.next_deadline() == 0.5
    assert opted.due(0.5) == [Due.CLOSE] and att.closing is Reason.IDLE


def test_the_client_closing_a_2026_stream_cancels_its_work_once_and_starts_no_resume_window() -> None:
    core = make(Policy(keepalive_s=None, max_wait_s=30.0), version=SINGLE)
    core.record([note(1)])
    attached(core, 1, now=0.0)
    assert core.detach(1, 5.0)
    assert core.left(Reason.GONE)
    assert core.cancelled and core.next_deadline() is None and core.due(1e9) == []
    assert not core.left(Reason.GONE)  # said once


@pytest.mark.parametrize("reason", [r for r in Reason if r is not Reason.GONE])
def test_a_close_the_client_did_not_make_cancels_nothing(reason: Reason) -> None:
    core = make(version=SINGLE)
    assert not core.left(reason)
    assert not core.cancelled


def test_a_close_cancels_nothing_when_the_work_survives_it_or_is_over_or_the_era_resumes() -> None:
    window = Policy(keepalive_s=None, max_wait_s=30.0)
    task = make(window, version=SINGLE)  # a task: the work outlives its connection
    attached(task, 1, now=0.0)
    task.detach(1, 5.0)
    assert not task.left(Reason.GONE, survives_close=True)
    assert task.next_deadline() == 35.0  # it gets today's resume window
    answered = make(version=SINGLE)
    answered.record([answer()])
    assert not answered.left(Reason.GONE)  # its answer is recorded: nothing left to stop
    done = make(version=SINGLE)
    done.app_finished()
    assert not done.left(Reason.GONE)
    for core in (make(version=VERSION), make(version=SINGLE, opted_in=True)):
        assert not core.left(Reason.GONE)  # resumable: the resume window decides


# ---------------------------------------------------------------------- settling


def test_settle_after_the_app_finished_ends_a_connection_that_has_everything() -> None:
    core = make(is_request=False)
    core.record([note(1), note(2)])
    att = attached(core, 1)
    assert core.wrote(att, 1, 1.0) is None
    assert core.settle(att) is None  # the app still runs
    core.app_finished()
    assert core.settle(att) is None  # it lacks an event
    assert core.wrote(att, 2, 2.0) is None  # `wrote` itself never ends it: the host settles
    assert core.settle(att) is Reason.ENDED
    assert att.closing is Reason.ENDED


def test_settle_reports_a_final_response_or_an_input_first() -> None:
    core = make()
    core.record([note(1), answer()])
    att = attached(core, 1)
    att.cursor = 2  # as a mirror's connection may stand
    core.app_finished()
    assert core.settle(att) is Reason.COMPLETE
    core = make()
    core.record([ask()])
    att = attached(core, 1)
    att.cursor = 1
    core.app_finished()
    assert core.settle(att) is Reason.INPUT


# ---------------------------------------------------------------------- next_deadline


def test_next_deadline_is_the_earliest_pending_timer() -> None:
    policy = Policy(keepalive_s=5.0, max_connection_s=20.0, idle_disconnect_s=8.0, max_wait_s=30.0)
    core = make(policy, now=0.0)
    assert core.next_deadline() == 30.0  # the resume window
    core.decide_by = 25.0
    assert core.next_deadline() == 25.0
    att = attached(core, 1, now=0.0, hold_head=True, deadline_s=12.0)
    assert core.next_deadline() == HOLD_HEAD_S  # the held head
    assert core.due(HOLD_HEAD_S) == [Due.HEAD]
    core.wrote_other(att, HOLD_HEAD_S)
    assert core.next_deadline() == HOLD_HEAD_S + 5.0  # keep-alive
    core.wrote_other(att, 4.0)
    assert core.next_deadline() == 8.0  # idle
    core.record([note(1)])
    core.wrote(att, 1, 6.0)
    assert core.next_deadline() == 11.0  # keep-alive again; idle at 14
    core.writing(att, 10.0)
    assert core.next_deadline() == 10.0 + STALL_S  # the stall, before the keep-alive
    core.write_ended(att)
    core.wrote_other(att, 10.0)
    assert core.next_deadline() == 12.0  # the feature deadline; idle at 14, keep-alive at 15
    assert core.due(12.0) == [Due.CLOSE] and att.closing is Reason.DEADLINE
    assert core.next_deadline() is None  # a closing connection has no timers left
    core.decide_by = 13.0
    assert core.next_deadline() == 13.0
    core.decide_by = None
    core.detach(1, 13.0)
    assert core.next_deadline() == 43.0  # the resume window from the detach
    core.app_finished()
    assert core.next_deadline() is None


def test_next_deadline_for_a_connection_closed_at_will_by_max_connection() -> None:
    policy = Policy(keepalive_s=5.0, max_connection_s=3.0, idle_disconnect_s=4.0)
    core = make(policy)
    attached(core, 1, now=0.0)
    assert core.next_deadline() == 3.0
    assert core.due(3.0) == [Due.CLOSE]
    assert core.next_deadline() is None


def test_nothing_pending_is_none() -> None:
    core = make()
    attached(core, 1, now=0.0)
    assert core.next_deadline() is None
    assert core.due(1e9) == []


# ---------------------------------------------------------------------- a mirror


def test_a_mirror_owes_what_the_owner_recorded() -> None:
    core = make()
    att = attached(core, 3, cursor=2, now=0.0)
    assert not core.owed(att)
    core.observe(5, None, [4])
    assert core.seq == 5 and core.owed(att)
    assert core.wrote(att, 3, 1.0) is None
    assert core.owed(att)
    assert core.wrote(att, 5, 2.0) is Reason.INPUT  # the pending input was written
    core = make()
    att = attached(core, 4, cursor=5, now=0.0)
    core.observe(7, 7, [])
    assert core.owed(att)
    assert core.wrote(att, 6, 1.0) is None
    assert core.wrote(att, 7, 2.0) is Reason.COMPLETE
    core.observe(6, 7, [])  # an older read never moves the record back
    assert core.seq == 7


def test_a_mirror_heartbeats_while_attached() -> None:
    core = make()
    attached(core, 1, now=0.0)
    core.heartbeat_s = 2.0
    core.next_beat = 2.0
    assert core.next_deadline() == 2.0
    assert core.due(1.0) == []
    assert core.due(2.5) == [Due.HEARTBEAT]
    assert core.next_beat == 4.5 and core.next_deadline() == 4.5


# ---------------------------------------------------------------------- the state machine

POLICIES = st.builds(
    Policy,
    max_connection_s=st.sampled_from([None, None, 0.5, 1.0, 3.0]),
    idle_disconnect_s=st.sampled_from([None, None, 0.3, 1.0, 2.0]),
    keepalive_s=st.sampled_from([None, 0.2, 0.7, 1.5]),
    max_wait_s=st.sampled_from([0.5, 2.0, 5.0]),
    disconnect_on_input_request=st.booleans(),
)
TICKS = st.one_of(
    st.sampled_from([0.001, HOLD_HEAD_S, 0.1, STALL_S, 0.3, 1.0, 3.0]),
    st.floats(min_value=0.001, max_value=4.0, allow_nan=False, allow_infinity=False),
)


@dataclass
class Conn:
    """A connection as the model sees it: the core's attachment and what reached the client."""

    att: Attachment
    start: int
    delivered: list[int] = field(default_factory=list)
    dead: bool = False
    """The client left; the host has not noticed yet (its writes go nowhere)."""
    pending: list[int] | None = None
    """Seqs of the write in flight."""


class StreamLife(RuleBasedStateMachine):
    """An app, a client that keeps what it received, and a host acting on `due`."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.gen = 0
        self.events: dict[int, bytes] = {}
        """The record: seq -> frame without id."""
        self.final: int | None = None
        self.inputs: list[int] = []
        self.app_done = False
        self.counter = 0
        self.conn: Conn | None = None
        self.kept: dict[int, bytes] = {}
        """What the client received, by seq."""
        self.deliveries: dict[int, int] = {}
        self.extra: dict[int, int] = {}
        """How many more deliveries of a seq the client asked for by re-asking."""
        self.cursors: list[int] = [0]
        self.paused = False
        self.overdue_ok = False
        """After `STALLED`, timers `due` did not get to may be in the past until it is asked again."""

    @initialize(policy=POLICIES, version=st.sampled_from([VERSION, VERSION, OLD_VERSION]))
    def start(self, policy: Policy, version: str) -> None:
        self.policy = policy
        self.resumable = version == VERSION
        self.core = StreamCore(policy, version=version, is_request=True, request_id=RID, now=self.now)

    # ------------------------------------------------------------------ model helpers
    def _frame(self, kind: str) -> tuple[bytes, bytes]:
        self.counter += 1
        if kind == "ask":
            return ask(f"e{self.counter}")
        if kind == "final":
            return answer()
        if kind == "reply":
            return answer(f"e{self.counter}")  # a response on the stream, not to its request
        if kind == "empty":
            return PRIMING
        return note(self.counter)

    @property
    def highest(self) -> int:
        return max(self.kept, default=0)

    def _receive(self, conn: Conn, seqs: list[int]) -> None:
        if conn.dead:
            return
        for seq in seqs:
            conn.delivered.append(seq)
            self.kept[seq] = self.events[seq]
            self.deliveries[seq] = self.deliveries.get(seq, 0) + 1

    def _expected_close(self, conn: Conn, last: int) -> Reason | None:
        if conn.att.closing is not None:
            return conn.att.closing
        if self.final is not None and last >= self.final:
            return Reason.COMPLETE
        if (
            conn.att.at_will
            and self.policy.disconnect_on_input_request
            and any(conn.start < seq <= last for seq in self.inputs)
        ):
            return Reason.INPUT
        return None

    def _release(self, conn: Conn) -> None:
        """The host lets the connection go (its write in flight, if any, is over)."""
        assert conn.pending is None
        assert self.core.detach(conn.att.gen, self.now) is True
        assert self.core.conn is None
        self.conn = None

    def _wrote(self, conn: Conn, seqs: list[int]) -> None:
        expected = self._expected_close(conn, seqs[-1])
        self._receive(conn, seqs)
        assert self.core.wrote(conn.att, seqs[-1], self.now) is expected
        if self.app_done:
            self._settle(conn)
        if conn.att.closing is not None:
            self._release(conn)

    def _settle(self, conn: Conn) -> Reason | None:
        att = conn.att
        expected = self._expected_close(conn, att.cursor)
        if expected is None and att.cursor >= len(self.events):
            expected = Reason.ENDED
        assert self.core.settle(att) is expected
        return expected

    def _owed(self, conn: Conn) -> list[int]:
        att = conn.att
        if not self.core.owed(att):
            assert att.closing is not None or att.cursor >= len(self.events) or self.core.conn is not att
            return []
        return list(range(att.cursor + 1, self.core.seq + 1))

    # ------------------------------------------------------------------ the app
    @precondition(lambda self: not self.app_done and self.final is None)
    @rule(
        kinds=st.lists(
            st.sampled_from(["note"] * 8 + ["ask", "ask", "reply", "final", "empty"]), min_size=1, max_size=3
        ),
        data=st.data(),
    )
    def record(self, kinds: list[str], data: st.DataObject) -> None:
        frames = [self._frame(kind) for kind in kinds]
        before = self.core.seq
        recorded = self.core.record(frames)
        expected: list[bytes] = []
        inputs: list[int] = []
        final = None
        for kind, (payload, body) in zip(kinds, frames, strict=True):
            if not body or self.final is not None or final is not None:
                continue
            expected.append(payload)
            seq = before + len(expected)
            if kind == "ask":
                inputs.append(seq)
            elif kind == "final":
                final = seq
        if not expected:
            assert recorded is None
            assert self.core.seq == before
            return
        assert recorded is not None
        assert recorded.batch == list(enumerate(expected, start=before + 1))
        assert [seq for _, seq in recorded.inputs] == inputs
        assert recorded.final_seq == final
        for seq, payload in recorded.batch:
            self.events[seq] = payload
        self.inputs += inputs
        if final is not None:
            self.final = final
        assert self.core.seq == len(self.events) and self.core.final_seq == self.final
        self._pump(data)  # the app's own send delivers

    @precondition(lambda self: not self.app_done)
    @rule(roll=st.integers(0, 3))
    def app_finishes(self, roll: int) -> None:
        if roll and self.final is None:  # not yet: an app mostly answers before it ends
            return
        self.app_done = True
        self.core.app_finished()
        conn = self.conn
        if conn is not None and conn.pending is None and self._settle(conn) is not None:
            self._release(conn)

    @precondition(lambda self: not self.app_done)
    @rule(after=st.sampled_from([0.01, 0.5, 2.0]))
    def app_sets_decide(self, after: float) -> None:
        self.core.decide_by = self.now + after

    # ------------------------------------------------------------------ the client
    @rule(data=st.data())
    def client_attaches(self, data: st.DataObject) -> None:
        if self.conn is not None and not self.conn.dead and data.draw(st.integers(0, 2)):
            return  # mostly, a client resumes once its connection is over
        highest = self.highest
        cursor = highest
        if data.draw(st.integers(0, 4)) == 0:
            cursor = data.draw(st.sampled_from(sorted(set(self.cursors))))  # re-asks
        for seq in range(cursor + 1, highest + 1):
            self.extra[seq] = self.extra.get(seq, 0) + 1
        self.cursors.append(highest)
        at_will = data.draw(st.integers(0, 5)) > 0
        deadline_s = data.draw(st.sampled_from([None, None, None, 0.3, 1.0]))
        hold_head = self.gen == 0 and data.draw(st.booleans())
        old = self.conn
        self.gen += 1
        replaced = self.core.attach(
            self.gen, cursor, self.now, at_will=at_will, deadline_s=deadline_s, hold_head=hold_head
        )
        att = self.core.conn
        assert att is not None and att.gen == self.gen and att.cursor == cursor and att.closing is None
        assert att.at_will is (at_will and self.resumable)
        self.conn = Conn(att, cursor)
        if old is None:
            assert replaced is None
        else:
            self._let_go(old, replaced, data)
        self._pump(data)  # the resume catches up

    def _let_go(self, old: Conn, replaced: Attachment | None, data: st.DataObject) -> None:
        att = self.core.conn
        assert att is not None
        cursor = att.cursor
        assert replaced is old.att and old.att.closing is not None
        # The client has left the old connection: its write in flight reaches nobody.
        if old.pending is not None and data.draw(st.booleans()):
            closing = old.att.closing
            assert self.core.wrote(old.att, old.pending[-1], self.now) is closing
            assert self.core.conn is att and att.cursor == cursor
        assert self.core.detach(old.att.gen, self.now) is False
        assert self.core.conn is att

    @precondition(lambda self: self.conn is not None and not self.conn.dead)
    @rule()
    def client_vanishes(self) -> None:
        assert self.conn is not None
        self.conn.dead = True

    @precondition(lambda self: self.conn is not None)
    @rule()
    def host_notices_gone(self) -> None:
        conn = self.conn
        assert conn is not None
        conn.dead = True
        conn.pending = None  # the write in flight fails
        self.core.close(conn.att, Reason.GONE)
        self._release(conn)

    # ------------------------------------------------------------------ the host writing
    def _pump(self, data: st.DataObject) -> None:
        """The host writes what the connection is owed: all, part, a write that hangs, or not yet."""
        conn = self.conn
        if conn is None or conn.pending is not None:
            return
        owed = self._owed(conn)
        if not owed:
            return
        how = data.draw(st.sampled_from(["all", "all", "part", "in flight", "in flight", "later"]))
        if how == "later":
            return
        seqs = owed if how == "all" else owed[: data.draw(st.integers(1, len(owed)))]
        self.core.head_sent(conn.att)
        if how == "in flight":
            self.core.writing(conn.att, self.now)
            conn.pending = seqs
        else:
            self._wrote(conn, seqs)

    @precondition(lambda self: self.conn is not None and self.conn.pending is None)
    @rule(data=st.data())
    def host_writes(self, data: st.DataObject) -> None:
        self._pump(data)

    @precondition(lambda self: self.conn is not None and self.conn.pending is not None)
    @rule()
    def write_ends(self) -> None:
        conn = self.conn
        assert conn is not None and conn.pending is not None
        seqs, conn.pending = conn.pending, None
        self._wrote(conn, seqs)

    @precondition(lambda self: self.paused)
    @rule()
    def store_knows_of_a_client(self) -> None:
        self.core.contact(self.now)
        self.paused = False

    # ------------------------------------------------------------------ time
    def _due(self) -> list[Due]:
        now = self.now
        before = self.core.next_deadline()
        out = self.core.due(now)
        if before is None or now < before:
            assert out == [], f"{out} at {now}, before the next deadline {before}"
        conn = self.conn
        for due in out:
            if due is Due.DECIDE:
                assert self.core.decide_by is None
            elif due is Due.CHECK_EXPIRY:
                assert conn is None and not self.app_done and not self.paused
                assert now >= self.core.contact_at + self.policy.max_wait_s
                self.paused = True
            elif due is Due.STALLED:
                assert conn is not None and conn.pending is not None
            elif due is Due.CLOSE:
                assert conn is not None and conn.att.closing in (
                    Reason.DEADLINE,
                    Reason.MAX_CONNECTION,
                    Reason.IDLE,
                )
                if conn.att.closing is not Reason.DEADLINE:
                    assert conn.att.at_will
                if conn.pending is None:
                    self._release(conn)
            elif due in (Due.HEAD, Due.KEEPALIVE):
                assert conn is not None and conn.att.closing is None
                if conn.pending is None:
                    self.core.head_sent(conn.att)
                    self.core.wrote_other(conn.att, now)
            else:
                raise AssertionError(f"unexpected {due}")
        self.overdue_ok = Due.STALLED in out
        after = self.core.next_deadline()
        if not self.overdue_ok:
            assert after is None or after > now, f"next deadline {after} not after {now} ({out})"
        return out

    @rule(dt=TICKS)
    def tick(self, dt: float) -> None:
        self.now += dt
        self._due()

    @precondition(lambda self: self.core.next_deadline() is not None)
    @rule()
    def until_next_deadline(self) -> None:
        deadline = self.core.next_deadline()
        assert deadline is not None
        self.now = max(self.now, deadline)
        assert self._due() != [], "nothing due at the next deadline"

    # ------------------------------------------------------------------ invariants
    @invariant()
    def what_the_client_kept(self) -> None:
        highest = self.highest
        assert sorted(self.kept) == list(range(1, highest + 1)), "a gap in what the client kept"
        for seq, payload in self.kept.items():
            assert payload == self.events[seq]
            assert self.deliveries[seq] <= 1 + self.extra.get(seq, 0), f"seq {seq} delivered again"

    @invariant()
    def each_connection_in_order(self) -> None:
        conn = self.conn
        if conn is None:
            return
        start = conn.start
        assert conn.delivered == list(range(start + 1, start + 1 + len(conn.delivered)))
        assert self.core.conn is conn.att

    @invariant()
    def the_core_agrees(self) -> None:
        if not hasattr(self, "core"):
            return
        core = self.core
        assert core.seq == len(self.events) and core.final_seq == self.final
        assert core.input_seqs == self.inputs
        if self.conn is None:
            assert core.conn is None
        deadline = core.next_deadline()
        if not self.overdue_ok:
            assert deadline is None or deadline > self.now

    def teardown(self) -> None:
        if not hasattr(self, "core"):
            return
        core = self.core
        conn = self.conn
        if conn is not None and conn.pending is not None:
            self.write_ends()
        # The client comes back from the highest seq it has until nothing more is owed.
        for _ in range(len(self.events) + 2):
            if self.highest >= core.seq:
                break
            self.now += 0.001
            self.gen += 1
            start = self.highest
            self.cursors.append(start)
            old = self.conn
            core.attach(self.gen, start, self.now)
            if old is not None:
                assert core.detach(old.att.gen, self.now) is False
            att = core.conn
            assert att is not None
            conn = self.conn = Conn(att, start)
            for _ in range(len(self.events) + 1):
                owed = self._owed(conn) if self.conn is conn else []
                if not owed:
                    break
                self._wrote(conn, owed)
            else:
                raise AssertionError("a connection stays owed what it was written")
            assert conn.delivered == list(range(start + 1, start + 1 + len(conn.delivered)))
            assert conn.delivered, "a fresh connection behind the record was written nothing"
            if self.conn is conn:
                self._release(conn)
        assert sorted(self.kept) == list(range(1, core.seq + 1))
        for seq in self.kept:
            assert self.kept[seq] == self.events[seq]
            assert 1 <= self.deliveries[seq] <= 1 + self.extra.get(seq, 0)


StreamLife.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],  # no slow `explain` on a failure
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_stream_life = pytest.mark.slow(StreamLife.TestCase)


# ---------------------------------------------------------------------- drain (issue 22)


def test_a_drain_closes_a_resumable_connection_at_will_and_leaves_one_whose_close_cancels() -> None:
    core = make()
    att = attached(core)
    assert core.drain(att) and att.closing is Reason.DRAIN and Reason.DRAIN in AT_WILL
    assert not core.owed(att), "nothing more is written to it: it closes on this event boundary"
    assert core.release(att, 1.0, gone=False) == (Reason.DRAIN, False), "a drain never cancels the work"
    modern = make(version=SINGLE)
    kept = attached(modern)
    assert not modern.drain(kept) and kept.closing is None, "2026-07-28 without the opt-in: left to finish"
    opted = make(version=SINGLE, opted_in=True)
    assert opted.drain(attached(opted)), "2026-07-28 with the resumable-streams opt-in: closed"


def test_a_drain_does_not_replace_a_close_already_decided_nor_touch_a_replaced_connection() -> None:
    core = make()
    old = attached(core, gen=1)
    new = attached(core, gen=2)
    assert old.closing is Reason.REPLACED and not core.drain(old) and old.closing is Reason.REPLACED
    core.close(new, Reason.IDLE)
    assert not core.drain(new) and new.closing is Reason.IDLE
