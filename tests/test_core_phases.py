"""A stream's `Phase`: which calls each phase allows, where they lead, and that a refused call
raises `IllegalTransition` and changes nothing. No event loop: every `now` is given.

The table tests walk each phase through every transition method; the state machine
drives a hosted core through random sequences of them against a model of the
diagram in `core/stream.py`'s docstring.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from mcp_resume_asgi.core.answer_mode import Answer
from mcp_resume_asgi.core.stream import IllegalTransition, Phase, Reason, StreamCore
from mcp_resume_asgi.policy import Policy
from tests.test_stream_core import QUIET, RID, SINGLE, VERSION, answer, make, note

SSE = b"text/event-stream"
JSON = b"application/json"


def opened(core: StreamCore) -> StreamCore:
    assert core.response_started(200, SSE, upgraded=False, held=False) is Answer.STREAM
    return core


def in_phase(phase: Phase) -> StreamCore:
    """A hosted core brought to `phase` by legal calls (a mirror for MIRROR)."""
    if phase is Phase.MIRROR:
        return StreamCore.mirror(QUIET, version=VERSION, is_request=True, request_id=RID)
    core = make()
    if phase is Phase.HELD:
        core.open_ahead()
    elif phase is Phase.OPEN:
        opened(core)
    elif phase is Phase.PASSTHROUGH:
        assert core.response_started(200, JSON, upgraded=False, held=False) is Answer.PASSTHROUGH
    elif phase is Phase.ANSWERED:
        opened(core).record([note(1), answer()])
    elif phase is Phase.CANCELLING:
        assert opened(core).cancel()
    elif phase is Phase.DONE:
        opened(core).app_finished()
    elif phase is Phase.FREED:
        opened(core).app_finished()
        core.freed()
    assert core.phase is phase
    return core


def snapshot(core: StreamCore) -> tuple[Any, ...]:
    return (
        core.phase,
        core.seq,
        core.final_seq,
        core.decide_by,
        core.app_done,
        core.responded,
        core.conn,
        core.cancelled,
        core.answer_by,
    )


EVENTS: dict[str, Callable[[StreamCore], object]] = {
    "record": lambda c: c.record([note(99)]),
    "attach": lambda c: c.attach(7, 0, 1.0),
    "observe": lambda c: c.observe(3, None, []),
    "app_finished": lambda c: c.app_finished(),
    "open_ahead": lambda c: c.open_ahead(),
    "hold": lambda c: c.hold(1.0, 1.0),
    "answer_within": lambda c: c.answer_within(1.0),
    "response_started": lambda c: c.response_started(200, SSE, upgraded=False, held=False),
    "refused": lambda c: c.refused(),
    "record_unavailable": lambda c: c.record_unavailable(),
    "record_unavailable_after_all": lambda c: c.record_unavailable_after_all(),
    "freed": lambda c: c.freed(),
    "decided": lambda c: c.decided(),
    "cancel": lambda c: c.cancel(),
}

#: Where each event is refused, for the cores `in_phase` builds.
REFUSED: dict[str, set[Phase]] = {
    "record": {Phase.PASSTHROUGH, Phase.DONE, Phase.FREED, Phase.MIRROR},
    "attach": {Phase.PASSTHROUGH, Phase.FREED},
    "observe": set(Phase) - {Phase.NEW, Phase.MIRROR},
    "app_finished": {Phase.DONE, Phase.FREED, Phase.MIRROR},
    "open_ahead": set(Phase) - {Phase.NEW},
    "hold": set(Phase) - {Phase.NEW, Phase.HELD},
    "answer_within": set(Phase) - {Phase.NEW, Phase.HELD},
    # (CANCELLING here was opened first: its response started already)
    "response_started": set(Phase) - {Phase.NEW, Phase.HELD},
    "refused": set(Phase) - {Phase.HELD, Phase.CANCELLING},
    "record_unavailable": set(Phase) - {Phase.OPEN, Phase.CANCELLING},
    "record_unavailable_after_all": set(Phase) - {Phase.OPEN, Phase.ANSWERED, Phase.CANCELLING},
    "freed": set(Phase) - {Phase.DONE, Phase.CANCELLING, Phase.FREED},
    "decided": {Phase.MIRROR},
    "cancel": {Phase.MIRROR},
}


@pytest.mark.parametrize("phase", list(Phase))
@pytest.mark.parametrize("event", list(EVENTS))
def test_each_phase_allows_and_refuses_what_the_table_says(phase: Phase, event: str) -> None:
    core = in_phase(phase)
    before = snapshot(core)
    if phase in REFUSED[event]:
        with pytest.raises(IllegalTransition) as refused:
            EVENTS[event](core)
        assert refused.value.phase is phase and refused.value.event == event
        assert event in str(refused.value) and str(phase) in str(refused.value)
        assert snapshot(core) == before, "a refused call changed the stream"
    else:
        EVENTS[event](core)


@pytest.mark.parametrize(
    ("phase", "event", "after"),
    [
        (Phase.NEW, "open_ahead", Phase.HELD),
        (Phase.NEW, "hold", Phase.HELD),
        (Phase.HELD, "hold", Phase.HELD),
        (Phase.NEW, "response_started", Phase.OPEN),
        (Phase.HELD, "response_started", Phase.OPEN),
        (Phase.HELD, "decided", Phase.OPEN),
        (Phase.HELD, "refused", Phase.FREED),
        (Phase.CANCELLING, "refused", Phase.FREED),
        (Phase.OPEN, "record_unavailable", Phase.PASSTHROUGH),
        (Phase.CANCELLING, "record_unavailable", Phase.CANCELLING),
        (Phase.OPEN, "record_unavailable_after_all", Phase.PASSTHROUGH),
        (Phase.ANSWERED, "record_unavailable_after_all", Phase.PASSTHROUGH),
        (Phase.CANCELLING, "record_unavailable_after_all", Phase.CANCELLING),
        (Phase.NEW, "observe", Phase.MIRROR),
        (Phase.NEW, "cancel", Phase.CANCELLING),
        (Phase.HELD, "cancel", Phase.CANCELLING),
        (Phase.ANSWERED, "cancel", Phase.CANCELLING),
        (Phase.PASSTHROUGH, "cancel", Phase.CANCELLING),
        (Phase.DONE, "cancel", Phase.DONE),
        (Phase.FREED, "cancel", Phase.FREED),
        (Phase.NEW, "app_finished", Phase.DONE),
        (Phase.HELD, "app_finished", Phase.DONE),
        (Phase.PASSTHROUGH, "app_finished", Phase.DONE),
        (Phase.CANCELLING, "app_finished", Phase.DONE),
        (Phase.DONE, "freed", Phase.FREED),
        (Phase.CANCELLING, "freed", Phase.FREED),
        (Phase.NEW, "record", Phase.NEW),  # a host that never said what the stream is
        (Phase.NEW, "attach", Phase.NEW),
        (Phase.HELD, "attach", Phase.HELD),  # a retry superseding the held answer
        (Phase.DONE, "attach", Phase.DONE),  # a resume catching up after the app ended
        (Phase.OPEN, "decided", Phase.OPEN),
    ],
)
def test_where_each_allowed_call_leads(phase: Phase, event: str, after: Phase) -> None:
    core = in_phase(phase)
    EVENTS[event](core)
    assert core.phase is after


def test_the_final_response_answers_an_open_stream_and_an_opened_held_one() -> None:
    core = in_phase(Phase.OPEN)
    assert core.record([note(1)]) is not None and core.phase is Phase.OPEN
    core.record([answer()])
    assert core.phase is Phase.ANSWERED and core.final_seq == 2
    held = in_phase(Phase.HELD)
    held.record([answer()])  # (recorded while held: the phase waits for the answer to open)
    assert held.phase is Phase.HELD
    assert held.decided() and held.phase is Phase.ANSWERED
    late = in_phase(Phase.HELD)
    late.record([answer()])
    assert late.response_started(200, SSE, upgraded=False, held=True) is Answer.STREAM
    assert late.phase is Phase.ANSWERED


def test_a_cancelled_stream_still_records_what_its_app_says() -> None:
    core = in_phase(Phase.CANCELLING)
    recorded = core.record([note(1), answer()])
    assert recorded is not None and recorded.final_seq == 2
    assert core.phase is Phase.CANCELLING


def test_the_response_start_comes_once() -> None:
    core = make()
    assert core.response_started(404, JSON, upgraded=False, held=False) is Answer.PASSTHROUGH
    with pytest.raises(IllegalTransition):
        core.response_started(200, SSE, upgraded=False, held=False)
    assert core.phase is Phase.PASSTHROUGH


def test_a_stream_cancelled_before_its_answer_still_learns_it() -> None:
    core = make(version=SINGLE)
    assert core.left(Reason.GONE) and core.phase is Phase.CANCELLING
    assert core.response_started(200, SSE, upgraded=False, held=False) is Answer.STREAM
    assert core.phase is Phase.CANCELLING
    core.attach(1, 0, 1.0)  # the first connection is attached all the same (then let go)
    core.app_finished()
    assert core.phase is Phase.DONE


def test_an_upgraded_answer_opens_by_decided_and_a_refusal_frees_it() -> None:
    core = make()
    core.open_ahead()
    core.hold(0.0, 1.0)
    assert core.response_started(200, JSON, upgraded=True, held=True) is Answer.UPGRADE
    assert core.phase is Phase.HELD and core.decide_by == 1.0  # until the host decides
    assert core.decided() and core.phase is Phase.OPEN and core.decide_by is None
    assert not core.decided()  # once
    refused = make()
    refused.open_ahead()
    refused.hold(0.0, 1.0)
    assert refused.response_started(404, JSON, upgraded=True, held=True) is Answer.REFUSED
    refused.refused()
    assert refused.phase is Phase.FREED and refused.decide_by is None
    with pytest.raises(IllegalTransition):
        refused.attach(2, 0, 1.0)  # nothing to attach to
    refused.app_finished()  # the app goes on after its refusal: it still finishes
    assert refused.phase is Phase.FREED and refused.app_done


def test_decide_falling_due_opens_the_held_answer_before_the_app_answers() -> None:
    core = make()
    core.hold(0.0, 0.5)  # upgrade_json_after_s: no record yet
    assert core.decided() and core.phase is Phase.OPEN
    # The app's answer comes later: the stream was opened as UPGRADED by then.
    assert core.response_started(200, JSON, upgraded=True, held=False) is Answer.UPGRADE
    assert core.phase is Phase.OPEN


def test_a_store_outage_turns_the_opened_answer_into_a_passthrough() -> None:
    core = in_phase(Phase.OPEN)
    core.record_unavailable()
    assert core.phase is Phase.PASSTHROUGH
    with pytest.raises(IllegalTransition):
        core.record([note(1)])
    recorded = in_phase(Phase.OPEN)
    recorded.record([note(1)])
    with pytest.raises(IllegalTransition):
        recorded.record_unavailable()  # it has a record: too late to pass through


def test_a_record_that_could_not_be_created_with_its_first_events_takes_them_back() -> None:
    core = in_phase(Phase.OPEN)
    core.attach(1, 0, 0.0, hold_head=True, first=True)
    core.record([note(1), answer()])  # given ids, then the store failed to create the record with them
    assert core.phase is Phase.ANSWERED
    core.record_unavailable_after_all()
    assert (core.phase, core.seq, core.final_seq, core.input_seqs, core.conn) == (
        Phase.PASSTHROUGH,
        0,
        None,
        [],
        None,
    )
    with pytest.raises(IllegalTransition):
        core.record([note(1)])


def test_a_mirror_is_only_a_mirror() -> None:
    core = StreamCore.mirror(QUIET, version=VERSION, is_request=True, request_id=RID)
    assert core.phase is Phase.MIRROR
    core.attach(3, 0, 0.0)
    core.observe(2, None, [], running=False)
    assert core.app_done and core.seq == 2
    for event in ("record", "app_finished", "hold", "open_ahead", "response_started", "cancel", "refused"):
        with pytest.raises(IllegalTransition):
            EVENTS[event](core)
    assert core.phase is Phase.MIRROR


def test_illegal_transition_is_a_runtime_error_naming_the_phase_and_the_call() -> None:
    error = IllegalTransition(Phase.DONE, "record")
    assert isinstance(error, RuntimeError)
    assert str(error) == "record is not allowed when a stream is done"


# ---------------------------------------------------------------------- the state machine

HOSTED_EVENTS = [
    "open_ahead",
    "hold",
    "answer_within",
    "response_stream",
    "response_json",
    "response_refused",
    "decided",
    "refused",
    "record_note",
    "record_final",
    "record_unavailable",
    "attach",
    "left",
    "cancel_asked",
    "cancel",
    "app_finished",
    "freed",
]


class PhaseLife(RuleBasedStateMachine):
    """A hosted core driven by any sequence of calls, against the diagram as a model."""

    @initialize(version=st.sampled_from([VERSION, SINGLE]))
    def start(self, version: str) -> None:
        self.core = make(Policy(keepalive_s=None), version=version)
        self.phase = Phase.NEW
        self.responded = False
        self.app_done = False
        self.upgraded = False
        self.left_new = False

    def _expected(self, event: str) -> Phase | None:
        """The phase after `event`, or None when it must be refused (the model)."""
        phase, core = self.phase, self.core
        if event == "open_ahead":
            return Phase.HELD if phase is Phase.NEW else None
        if event in ("hold", "answer_within"):
            if phase not in (Phase.NEW, Phase.HELD):
                return None
            return Phase.HELD if event == "hold" else phase
        if event.startswith("response_"):
            if self.responded or phase in (Phase.MIRROR, Phase.DONE, Phase.FREED):
                return None
            if event == "response_refused" or self.upgraded:
                return phase  # REFUSED / UPGRADE: `refused` or `decided` moves it
            if phase in (Phase.NEW, Phase.HELD):
                if event == "response_json":
                    return Phase.PASSTHROUGH
                return Phase.OPEN if core.final_seq is None else Phase.ANSWERED
            return phase
        if event == "decided":
            if phase is Phase.HELD:
                return Phase.OPEN if core.final_seq is None else Phase.ANSWERED
            return phase
        if event == "refused":
            return Phase.FREED if phase in (Phase.HELD, Phase.CANCELLING) else None
        if event.startswith("record_") and event != "record_unavailable":
            if phase in (Phase.PASSTHROUGH, Phase.DONE, Phase.FREED, Phase.MIRROR):
                return None
            if event == "record_final" and phase is Phase.OPEN and core.final_seq is None:
                return Phase.ANSWERED
            return phase
        if event == "record_unavailable":
            if phase not in (Phase.OPEN, Phase.CANCELLING) or core.seq:
                return None
            return Phase.PASSTHROUGH if phase is Phase.OPEN else phase
        if event == "attach":
            return None if phase in (Phase.PASSTHROUGH, Phase.FREED) else phase
        if event in ("left", "cancel_asked"):
            stops = (
                not core.cancelled
                and not core.app_done
                and core.final_seq is None
                and (event == "cancel_asked" or core.close_cancels)
            )
            cancellable = (Phase.NEW, Phase.HELD, Phase.OPEN, Phase.ANSWERED, Phase.PASSTHROUGH)
            return Phase.CANCELLING if stops and phase in cancellable else phase
        if event == "cancel":
            cancellable = (Phase.NEW, Phase.HELD, Phase.OPEN, Phase.ANSWERED, Phase.PASSTHROUGH)
            return Phase.CANCELLING if phase in cancellable else phase
        if event == "app_finished":
            if self.app_done:
                return None
            return phase if phase is Phase.FREED else Phase.DONE
        if event == "freed":
            return Phase.FREED if phase in (Phase.DONE, Phase.CANCELLING, Phase.FREED) else None
        raise AssertionError(event)

    def _call(self, event: str) -> None:
        core = self.core
        if event == "open_ahead":
            core.open_ahead()
        elif event == "hold":
            core.hold(1.0, 1.0)
        elif event == "answer_within":
            core.answer_within(2.0)
        elif event == "response_stream":
            core.response_started(200, SSE, upgraded=self.upgraded, held=False)
        elif event == "response_json":
            core.response_started(200, JSON, upgraded=self.upgraded, held=False)
        elif event == "response_refused":
            assert core.response_started(404, JSON, upgraded=True, held=True) is Answer.REFUSED
        elif event == "decided":
            core.decided()
        elif event == "refused":
            core.refused()
        elif event == "record_note":
            core.record([note(core.seq + 1)])
        elif event == "record_final":
            core.record([answer()])
        elif event == "record_unavailable":
            core.record_unavailable()
        elif event == "attach":
            core.attach(core.seq + 1, 0, 1.0)
        elif event == "left":
            core.left(Reason.GONE)
        elif event == "cancel_asked":
            core.cancel_asked()
        elif event == "cancel":
            core.cancel()
        elif event == "app_finished":
            core.app_finished()
        elif event == "freed":
            core.freed()

    @rule(event=st.sampled_from(HOSTED_EVENTS))
    def act(self, event: str) -> None:
        expected = self._expected(event)
        before = snapshot(self.core)
        if expected is None:
            with pytest.raises(IllegalTransition):
                self._call(event)
            assert snapshot(self.core) == before
            return
        self._call(event)
        assert self.core.phase is expected, f"{event} in {self.phase}: {self.core.phase}, not {expected}"
        if self.phase is not Phase.NEW:
            self.left_new = True
        self.phase = expected
        if event.startswith("response_"):
            self.responded = True
        if event == "open_ahead":
            self.upgraded = True
        if event == "app_finished":
            self.app_done = True

    @invariant()
    def the_core_agrees(self) -> None:
        if not hasattr(self, "core"):
            return
        core = self.core
        assert core.phase is self.phase
        assert core.responded is self.responded and core.app_done is self.app_done
        assert core.phase is not Phase.MIRROR, "a hosted stream never becomes a mirror"
        if self.left_new:
            assert core.phase is not Phase.NEW, "no way back to NEW"
        if core.phase is Phase.DONE:
            assert core.app_done and core.decide_by is None


PhaseLife.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_phase_life = PhaseLife.TestCase
