"""The MRTR hand-over's decisions, on plain data (no event loop): which requests a drain may hand
over, the sealed `requestState` and what a retry's is worth (`core/mrtr.py`), the core's close
(`StreamCore.drain`), and how the recorded events are readdressed to the retry (`engine/mrtr.py`).
The same through real nodes: tests/test_drain_2026.py."""

from __future__ import annotations

import json
from typing import Any

from mcp_resume_asgi.core import mrtr
from mcp_resume_asgi.core.mrtr import HandOverState, Refusal
from mcp_resume_asgi.core.stream import Reason, StreamCore
from mcp_resume_asgi.engine.mrtr import first_state, input_required_frame, readdress
from mcp_resume_asgi.policy import Policy
from mcp_resume_asgi.wire.sse import SSEParser, encode_payload
from mcp_resume_asgi.wire.tokens import TokenSigner

SIGNER = TokenSigner("a-secret-of-sixteen-or-more")
OTHER = TokenSigner("another-secret-of-sixteen-chars")
MODERN = "2026-07-28"
NOW = 1_000_000.0
PARAMS: dict[str, Any] = {"name": "slow", "arguments": {"n": 3}, "_meta": {"progressToken": 1}}


def state(**change: Any) -> HandOverState:
    fields: dict[str, Any] = {
        "stream_id": "s" * 22,
        "principal": "alice",
        "method": "tools/call",
        "digest": mrtr.params_digest(PARAMS),
        "seq": 7,
        "expires_at": NOW + 60,
    }
    fields.update(change)
    return HandOverState(**fields)


def opened(token: str, *, method: str = "tools/call", params: Any = PARAMS, now: float = NOW) -> Any:
    return mrtr.open_state(SIGNER, token, method=method, params=params, now=now)


def test_a_sealed_state_opens_on_the_request_it_was_made_for() -> None:
    token = mrtr.seal(SIGNER, state())
    assert token.startswith(mrtr.STATE_PREFIX)
    assert opened(token) == state()
    # What changes from one round to the next is not part of the request.
    retried = dict(PARAMS, _meta={"progressToken": 2}, requestState=token, inputResponses={})
    assert opened(token, params=retried) == state()


def test_a_forged_state_is_refused() -> None:
    token = mrtr.seal(SIGNER, state())
    tampered = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
    assert opened(tampered) == Refusal("invalid requestState")
    assert opened(mrtr.seal(OTHER, state())) == Refusal("invalid requestState"), "another secret"
    other_purpose = mrtr.STATE_PREFIX + SIGNER.sign(
        "resume-token", ["s" * 22, "alice", "tools/call", "d", 7, NOW]
    )
    assert opened(other_purpose) == Refusal("invalid requestState"), "a token of another purpose"
    malformed = mrtr.STATE_PREFIX + SIGNER.sign(mrtr.STATE_PURPOSE, ["s", None, "tools/call", "d", -1, NOW])
    assert opened(malformed) == Refusal("invalid requestState")
    assert opened(mrtr.STATE_PREFIX + "x" * 5000) == Refusal("invalid requestState"), "too long"


def test_an_expired_state_is_refused() -> None:
    token = mrtr.seal(SIGNER, state(expires_at=NOW - 1))
    assert opened(token) == Refusal("the requestState has expired")


def test_a_state_presented_on_another_request_is_refused() -> None:
    token = mrtr.seal(SIGNER, state())
    other = Refusal("the requestState was issued for another request (method or params differ)")
    assert opened(token, params=dict(PARAMS, arguments={"n": 4})) == other
    assert opened(token, method="prompts/get") == other


def test_a_state_bound_to_another_principal_or_stream_is_refused() -> None:
    ours = state()
    assert mrtr.admit(ours, record_principal="alice", record_method="tools/call", record_last_seq=7) is None
    assert mrtr.admit(ours, record_principal="bob", record_method="tools/call", record_last_seq=7) == Refusal(
        "the requestState was not issued to this caller"
    )
    assert mrtr.admit(ours, record_principal=None, record_method="tools/call", record_last_seq=7) is not None
    assert (
        mrtr.admit(ours, record_principal="alice", record_method="resources/read", record_last_seq=7)
        is not None
    )
    fewer = mrtr.admit(ours, record_principal="alice", record_method="tools/call", record_last_seq=6)
    assert fewer == Refusal("invalid requestState"), "the record holds fewer events than the client got"
    anonymous = state(principal=None)
    assert mrtr.admit(anonymous, record_principal=None, record_method="tools/call", record_last_seq=7) is None
    assert (
        mrtr.admit(anonymous, record_principal="alice", record_method="tools/call", record_last_seq=7)
        is not None
    )


