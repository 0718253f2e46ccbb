"""`core.expiry`: the store's word once a stream's resume window passed, how its app's work is
cancelled for each protocol revision, and which streams are freed as soon as they are over.
No event loop: both clocks are given."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_resume_asgi.core import expiry
from mcp_resume_asgi.core.expiry import Step, Verdict, VerdictKind, cancel_plan, forgets, verdict
from mcp_resume_asgi.store.base import StreamKind, StreamMeta, StreamState

WALL = 1_000_000.0
MONO = 500.0


def record(**fields: Any) -> StreamMeta:
    base: dict[str, Any] = {
        "stream_id": "s",
        "kind": StreamKind.REQUEST,
        "session_id": None,
        "principal": None,
        "protocol_version": "2025-11-25",
        "path": "/mcp",
    }
    base.update(fields)
    return StreamMeta(**base)


def judge(meta: StreamMeta | None, *, record_open: bool = True, max_wait_s: float = 30.0) -> Verdict:
    return verdict(meta, record_open=record_open, max_wait_s=max_wait_s, now_wall=WALL, now_mono=MONO)


def test_the_state_the_core_compares_is_the_stores() -> None:
    assert StreamState.RUNNING == expiry.RUNNING


def test_nobody_in_contact_expires() -> None:
    assert judge(record(last_contact=WALL - 31)) == Verdict(VerdictKind.EXPIRE)
    assert judge(record(last_contact=WALL - 30)) == Verdict(VerdictKind.EXPIRE)  # the window is over


def test_a_stream_with_no_record_expires_unless_its_record_was_deleted() -> None:
    assert judge(None, record_open=False) == Verdict(VerdictKind.EXPIRE)  # nothing was ever recorded
    assert judge(None, record_open=True) == Verdict(VerdictKind.CANCEL_DELETED)


def test_a_client_attached_elsewhere_is_in_contact_now() -> None:
    assert judge(record(attached=True, last_contact=0.0)) == Verdict(VerdictKind.CONTACT, MONO)


def test_a_recent_contact_elsewhere_moves_the_window_on_the_hosts_clock() -> None:
    got = judge(record(last_contact=WALL - 10))
    assert got == Verdict(VerdictKind.CONTACT, MONO - 10)


@pytest.mark.parametrize("state", [StreamState.COMPLETED, StreamState.EXPIRED])
def test_a_finished_answer_is_left_to_wind_down(state: StreamState) -> None:
    assert judge(record(state=state, last_contact=0.0)) == Verdict(VerdictKind.NONE)
    assert judge(record(state=state, attached=True)) == Verdict(VerdictKind.NONE)


def test_a_2025_session_request_is_told_first() -> None:
    assert cancel_plan(is_request=True, in_session=True, version="2025-11-25") == (
        Step.NOTIFY,
        Step.WAIT,
        Step.DISCONNECT,
        Step.WAIT,
        Step.HARD,
    )
    assert cancel_plan(is_request=True, in_session=True, version="2025-03-26")[0] is Step.NOTIFY


@pytest.mark.parametrize(
    ("is_request", "in_session", "version"),
    [
        (True, True, "2026-07-28"),  # its closed stream is its cancel: no notice
        (True, False, "2025-11-25"),  # no session to send the notice on
        (False, True, "2025-11-25"),  # a standalone stream has no request to cancel
    ],
)
def test_otherwise_the_app_is_disconnected_then_stopped(
    is_request: bool, in_session: bool, version: str
) -> None:
    plan = cancel_plan(is_request=is_request, in_session=in_session, version=version)
    assert plan == (Step.DISCONNECT, Step.WAIT, Step.HARD)


@pytest.mark.parametrize("version", ["2025-03-26", "2025-11-25", "2026-07-28"])
@pytest.mark.parametrize("is_request", [False, True])
@pytest.mark.parametrize("in_session", [False, True])
def test_every_plan_gives_the_app_its_grace_before_each_harder_step(
    version: str, is_request: bool, in_session: bool
) -> None:
    plan = cancel_plan(is_request=is_request, in_session=in_session, version=version)
    assert plan.count(Step.HARD) == 1 and plan[-1] is Step.HARD
    assert plan.count(Step.DISCONNECT) == 1
    for i, step in enumerate(plan):
        if step is Step.NOTIFY:
            assert i == 0, "the notice comes first"
        elif step is not Step.WAIT and i > 0:
            assert plan[i - 1] is Step.WAIT, f"{step} right after {plan[i - 1]}"
    assert expiry.CANCEL_GRACE_S == 5.0


def test_only_a_stream_nobody_may_resume_is_forgotten_when_over() -> None:
    assert forgets(close_cancels=True, record_open=True, expired=False, survives_close=False)
    assert not forgets(close_cancels=False, record_open=True, expired=False, survives_close=False)
    assert not forgets(close_cancels=True, record_open=False, expired=False, survives_close=False)
    assert not forgets(close_cancels=True, record_open=True, expired=True, survives_close=False)
    assert not forgets(close_cancels=True, record_open=True, expired=False, survives_close=True)
