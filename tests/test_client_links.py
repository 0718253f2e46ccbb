"""Which `Link` URL the client helper follows (`client/links.py`), decided on plain headers and URLs.

The transport sends the original POST's headers - session id, authorization - to
the URL it follows, so a refusal here is what keeps them on the server that
issued them. End to end (a scripted server sending a cross-origin Link) in
tests/test_client_transport.py.
"""

from __future__ import annotations

import httpx
import pytest

from mcp_resume_asgi.client.links import parse_link_header, safe_url, same_origin, stream_link

BASE = httpx.URL("https://mcp.example/mcp?x=1")


def answer(*links: str) -> httpx.Response:
    return httpx.Response(200, headers=[("link", value) for value in links])


def test_link_values_are_split_outside_quotes_and_angle_brackets() -> None:
    links = parse_link_header(['<a,b>; rel="stream next"; title="x, y; z", </c>; REL=other'])
    assert links == [("a,b", {"rel": "stream next", "title": "x, y; z"}), ("/c", {"rel": "other"})]


def test_link_params_are_unquoted_and_the_first_of_a_name_wins() -> None:
    [(target, params)] = parse_link_header(['< /s >; rel="a \\"b\\" \\\\"; rel=second; flag'])
    assert target == "/s"
    assert params == {"rel": 'a "b" \\', "flag": ""}


def test_malformed_link_entries_are_skipped_not_guessed() -> None:
    assert parse_link_header(["no-brackets; rel=stream", "<unclosed; rel=stream", ""]) == []
    assert parse_link_header(["junk, </ok>; rel=stream"]) == [("/ok", {"rel": "stream"})]


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("https://h/x", "https://H:443/y", True),
        ("http://h/x", "http://h:80/", True),
        ("http://h:8080/x", "http://h:8080/y", True),
        ("https://h/x", "http://h/x", False),
        ("https://h/x", "https://h:8443/x", False),
        ("https://h/x", "https://g/x", False),
    ],
)
def test_same_origin_fills_in_default_ports(a: str, b: str, same: bool) -> None:
    assert same_origin(httpx.URL(a), httpx.URL(b)) is same


def test_the_stream_link_is_resolved_against_the_request_url() -> None:
    assert stream_link(answer('</streams/abc?t=1>; rel="stream"'), BASE) == httpx.URL(
        "https://mcp.example/streams/abc?t=1"
    )
    assert stream_link(answer("<s2>; rel=stream"), BASE) == httpx.URL("https://mcp.example/s2")


def test_only_a_link_whose_rel_names_stream_is_followed() -> None:
    assert stream_link(answer('</a>; rel="next"', '</b>; rel="prev STREAM"'), BASE) == httpx.URL(
        "https://mcp.example/b"
    )
    assert stream_link(answer('</a>; rel="streams"'), BASE) is None
    assert stream_link(httpx.Response(200), BASE) is None


@pytest.mark.parametrize(
    "target",
    [
        "https://evil.example/s",
        "http://mcp.example/s",
        "https://mcp.example:8443/s",
        "//evil.example/s",
        "https://user:pw@mcp.example/s",
    ],
)
def test_a_link_off_the_origin_or_with_credentials_is_refused(target: str) -> None:
    assert stream_link(answer(f'<{target}>; rel="stream"'), BASE) is None


def test_a_refused_first_stream_link_is_not_replaced_by_a_later_one() -> None:
    response = answer('<https://evil.example/s>; rel="stream"', '</ok>; rel="stream"')
    assert stream_link(response, BASE) is None


def test_log_lines_get_urls_without_secrets() -> None:
    assert safe_url(httpx.URL("https://u:p@h/mcp?token=1#f")) == "https://h/mcp"
