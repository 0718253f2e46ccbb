"""The client's incremental SSE parser: spec rules, chunk boundaries, bounds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_resume_asgi.client.sse_reader import SSEEvent, SSEEventTooLarge, SSEParser, encode_event


def parse(*chunks: bytes, limit: int = 1024 * 1024) -> list[SSEEvent]:
    parser = SSEParser(limit)
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    return events


def test_fields_and_defaults() -> None:
    stream = b'id: 1\nevent: message\nretry: 250\ndata: {"a":1}\n\n: comment\ndata:x\ndata: y\n\n'
    assert parse(stream) == [
        SSEEvent(data='{"a":1}', id="1", event="message", retry=250),
        SSEEvent(data="x\ny"),
    ]


def test_priming_event_is_dispatched_with_empty_data() -> None:
    assert parse(b"id: p\nretry: 10\ndata:\n\n") == [SSEEvent(data="", id="p", retry=10)]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_line_endings(newline: bytes) -> None:
    stream = newline.join([b"id: 1", b"data: a", b"", b"data: b", b"", b""])
    assert parse(stream) == [SSEEvent(data="a", id="1"), SSEEvent(data="b")]


def test_crlf_split_across_chunks_is_one_line_end() -> None:
    assert parse(b"data: a\r", b"\n\r", b"\n") == [SSEEvent(data="a")]


def test_bom_is_skipped_even_when_split() -> None:
    assert parse(b"\xef", b"\xbb\xbfdata: a\n\n") == [SSEEvent(data="a")]


def test_invalid_fields_are_ignored() -> None:
    stream = b"retry: 1x\nid: a\x00b\nfoo: bar\ndata: d\n\n"
    assert parse(stream) == [SSEEvent(data="d")]


def test_absurd_retry_saturates() -> None:
    assert parse(b"retry: " + b"9" * 5000 + b"\n\n") == [SSEEvent(retry=10**12)]


def test_incomplete_event_at_end_is_not_dispatched() -> None:
    assert parse(b"data: a\n") == []


def test_event_size_is_bounded() -> None:
    with pytest.raises(SSEEventTooLarge):
        parse(b"data: " + b"a" * 100 + b"\n", limit=50)
    with pytest.raises(SSEEventTooLarge):  # many small lines
        parse(b"data: aaaa\n" * 10, limit=50)
    with pytest.raises(SSEEventTooLarge):  # a line that never ends
        parse(*([b"a" * 20] * 5), limit=50)
    assert parse(b"data: aaaa\n\n" * 10, limit=50) == [SSEEvent(data="aaaa")] * 10


def test_encode_round_trip_and_refuses_line_breaks_in_fields() -> None:
    assert parse(encode_event("a\nb", id="7", event="message")) == [
        SSEEvent(data="a\nb", id="7", event="message")
    ]
    with pytest.raises(ValueError):
        encode_event("x", id="a\nb")


@given(
    events=st.lists(
        st.tuples(
            st.text(
                alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\r\n"), max_size=30
            ),
            st.text(alphabet="abc123", min_size=1, max_size=5),
        ),
        max_size=5,
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=10),
)
@pytest.mark.slow
def test_any_chunking_gives_the_same_events(events: list[tuple[str, str]], cuts: list[int]) -> None:
    stream = b"".join(encode_event(data, id=event_id, event="message") for data, event_id in events)
    points = sorted({min(c, len(stream)) for c in cuts})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    expected = [SSEEvent(data=data, id=event_id, event="message") for data, event_id in events]
    assert parse(*chunks) == expected
