"""`core.resume`: what a client coming back for a stream is answered (204, 410, the gap
event, the events the store lost, or the stream), on the stream's record alone. No event loop, no store: records are
`StreamMeta` values built here."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_resume_asgi.core import resume
from mcp_resume_asgi.core.resume import Resume, ResumeAnswer
from mcp_resume_asgi.store.base import StreamKind, StreamMeta, StreamState


def record(**fields: Any) -> StreamMeta:
    base: dict[str, Any] = {
        "stream_id": "s",
        "kind": StreamKind.REQUEST,
        "session_id": None,
        "principal": None,
        "protocol_version": "2025-11-25",
        "path": "/mcp",
        "last_seq": 5,
    }
    base.update(fields)
    return StreamMeta(**base)


def test_the_record_values_the_core_compares_are_the_stores() -> None:
    assert StreamState.RUNNING == resume.RUNNING
    assert StreamKind.STANDALONE == resume.STANDALONE


@pytest.mark.parametrize("via_link", [False, True])
def test_a_position_past_the_end_means_the_store_lost_events_the_client_got(via_link: bool) -> None:
    """Events are stored before they are sent: a position past `last_seq` is the store going
    back (a failover), told as lost events - not a 400 blaming the client."""
    assert resume.answer(record(), 6, via_link=via_link) == ResumeAnswer(Resume.LOST, 6)
    assert resume.answer(record(delivered_seq=9), None, via_link=via_link).kind is Resume.LOST
    assert resume.answer(record(), 5, via_link=via_link) == ResumeAnswer(Resume.SERVE, 5)
    standalone = record(kind=StreamKind.STANDALONE)
    assert resume.answer(standalone, 6, via_link=via_link) == ResumeAnswer(Resume.GONE, 6)


def test_the_lost_events_are_named_to_the_client() -> None:
    text = resume.lost_text(record(last_seq=4), 9)
    assert "lost events 5..9" in text and "failed over" in text


def test_no_position_means_where_the_stream_was_last_delivered() -> None:
    assert resume.answer(record(delivered_seq=3), None, via_link=True) == ResumeAnswer(Resume.SERVE, 3)
    assert resume.answer(record(), None, via_link=False) == ResumeAnswer(Resume.SERVE, 0)


@pytest.mark.parametrize("via_link", [False, True])
def test_a_client_holding_the_final_response_gets_nothing(via_link: bool) -> None:
    done = record(final_seq=5, state=StreamState.COMPLETED)
    assert resume.answer(done, 5, via_link=via_link).kind is Resume.NOTHING
    assert resume.answer(done, 4, via_link=via_link).kind is Resume.SERVE
    # An error answered mid-stream (final before the end of what was kept): still over.
    assert resume.answer(record(final_seq=3), 4, via_link=via_link).kind is Resume.NOTHING


def test_only_the_link_gets_nothing_while_the_stream_waits_for_input_or_is_over() -> None:
    waiting = record(pending_inputs=[["e1", 5]])
    assert waiting.waiting_for_input
    assert resume.answer(waiting, 5, via_link=True).kind is Resume.NOTHING
    assert resume.answer(waiting, 5, via_link=False).kind is Resume.SERVE  # it waits there for more
    assert resume.answer(waiting, 4, via_link=True).kind is Resume.SERVE  # it lacks the question
    ended = record(state=StreamState.COMPLETED)  # a standalone stream ended without a final
    assert resume.answer(ended, 5, via_link=True).kind is Resume.NOTHING
    assert resume.answer(ended, 5, via_link=False).kind is Resume.SERVE
    expired = record(state=StreamState.EXPIRED, pending_inputs=[["e1", 5]])
    assert not expired.waiting_for_input
    assert resume.answer(expired, 5, via_link=True).kind is Resume.NOTHING


def test_a_position_before_the_kept_events_is_a_gap_or_gone() -> None:
    trimmed = record(first_seq=3)
    assert resume.answer(trimmed, 2, via_link=False).kind is Resume.SERVE  # 3 is still there
    assert resume.answer(trimmed, 1, via_link=False) == ResumeAnswer(Resume.GAP, 1)
    assert resume.from_cursor(trimmed, 0) is Resume.GAP
    standalone = record(first_seq=3, kind=StreamKind.STANDALONE)
    assert resume.answer(standalone, 1, via_link=True) == ResumeAnswer(Resume.GONE, 1)
    assert resume.from_cursor(standalone, 2) is Resume.SERVE


def test_the_answers_carry_their_http_status() -> None:
    assert [r.value for r in (Resume.NOTHING, Resume.GONE, Resume.GAP)] == [204, 410, 200]
    assert Resume.LOST.value not in (204, 410, 200, 400)


@given(
    last=st.integers(0, 8),
    first=st.integers(1, 9),
    final=st.none() | st.integers(1, 8),
    delivered=st.integers(0, 8),
    state=st.sampled_from(list(StreamState)),
    inputs=st.booleans(),
    kind=st.sampled_from(list(StreamKind)),
    after=st.none() | st.integers(0, 10),
    via_link=st.booleans(),
)
def test_the_answer_agrees_with_the_rules_it_was_moved_from(
    last: int,
    first: int,
    final: int | None,
    delivered: int,
    state: StreamState,
    inputs: bool,
    kind: StreamKind,
    after: int | None,
    via_link: bool,
) -> None:
    """As `Engine.handle_resume` then `serve_stream` wrote them before they moved here."""
    meta = record(
        last_seq=last,
        first_seq=first,
        final_seq=final,
        delivered_seq=delivered,
        state=state,
        pending_inputs=[["e", last]] if inputs else [],
        kind=kind,
    )
    got = resume.answer(meta, after, via_link=via_link)
    position = delivered if after is None else after
    assert got.after_seq == position
    if position > last:
        assert got.kind is (Resume.GONE if kind is StreamKind.STANDALONE else Resume.LOST)
        return
    over = (
        (final is not None and position >= final)
        or (state is not StreamState.RUNNING and position >= last)
        or (inputs and state is StreamState.RUNNING and position >= last)
    )
    if (via_link and over) or (final is not None and position >= final):
        assert got.kind is Resume.NOTHING
    elif position + 1 < first:
        assert got.kind is (Resume.GONE if kind is StreamKind.STANDALONE else Resume.GAP)
    else:
        assert got.kind is Resume.SERVE
