"""What the client transport adds to the requests it carries, and the SEP-975 tokens it keeps, on plain data.

`client/declarations.py` (resumable streams on 2026-07-28, `resumableRequests` at
`initialize`) and `client/resumable_requests.py` (resume-policy tokens, `requests/resume`,
`requests/getStatus`). The same paths against a real server: tests/test_client_transport.py,
tests/test_resumable_requests.py.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from mcp_resume_asgi.client.declarations import (
    CLIENT_CAPABILITIES_META,
    RESUMABLE_STREAMS_EXTENSION,
    advertise_resumable_requests,
    declare_resumable_streams,
    is_single_exchange,
    rewrite_request,
)
from mcp_resume_asgi.client.resumable_requests import (
    MAX_TOKEN_LENGTH,
    TokenBook,
    is_resume_policy,
    policy_token,
    resume_body,
    status_result,
)

URL = httpx.URL("http://127.0.0.1:1/mcp")


def post(message: dict[str, Any], version: str | None = None) -> httpx.Request:
    headers = {"mcp-session-id": "s", "authorization": "Bearer t"}
    if version is not None:
        headers["mcp-protocol-version"] = version
    return httpx.Request("POST", URL, json=message, headers=headers, extensions={"timeout": {"read": 3.0}})


def extensions_of(message: dict[str, Any]) -> Any:
    return message["params"]["_meta"][CLIENT_CAPABILITIES_META]["extensions"]


@pytest.mark.parametrize(
    ("version", "single"),
    [
        ("2026-07-28", True),
        ("2027-01-01", True),
        ("2025-11-25", False),
        (None, False),
        ("2026-07-28x", False),
        ("latest", False),
    ],
)
def test_single_exchange_revisions_are_dated_from_2026_07_28_on(version: str | None, single: bool) -> None:
    assert is_single_exchange(version) is single


def test_a_request_without_capabilities_gets_the_resumable_streams_extension() -> None:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    assert declare_resumable_streams(message)
    assert extensions_of(message) == {RESUMABLE_STREAMS_EXTENSION: {}}


def test_the_extension_joins_the_clients_own_declarations_once() -> None:
    capabilities = {"extensions": {"io.modelcontextprotocol/tasks": {}}, "sampling": {}}
    message: dict[str, Any] = {
        "id": 1,
        "method": "m",
        "params": {"_meta": {CLIENT_CAPABILITIES_META: capabilities}},
    }
    assert declare_resumable_streams(message)
    assert extensions_of(message) == {"io.modelcontextprotocol/tasks": {}, RESUMABLE_STREAMS_EXTENSION: {}}
    assert not declare_resumable_streams(message)


@pytest.mark.parametrize(
    "params",
    [
        [1],
        {"_meta": "x"},
        {"_meta": {CLIENT_CAPABILITIES_META: 3}},
        {"_meta": {CLIENT_CAPABILITIES_META: {"extensions": []}}},
    ],
)
def test_a_request_whose_capabilities_are_not_objects_is_left_as_written(params: Any) -> None:
    message: dict[str, Any] = {"id": 1, "method": "m", "params": params}
    assert not declare_resumable_streams(message)


def test_initialize_advertises_resumable_requests_unless_it_says_so_itself() -> None:
    message: dict[str, Any] = {"id": 1, "method": "initialize", "params": {"capabilities": {"roots": {}}}}
    assert advertise_resumable_requests(message)
    assert message["params"]["capabilities"] == {"roots": {}, "resumableRequests": {}}
    assert not advertise_resumable_requests(message)
    assert not advertise_resumable_requests({"id": 1, "method": "initialize"})


def test_a_rewritten_request_keeps_its_headers_and_timeouts_with_the_new_body() -> None:
    message = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "t"}}
    request = post(message, "2026-07-28")
    rewritten = rewrite_request(request, json.loads(request.content), resumable_requests=True)
    body = json.loads(rewritten.content)
    assert extensions_of(body) == {RESUMABLE_STREAMS_EXTENSION: {}}
    assert body["params"]["name"] == "t" and body["id"] == 7
    assert rewritten.headers["authorization"] == "Bearer t"
    assert rewritten.headers["content-length"] == str(len(rewritten.content))
    assert rewritten.extensions == {"timeout": {"read": 3.0}}


def test_requests_with_nothing_to_add_are_sent_as_they_came() -> None:
    legacy = post({"jsonrpc": "2.0", "id": 1, "method": "tools/call"}, "2025-11-25")
    assert rewrite_request(legacy, json.loads(legacy.content), resumable_requests=True) is legacy
    initialize = post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}})
    assert rewrite_request(initialize, json.loads(initialize.content), resumable_requests=False) is initialize
    rewritten = rewrite_request(initialize, json.loads(initialize.content), resumable_requests=True)
    assert json.loads(rewritten.content)["params"]["capabilities"] == {"resumableRequests": {}}


# -- SEP-975 resume tokens -------------------------------------------------------------------------


def policy(request_id: Any, token: Any) -> dict[str, Any]:
    params = {"requestId": request_id, "resumeToken": token}
    return {"jsonrpc": "2.0", "method": "notifications/requests/resumePolicy", "params": params}


def test_a_resume_policy_gives_a_token_only_to_the_request_it_names() -> None:
    assert policy_token(policy(1, "tok"), ("i", 1)) == "tok"
    assert policy_token(policy("1", "tok"), ("i", 1)) is None
    assert policy_token(policy(2, "tok"), ("i", 1)) is None
    assert policy_token(policy(1, 5), ("i", 1)) is None
    assert policy_token(policy(1, "x" * (MAX_TOKEN_LENGTH + 1)), ("i", 1)) is None
    assert is_resume_policy(policy(2, "tok")) and not is_resume_policy({"method": "notifications/progress"})


def test_requests_resume_is_sent_under_the_requests_own_id() -> None:
    assert json.loads(resume_body("r-1", "tok")) == {
        "jsonrpc": "2.0",
        "id": "r-1",
        "method": "requests/resume",
        "params": {"resumeToken": "tok"},
    }


def test_the_token_book_keeps_the_latest_token_per_request_and_forgets_the_oldest() -> None:
    book = TokenBook(capacity=2)
    headers = [(b"mcp-session-id", b"s")]
    book.remember(URL, "s", 1, "old", headers)
    book.remember(URL, "s", 2, "two", headers)
    book.remember(URL, "s", 1, "new", headers)  # 1 is now the most recent
    book.remember(URL, "s", 3, "three", headers)
    assert len(book) == 2
    with pytest.raises(LookupError):
        book.status_request(URL, 2, "s")
    request = book.status_request(str(URL), 1, "s")
    assert json.loads(request.content)["params"] == {"requestId": 1, "resumeToken": "new"}
    assert request.headers["mcp-session-id"] == "s"
    assert request.headers["accept"] == "application/json, text/event-stream"
    with pytest.raises(LookupError):
        book.status_request(URL, "1", "s")  # another request id
    with pytest.raises(LookupError):
        book.status_request(URL, 1, None)  # another session


def test_a_status_answer_is_its_result_or_the_servers_refusal() -> None:
    status = {"status": "processing", "hasPendingMessage": False, "hasInputRequest": False}
    assert status_result(200, json.dumps({"jsonrpc": "2.0", "id": "x", "result": status}).encode()) == status
    with pytest.raises(RuntimeError, match="refused: unknown token"):
        status_result(200, b'{"jsonrpc":"2.0","id":"x","error":{"code":-32602,"message":"unknown token"}}')
    with pytest.raises(RuntimeError, match="refused: HTTP 503"):
        status_result(503, b"[]")
    with pytest.raises(RuntimeError, match="HTTP 502, not JSON"):
        status_result(502, b"<html>")