def test_a_state_that_is_not_ours_goes_to_the_app() -> None:
    def call(state: Any, method: str = "tools/call", version: str = MODERN) -> Any:
        message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": dict(PARAMS, requestState=state)}
        return mrtr.retry_state(message, version)

    token = mrtr.seal(SIGNER, state())
    assert call(token) == token
    assert call(token, "prompts/get") == token and call(token, "resources/read") == token
    assert call("the-apps-own-state") is None
    assert call({"not": "a string"}) is None
    assert call(token, "tools/list") is None, "only the methods that may be answered input_required"
    assert call(token, version="2025-11-25") is None, "a 2025 request knows no MRTR"
    assert mrtr.retry_state({"jsonrpc": "2.0", "id": 1, "method": "tools/call"}, MODERN) is None


def test_which_requests_a_drain_may_hand_over() -> None:
    assert mrtr.may_hand_over(MODERN, False, "tools/call")
    assert mrtr.may_hand_over(MODERN, False, "prompts/get")
    assert mrtr.may_hand_over(MODERN, False, "resources/read")
    assert not mrtr.may_hand_over(MODERN, False, "tools/list")
    assert not mrtr.may_hand_over(MODERN, True, "tools/call"), "opted in: closed at will instead"
    assert not mrtr.may_hand_over("2025-11-25", False, "tools/call"), "closed at will instead"
    assert not mrtr.may_hand_over(MODERN, False, None)


def test_a_drain_closes_a_connection_whose_close_cancels_with_input_required() -> None:
    core = StreamCore(Policy(), version=MODERN, is_request=True, request_id=1)
    core.attach(1, 0, 0.0)
    att = core.conn
    assert att is not None and core.close_cancels
    assert not core.drain(att), "not handed over: left to finish"
    assert core.drain(att, input_required=True) and att.closing is Reason.INPUT_REQUIRED
    assert not core.close_cancels, "its close cancels nothing from now on"
    assert core.release(att, 1.0, gone=True) == (Reason.INPUT_REQUIRED, False), "nor does its client leaving"
    answered = StreamCore(Policy(), version=MODERN, is_request=True, request_id=1)
    answered.attach(1, 0, 0.0)
    answered.final_seq = 3
    assert answered.conn is not None and not answered.drain(answered.conn, input_required=True)
    assert answered.close_cancels, "its answer is recorded: it is written, not handed over"


def _message(frame: bytes) -> Any:
    events = SSEParser().feed(frame)
    assert len(events) == 1
    return json.loads(events[0].data)


def test_the_input_required_frame_seals_where_the_connection_stopped() -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": PARAMS}).encode()
    first = first_state("s" * 22, "alice", "tools/call", body)
    frame = input_required_frame(SIGNER, first, 5, 60.0)(12)
    message = _message(frame)
    assert message["id"] == 5 and message["result"]["resultType"] == "input_required"
    assert "inputRequests" not in message["result"]
    sealed = opened(message["result"]["requestState"], now=NOW)
    assert isinstance(sealed, HandOverState)
    assert (sealed.stream_id, sealed.principal, sealed.seq) == ("s" * 22, "alice", 12)


def test_the_recorded_events_are_readdressed_to_the_retry() -> None:
    progress = encode_payload(
        json.dumps(
            {
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": 1, "progress": 3},
            }
        ).encode()
    )
    answer = encode_payload(json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"content": []}}).encode())
    log = encode_payload(
        json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {}}).encode()
    )
    to_retry = readdress(9, "p9")
    assert _message(to_retry(1, progress))["params"] == {"progressToken": "p9", "progress": 3}
    assert _message(to_retry(2, answer))["id"] == 9
    assert to_retry(3, log) == log
    no_token = readdress(9, None)
    assert no_token(1, progress) == b"", "a retry that asked for no progress gets none"
    assert _message(no_token(2, answer))["id"] == 9
