"""`core.answer_mode`: how the app's response start decides its first connection's answer, and
the headers that answer keeps. Plain functions, no event loop."""

from __future__ import annotations

import pytest

from mcp_resume_asgi.core.answer_mode import (
    SKIP_APP_HEADERS,
    Answer,
    answer_head,
    answer_mode,
    content_type,
    session_id,
    stream_headers,
)

SSE = b"text/event-stream"


@pytest.mark.parametrize(
    ("status", "media", "expected"),
    [
        (200, SSE, Answer.STREAM),
        (200, b"application/json", Answer.PASSTHROUGH),
        (201, SSE, Answer.PASSTHROUGH),  # only a 200 stream is the request's SSE answer
        (202, b"", Answer.PASSTHROUGH),  # a notification's acknowledgement
        (404, SSE, Answer.PASSTHROUGH),
        (500, b"text/plain", Answer.PASSTHROUGH),
    ],
)
def test_a_plain_request_is_streamed_only_for_a_200_sse_answer(
    status: int, media: bytes, expected: Answer
) -> None:
    for held in (False, True):  # upgrade_json_after_s holds it without opening a record
        assert answer_mode(status=status, content_type=media, upgraded=False, held=held) is expected


@pytest.mark.parametrize(
    ("status", "held", "recorded", "expected"),
    [
        (200, True, False, Answer.UPGRADE),
        (200, False, False, Answer.UPGRADE),
        (302, True, False, Answer.UPGRADE),
        (399, True, False, Answer.UPGRADE),
        (400, True, False, Answer.REFUSED),
        (404, True, False, Answer.REFUSED),
        (500, True, False, Answer.REFUSED),
        (404, False, False, Answer.UPGRADE),  # its answer opened already: the status is its event
        (404, True, True, Answer.UPGRADE),  # nobody waits for the status: the refusal is recorded
    ],
)
def test_a_stream_opened_ahead_is_refused_only_while_its_answer_is_held(
    status: int, held: bool, recorded: bool, expected: Answer
) -> None:
    for media in (SSE, b"application/json"):
        got = answer_mode(
            status=status, content_type=media, upgraded=True, held=held, refusal_recorded=recorded
        )
        assert got is expected


def test_content_type_is_the_last_headers_media_type_lowercased_without_parameters() -> None:
    assert content_type([]) == b""
    assert content_type([(b"Content-Type", b"Text/Event-Stream; charset=utf-8")]) == SSE
    assert content_type([(b"content-type", b"text/plain"), (b"content-type", b" text/event-stream ")]) == SSE
    assert content_type([(b"x-content-type", SSE)]) == b""


def test_session_id_is_the_first_mcp_session_id() -> None:
    assert session_id([]) is None
    assert session_id([(b"Mcp-Session-Id", b"abc"), (b"mcp-session-id", b"def")]) == "abc"
    assert session_id([(b"mcp-session-id", b"\xe9")]) == "\xe9"  # latin-1, as ASGI headers are


def test_stream_headers_drop_what_the_engine_sets_and_ask_proxies_not_to_buffer() -> None:
    headers = [
        (b"Content-Type", SSE),
        (b"Content-Length", b"12"),
        (b"Link", b"<x>; rel=next"),
        (b"transfer-encoding", b"chunked"),
        (b"mcp-session-id", b"s1"),
    ]
    assert stream_headers(headers) == [
        (b"Content-Type", SSE),
        (b"mcp-session-id", b"s1"),
        (b"x-accel-buffering", b"no"),
    ]
    own = [(b"X-Accel-Buffering", b"yes")]
    assert stream_headers(own) == own  # the app's own choice stands
    assert {b"content-length", b"link", b"transfer-encoding"} == SKIP_APP_HEADERS


def test_answer_head_reads_what_content_type_and_stream_headers_read_kept_or_not() -> None:
    """`answer_head` is `content_type` and, for SSE, `stream_headers` (a list of its own each
    time: the caller appends to it), whether the head was kept or read afresh."""
    heads = [
        [(b"content-type", b"text/event-stream"), (b"mcp-session-id", b"s1"), (b"content-length", b"9")],
        [(b"Content-Type", b"text/event-stream; charset=utf-8"), (b"x-accel-buffering", b"yes")],
        [(b"content-type", b"application/json"), (b"content-length", b"2")],
        [[b"content-type", b"text/event-stream"], [b"link", b"<x>"]],  # (pairs as lists: not kept)
        [],
    ]
    for headers in heads * 2:
        media, sse = answer_head(headers)
        assert media == content_type(headers)
        assert sse == (stream_headers(headers) if media == b"text/event-stream" else None)
        if sse is not None:
            sse.append((b"link", b"<y>"))  # (the next read of the same head is not changed)
    assert answer_head(heads[0])[1] == stream_headers(heads[0])
