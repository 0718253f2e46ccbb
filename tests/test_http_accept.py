"""`Accept` read with its weights (`_http.py`, issue 25): `q=0` means "not acceptable", without an event loop."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_resume_asgi.wire.headers import accepts_sse, media_types

SSE = "text/event-stream"
JSON = "application/json"


def scope(*accept: str) -> dict[str, Any]:
    return {"headers": [(b"accept", value.encode()) for value in accept]}


@pytest.mark.parametrize(
    ("accept", "sse"),
    [
        ("application/json, text/event-stream", True),
        ("application/json, text/event-stream;q=0", False),
        ("application/json, text/event-stream ; Q=0.000", False),
        ("text/event-stream;q=0.001", True),
        ("*/*", True),
        ("text/*", True),
        ("*/*;q=0.5, text/event-stream;q=0", False),  # the most specific range decides
        ("text/*;q=0, text/event-stream", True),
        ("text/event-stream, text/*;q=0", True),
        ("*/*;q=0", False),
        ("text/event-stream;q=abc", True),  # no valid weight: as if none
        ("text/event-stream;q=1.5", True),
        ("text/event-stream;charset=utf-8;q=0", False),
        ("application/json", False),
        ("", False),
    ],
)
def test_an_accept_header_is_read_with_its_weights(accept: str, sse: bool) -> None:
    assert accepts_sse(scope(accept)) is sse


def test_weight_zero_ranges_are_not_media_types_and_accept_lines_are_one_list() -> None:
    assert media_types("text/event-stream;q=0, Application/JSON; charset=utf-8") == {JSON}
    assert media_types(None) == set()
    assert accepts_sse(scope(JSON, SSE)), "a list header split over two lines"
    assert not accepts_sse(scope(JSON, f"{SSE};q=0"))
