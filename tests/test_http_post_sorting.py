"""`http.post_sorting`: who answers a POST on the MCP endpoint, from its body and headers alone.
No event loop: scopes and bodies are plain values built here."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcp_resume_asgi.core.cancel_notices import CancelNotice
from mcp_resume_asgi.http.post_sorting import INVALID_KEY, Post, idempotency_key, sort_post
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.headers import named_once

SSE_AND_JSON = (b"accept", b"application/json, text/event-stream")


def scope(*headers: tuple[bytes, bytes]) -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": "/mcp", "headers": [SSE_AND_JSON, *headers]}


def body(message: Any) -> bytes:
    return json.dumps(message).encode()


def opted_in_notice(request_id: Any, reason: str | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {
        "requestId": request_id,
        "_meta": {
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {p.RESUMABLE_STREAMS_EXTENSION: {}}}
        },
    }
    if reason is not None:
        params["reason"] = reason
    return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}


def test_a_request_that_may_be_answered_with_sse_goes_to_the_engine() -> None:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t"}}
    sorted_ = sort_post(scope(), body(message))
    assert sorted_.kind is Post.REQUEST and sorted_.message == message


def test_a_request_whose_client_takes_no_sse_goes_to_the_app() -> None:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    plain = {"type": "http", "method": "POST", "path": "/mcp", "headers": [(b"accept", b"application/json")]}
    assert sort_post(plain, body(message)).kind is Post.TO_APP


@pytest.mark.parametrize("request_id", [None, True, 1.5, {"a": 1}, "x" * 257])
def test_a_request_with_an_id_the_engine_cannot_key_goes_to_the_app(request_id: Any) -> None:
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call"}
    assert sort_post(scope(), body(message)).kind is Post.TO_APP


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "method": "notifications/initialized"},  # a notification
        {"jsonrpc": "2.0", "id": 1, "method": 7},  # no method name
        [{"jsonrpc": "2.0", "id": 1, "method": "ping"}],  # a batch
        "text",
    ],
)
def test_anything_else_goes_to_the_app_as_sent(message: Any) -> None:
    sorted_ = sort_post(scope(), body(message))
    assert sorted_.kind is Post.TO_APP and sorted_.answered == []


def test_the_client_answers_in_what_goes_to_the_app_are_named() -> None:
    answers = [
        {"jsonrpc": "2.0", "id": "e1", "result": {}},
        {"jsonrpc": "2.0", "id": 2, "error": {"code": -1, "message": "no"}},
        {"jsonrpc": "2.0", "method": "notifications/progress"},
    ]
    assert sort_post(scope(), body(answers)).answered == ["e1", 2]
    assert sort_post(scope(), body(answers[0])).answered == ["e1"]


def test_nan_and_infinity_are_a_parse_error_but_other_non_json_goes_to_the_app() -> None:
    assert sort_post(scope(), b'{"jsonrpc": "2.0", "id": 1, "method": "m", "params": {"x": NaN}}').kind is (
        Post.NOT_JSON
    )
    assert sort_post(scope(), b"-Infinity").kind is Post.NOT_JSON
    not_json = sort_post(scope(), b"{not json")
    assert not_json.kind is Post.TO_APP and not_json.message is None


def test_an_opted_in_cancel_notice_outside_a_session_is_the_middlewares() -> None:
    modern = (b"mcp-protocol-version", p.SINGLE_EXCHANGE_VERSION.encode())
    sorted_ = sort_post(scope(modern), body(opted_in_notice(3, "enough")))
    assert sorted_.kind is Post.CANCEL_NOTICE and sorted_.notice == CancelNotice(3, "enough")


def test_a_cancel_notice_of_a_session_or_an_older_revision_goes_to_the_app() -> None:
    notice = body(opted_in_notice(3))
    in_session = scope(
        (b"mcp-protocol-version", p.SINGLE_EXCHANGE_VERSION.encode()), (b"mcp-session-id", b"s")
    )
    older = scope((b"mcp-protocol-version", b"2025-11-25"))
    assert sort_post(in_session, notice).kind is Post.TO_APP
    assert sort_post(older, notice).kind is Post.TO_APP
    not_opted_in = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}}
    modern = scope((b"mcp-protocol-version", p.SINGLE_EXCHANGE_VERSION.encode()))
    assert sort_post(modern, body(not_opted_in)).kind is Post.TO_APP


def test_an_idempotency_key_is_one_header_of_1_to_255_printable_ascii_characters() -> None:
    assert idempotency_key(scope()) is None
    assert idempotency_key(scope((b"idempotency-key", b"k-1"))) == "k-1"
    assert idempotency_key(scope((b"idempotency-key", b"x" * 255))) == "x" * 255
    # A key spelled like the refusal is still a key: the refusal is no string.
    assert idempotency_key(scope((b"idempotency-key", b"invalid"))) == "invalid"
    for refused in (
        scope((b"idempotency-key", b"")),
        scope((b"idempotency-key", b"x" * 256)),
        scope((b"idempotency-key", "é".encode())),
        scope((b"idempotency-key", b"a\tb")),
        scope((b"idempotency-key", b"a"), (b"idempotency-key", b"b")),
    ):
        assert idempotency_key(refused) is INVALID_KEY


def test_headers_read_by_name_sort_and_key_a_post_as_read_one_by_one() -> None:
    """`named_once` (the headers by name, none repeated) gives `sort_post` and `idempotency_key`
    the answers they read from the scope; a repeated name gives no map (read one by one)."""
    for headers in (
        [(b"accept", b"application/json, text/event-stream"), (b"idempotency-key", b"k-1")],
        [(b"accept", b"application/json")],
        [(b"accept", b"text/event-stream;q=0, */*"), (b"idempotency-key", b"")],
        [(b"idempotency-key", b"x" * 256)],
    ):
        plain = {"type": "http", "headers": headers}
        named = named_once(plain)
        assert named is not None
        message = body({"jsonrpc": "2.0", "id": 1, "method": "tools/call"})
        assert sort_post(plain, message, named).kind is sort_post(plain, message).kind
        assert idempotency_key(plain, named) == idempotency_key(plain)
    repeated = {"type": "http", "headers": [(b"idempotency-key", b"a"), (b"idempotency-key", b"a")]}
    assert named_once(repeated) is None and idempotency_key(repeated) is INVALID_KEY
