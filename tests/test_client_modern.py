"""The client helper's 2026-07-28 decisions without a network: how a request is dressed
(`modern.ModernWire`), which era a `server/discover` answer means (`modern.discover_verdict`),
and the multi round-trip rounds (`mrtr.InputRounds`). The same paths against a real server
are in tests/test_e2e_client_modern.py."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from mcp_resume_asgi.client import RESUMABLE_STREAMS_EXTENSION, TASKS_EXTENSION, McpError, SessionError
from mcp_resume_asgi.client.modern import (
    CLIENT_CAPABILITIES_META,
    CLIENT_INFO_META,
    PROTOCOL_VERSION_META,
    Adopt,
    FallBack,
    ModernWire,
    discover_verdict,
    encode_header_value,
    mode_of,
    server_info_of,
)
from mcp_resume_asgi.client.mrtr import Ask, Done, InputRounds, Retry
from mcp_resume_asgi.client.tasks import declare, routing_headers

MODERN = "2026-07-28"
INFO = {"name": "t", "version": "1"}
ELICIT = {"method": "elicitation/create", "params": {"message": "Name?", "requestedSchema": {}}}
SAMPLE = {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}}


def wire(resumable_streams: bool = True, tasks: bool = True) -> ModernWire:
    capabilities: dict[str, Any] = {"elicitation": {}}
    return ModernWire(MODERN, INFO, declare(capabilities) if tasks else capabilities, resumable_streams)


# -- ModernWire: every request says what a session once said ---------------------------------------


def test_every_request_carries_version_info_and_capabilities_and_keeps_the_callers_meta() -> None:
    params = {"name": "echo", "arguments": {}, "_meta": {"progressToken": "p1"}}
    stamped = wire().params(params)
    meta = stamped["_meta"]
    assert meta["progressToken"] == "p1"
    assert meta[PROTOCOL_VERSION_META] == MODERN and meta[CLIENT_INFO_META] == INFO
    assert meta[CLIENT_CAPABILITIES_META] == {
        "elicitation": {},
        "extensions": {TASKS_EXTENSION: {}, RESUMABLE_STREAMS_EXTENSION: {}},
    }
    assert params["_meta"] == {"progressToken": "p1"}, "the caller's params are not changed"
    assert wire().params(None)["_meta"][PROTOCOL_VERSION_META] == MODERN


def test_resumable_streams_is_declared_only_for_a_transport_that_resumes() -> None:
    declared = wire(resumable_streams=False, tasks=False).params({})["_meta"][CLIENT_CAPABILITIES_META]
    assert declared == {"elicitation": {}}
    declared = wire(resumable_streams=True, tasks=False).params({})["_meta"][CLIENT_CAPABILITIES_META]
    assert declared == {"elicitation": {}, "extensions": {RESUMABLE_STREAMS_EXTENSION: {}}}


def test_headers_mirror_the_method_and_the_name_bearing_param() -> None:
    w = wire()
    assert w.headers("tools/call", {"name": "echo"}) == {
        "mcp-protocol-version": MODERN,
        "mcp-method": "tools/call",
        "mcp-name": "echo",
    }
    assert w.headers("resources/read", {"uri": "file:///a b.txt"})["mcp-name"] == "file:///a b.txt"
    assert w.headers("prompts/get", {"name": "p"})["mcp-name"] == "p"
    assert "mcp-name" not in w.headers("tools/list", {"name": "not a name-bearing method"})
    assert "mcp-name" not in w.headers("tools/call", {"name": 42})
    assert w.headers("server/discover", None) == {
        "mcp-protocol-version": MODERN,
        "mcp-method": "server/discover",
    }


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        ("us-west1", "us-west1"),
        ("Hello, 世界", "=?base64?SGVsbG8sIOS4lueVjA==?="),
        (" padded ", "=?base64?IHBhZGRlZCA=?="),
        ("line1\nline2", "=?base64?bGluZTEKbGluZTI=?="),
        ("=?base64?literal?=", "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="),
    ],
)
def test_header_values_are_encoded_as_the_transport_page_says(value: str, encoded: str) -> None:
    """The examples of the 2026-07-28 transport page, "Value Encoding"."""
    assert encode_header_value(value) == encoded
    if encoded != value:
        assert base64.b64decode(encoded[9:-2]).decode() == value


def test_task_routing_headers_name_the_task_in_the_same_encoding() -> None:
    assert routing_headers("tasks/get", "abc") == {"mcp-method": "tasks/get", "mcp-name": "abc"}
    assert routing_headers("tasks/cancel", "=?base64?x?=")["mcp-name"] == encode_header_value("=?base64?x?=")


def test_the_mode_follows_the_protocol_version_asked_for() -> None:
    assert mode_of("2025-11-25") == mode_of("2025-03-26") == "legacy"
    assert mode_of("2026-07-28") == mode_of("2027-01-01") == "modern"
    assert mode_of("auto") == "auto"
    assert mode_of("latest") == "legacy", "not a revision: asked for at initialize, the server decides"


# -- discover_verdict: which era a server speaks ---------------------------------------------------


DISCOVERED = {
    "supportedVersions": [MODERN],
    "capabilities": {"tools": {}},
    "resultType": "complete",
    "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "s", "version": "2"}},
}


def test_a_discover_result_listing_the_version_is_adopted_in_both_modes() -> None:
    for mode in ("modern", "auto"):
        assert discover_verdict(MODERN, mode, result=DISCOVERED) == Adopt(DISCOVERED)  # type: ignore[arg-type]
    assert server_info_of(DISCOVERED) == {"name": "s", "version": "2"}
    assert server_info_of({}) == {}


def test_a_discover_result_without_the_version_falls_back_in_auto_and_fails_otherwise() -> None:
    legacy_only = {**DISCOVERED, "supportedVersions": ["2025-11-25"]}
    assert isinstance(discover_verdict(MODERN, "auto", result=legacy_only), FallBack)
    assert isinstance(discover_verdict(MODERN, "auto", result={"protocolVersion": "x"}), FallBack)
    with pytest.raises(SessionError, match="does not speak 2026-07-28"):
        discover_verdict(MODERN, "modern", result=legacy_only)


@pytest.mark.parametrize(
    "error",
    [
        McpError(-32600, "Bad Request: Missing session ID"),  # the stock 2025 server, stateful
        McpError(-32601, "Method not found"),  # a 2025 server that routes it to the app
        SessionError("server answered HTTP 400", 400),  # no JSON-RPC body
        SessionError("server answered HTTP 404", 404),
        SessionError("server answered HTTP 405", 405),
        McpError(-32022, "Unsupported protocol version", {"supported": ["2025-06-18", "2025-11-25"]}),
    ],
)
def test_a_2025_era_refusal_falls_back_in_auto_and_is_raised_in_modern_mode(error: Exception) -> None:
    assert isinstance(discover_verdict(MODERN, "auto", error=error), FallBack)
    with pytest.raises(type(error)):
        discover_verdict(MODERN, "modern", error=error)


@pytest.mark.parametrize(
    "error",
    [
        McpError(-32020, "Header mismatch"),  # only a modern server says these: no fallback
        McpError(-32021, "Missing required client capability"),
        McpError(-32022, "Unsupported protocol version", {"supported": ["2027-01-01"]}),
        McpError(-32022, "Unsupported protocol version"),
        SessionError("server answered HTTP 503", 503),  # an outage is no era verdict
        SessionError("server answered HTTP 500", 500),
    ],
)
def test_a_modern_refusal_or_an_outage_is_raised_even_in_auto(error: Exception) -> None:
    with pytest.raises(type(error)):
        discover_verdict(MODERN, "auto", error=error)


def test_a_broken_exchange_is_raised_even_with_a_400_status() -> None:
    broken = SessionError("'server/discover' failed", 400)
    broken.__cause__ = ConnectionResetError()
    with pytest.raises(SessionError):
        discover_verdict(MODERN, "auto", error=broken)


# -- InputRounds: answer, then ask again -----------------------------------------------------------


ORIGINAL = {"name": "confirm", "arguments": {"filename": "a"}, "_meta": {"progressToken": "p"}}


def input_required(requests: dict[str, Any] | None = None, state: str | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {"resultType": "input_required"}
    if requests is not None:
        result["inputRequests"] = requests
    if state is not None:
        result["requestState"] = state
    return result


def test_a_complete_result_is_done_at_once() -> None:
    rounds = InputRounds("tools/call", ORIGINAL)
    result = {"content": [], "resultType": "complete"}
    assert rounds.observe(result) == Done(result) and rounds.rounds == 0
    assert InputRounds("tools/call", ORIGINAL).observe({"content": []}) == Done({"content": []})


def test_each_round_answers_all_requests_and_echoes_the_state_exactly() -> None:
    rounds = InputRounds("tools/call", ORIGINAL)
    state = "v1.opaque/+=="
    assert rounds.observe(input_required({"a": ELICIT, "b": SAMPLE}, state)) == Ask(
        {"a": (ELICIT["method"], ELICIT["params"]), "b": (SAMPLE["method"], SAMPLE["params"])}
    )
    retry = rounds.retry({"a": {"action": "accept"}, "b": {"role": "assistant"}})
    assert retry == Retry(
        {
            **ORIGINAL,
            "inputResponses": {"a": {"action": "accept"}, "b": {"role": "assistant"}},
            "requestState": state,
        },
        0.0,
    )
    # The next round's answers replace the last ones, and a round without state sends none.
    assert rounds.observe(input_required({"c": ELICIT})) == Ask({"c": (ELICIT["method"], ELICIT["params"])})
    again = rounds.retry({"c": {"action": "decline"}})
    assert again.params == {**ORIGINAL, "inputResponses": {"c": {"action": "decline"}}}
    assert rounds.rounds == 2


def test_a_state_only_round_is_retried_without_answers_after_a_growing_pause() -> None:
    rounds = InputRounds("tools/call", ORIGINAL, max_rounds=10)
    delays = []
    for _ in range(5):
        step = rounds.observe(input_required(state="s"))
        assert isinstance(step, Retry) and step.params == {**ORIGINAL, "requestState": "s"}
        delays.append(step.delay_s)
    assert delays == [0.05, 0.1, 0.2, 0.25, 0.25]
    assert isinstance(rounds.observe(input_required({"a": ELICIT}, "s")), Ask)
    assert rounds.observe(input_required(state="s")) == Retry({**ORIGINAL, "requestState": "s"}, 0.05)


def test_rounds_are_bounded() -> None:
    rounds = InputRounds("tools/call", ORIGINAL, max_rounds=3)
    for _ in range(3):
        assert isinstance(rounds.observe(input_required({"a": ELICIT}, "s")), Ask)
    with pytest.raises(SessionError, match="still asks for input after 3 rounds"):
        rounds.observe(input_required({"a": ELICIT}, "s"))
    with pytest.raises(ValueError):
        InputRounds("tools/call", ORIGINAL, max_rounds=0)


@pytest.mark.parametrize(
    "result",
    [
        input_required(),  # neither field
        input_required({}),  # an empty map and no state
        input_required({"a": ELICIT}, state=42),  # type: ignore[arg-type]
        input_required(["not", "a", "map"], "s"),  # type: ignore[arg-type]
        input_required({"a": {"params": {}}}, "s"),  # no method
        input_required({"a": {"method": "elicitation/create", "params": "x"}}, "s"),
        input_required({f"k{i}": ELICIT for i in range(65)}, "s"),  # too many at once
        input_required({"k" * 2000: ELICIT}, "s"),  # an absurd key
    ],
)
def test_an_input_required_result_that_breaks_the_protocol_is_a_session_error(result: dict[str, Any]) -> None:
    with pytest.raises(SessionError):
        InputRounds("tools/call", ORIGINAL).observe(result)


def test_the_callers_own_input_responses_are_not_carried_into_a_later_round() -> None:
    seeded = {**ORIGINAL, "inputResponses": {"old": {}}, "requestState": "old"}
    rounds = InputRounds("tools/call", seeded)
    rounds.observe(input_required({"a": ELICIT}))
    assert rounds.retry({"a": {}}).params == {**ORIGINAL, "inputResponses": {"a": {}}}
