"""The Tasks layer's sans-IO parts, without an event loop: record, status, wire shapes,
negotiation, the advertisement rewrite, the routing headers, the policy knobs."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from mcp_resume_asgi import Policy
from mcp_resume_asgi.tasks.advertising import AdvertisingAnswer
from mcp_resume_asgi.tasks.capability import (
    CLIENT_CAPABILITIES_META,
    declares,
    missing_capability,
    stripped,
)
from mcp_resume_asgi.tasks.record import (
    EXTENSION,
    StreamView,
    TaskRecord,
    create_task_result,
    get_task_result,
    iso,
    outcome,
)
from mcp_resume_asgi.tasks.routing import routing_problem, task_id_of
from mcp_resume_asgi.wire.headers import decode_header_value
from mcp_resume_asgi.wire.sse import encode_payload

RECORD = TaskRecord(
    stream_id="s" * 22,
    principal="alice",
    created_at=1_764_066_600.0,  # 2025-11-25T10:30:00Z
    ttl_ms=60_000,
    poll_interval_ms=500,
    path="/mcp",
    version="2026-07-28",
)


def frame(message: dict[str, Any]) -> bytes:
    return encode_payload(json.dumps(message).encode())


# ---------------------------------------------------------------------------- record
def test_a_record_round_trips_and_garbage_is_no_record() -> None:
    assert TaskRecord.decode(RECORD.encode()) == RECORD
    ended = RECORD.ended(RECORD.created_at + 5).cancelled(RECORD.created_at + 6)
    assert TaskRecord.decode(ended.encode()) == ended
    assert ended.cancelled(RECORD.created_at + 9).cancelled_at == RECORD.created_at + 6, (
        "the first cancel counts"
    )
    for raw in (None, "", "[]", "{}", "not json", '{"stream_id": 1}', "x" * 5000):
        assert TaskRecord.decode(raw) is None, raw
    wrong = json.loads(RECORD.encode())
    for field, value in (("created_at", "soon"), ("ttl_ms", 1.5), ("principal", 3), ("ended_at", True)):
        assert TaskRecord.decode(json.dumps({**wrong, field: value})) is None, field
    assert TaskRecord.decode(json.dumps({**wrong, "extra": 1})) is None


def test_the_record_lives_for_its_ttl_from_creation() -> None:
    assert RECORD.ttl_left_s(RECORD.created_at + 20) == pytest.approx(40)
    assert RECORD.ttl_left_s(RECORD.created_at + 600) == 1.0


def test_times_are_iso_8601_utc() -> None:
    assert iso(RECORD.created_at) == "2025-11-25T10:30:00.000Z"
    assert iso(RECORD.created_at + 0.25) == "2025-11-25T10:30:00.250Z"


# ---------------------------------------------------------------------------- status and shapes
def test_the_create_task_result_is_a_working_task_marked_task() -> None:
    assert create_task_result("t1", RECORD) == {
        "resultType": "task",
        "taskId": "t1",
        "status": "working",
        "createdAt": "2025-11-25T10:30:00.000Z",
        "lastUpdatedAt": "2025-11-25T10:30:00.000Z",
        "ttlMs": 60_000,
        "pollIntervalMs": 500,
    }


def test_a_running_stream_is_working() -> None:
    task = get_task_result("t1", RECORD, StreamView(exists=True))
    assert task["resultType"] == "complete" and task["status"] == "working"
    assert not {"result", "error", "statusMessage"} & task.keys()


def test_a_result_even_with_is_error_is_completed_with_the_result() -> None:
    for is_error in (False, True):
        result = {"content": [{"type": "text", "text": "r"}], "isError": is_error}
        view = StreamView(exists=True, final=frame({"jsonrpc": "2.0", "id": 1, "result": result}))
        task = get_task_result("t1", RECORD.ended(RECORD.created_at + 2), view)
        assert task["status"] == "completed" and task["result"] == result and "error" not in task
        assert task["lastUpdatedAt"] == "2025-11-25T10:30:02.000Z"


def test_a_json_rpc_error_is_failed_with_the_error() -> None:
    error = {"code": -32603, "message": "API rate limit exceeded"}
    task = get_task_result(
        "t1", RECORD, StreamView(exists=True, final=frame({"jsonrpc": "2.0", "id": 1, "error": error}))
    )
    assert task["status"] == "failed" and task["error"] == error and "result" not in task
    assert task["statusMessage"] == "API rate limit exceeded"


def test_an_unreadable_or_lost_answer_is_failed_not_a_crash() -> None:
    for final in (b"data: not json\n\n", b"event: message\ndata: []\n\n", b"", b'data: {"error": 3}\n\n'):
        status, payload = outcome(final)
        assert status == "failed" and payload["code"] == -32603
    lost = get_task_result("t1", RECORD, StreamView(exists=True, final_lost=True))
    assert lost["status"] == "failed" and lost["error"]["code"] == -32603


def test_an_answer_split_over_several_data_lines_is_read() -> None:
    data = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"a": 1}}, indent=1).encode()
    assert outcome(encode_payload(data)) == ("completed", {"a": 1})


def test_cancelled_expired_or_gone_without_an_answer_is_cancelled() -> None:
    cancelled = RECORD.cancelled(RECORD.created_at + 3)
    for record, view in (
        (cancelled, StreamView(exists=True)),
        (cancelled, StreamView(exists=False)),
        (RECORD, StreamView(exists=True, expired=True)),
        (RECORD, StreamView(exists=False)),
    ):
        task = get_task_result("t1", record, view)
        assert task["status"] == "cancelled" and task["statusMessage"], (record, view)
        assert not {"result", "error"} & task.keys()
    assert get_task_result("t1", cancelled, StreamView(exists=False))["lastUpdatedAt"].startswith(
        "2025-11-25T10:30:03"
    )


def test_an_answer_recorded_before_the_cancel_took_effect_wins() -> None:
    view = StreamView(exists=True, final=frame({"jsonrpc": "2.0", "id": 1, "result": {"content": []}}))
    assert get_task_result("t1", RECORD.cancelled(RECORD.created_at + 1), view)["status"] == "completed"


def test_a_task_whose_node_is_gone_is_failed_unless_cancelled_first() -> None:
    gone = StreamView(exists=True, owner_gone=True)
    assert gone.ended and not StreamView(exists=True).ended
    task = get_task_result("t1", RECORD, gone)
    assert task["status"] == "failed" and "result" not in task
    assert task["error"]["code"] == -32603 and task["statusMessage"] == task["error"]["message"]
    assert "stopped" in task["error"]["message"]
    ended = get_task_result("t1", RECORD.ended(RECORD.created_at + 2), gone)
    assert ended["lastUpdatedAt"].startswith("2025-11-25T10:30:02")
    assert get_task_result("t1", RECORD.cancelled(RECORD.created_at + 1), gone)["status"] == "cancelled"


def test_an_input_round_answer_does_not_end_the_task() -> None:
    answer = frame({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "input_required"}})
    assert not StreamView(exists=True, final=answer, input_round={"resultType": "input_required"}).ended
    assert StreamView(exists=True, final=answer).ended


# ---------------------------------------------------------------------------- negotiation
def test_declaring_the_extension() -> None:
    assert declares({"extensions": {EXTENSION: {}}})
    for capabilities in (
        {},
        None,
        [],
        {"extensions": []},
        {"extensions": {EXTENSION: True}},
        {"extensions": {"x": {}}},
    ):
        assert not declares(capabilities), capabilities


def test_the_app_does_not_see_the_declaration() -> None:
    meta = {
        CLIENT_CAPABILITIES_META: {"extensions": {EXTENSION: {}, "other": {"a": 1}}, "elicitation": {}},
        "k": 1,
    }
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t", "_meta": meta}}
    plain = stripped(message)
    assert plain is not None
    assert plain["params"]["_meta"] == {
        CLIENT_CAPABILITIES_META: {"extensions": {"other": {"a": 1}}, "elicitation": {}},
        "k": 1,
    }
    assert message["params"]["_meta"][CLIENT_CAPABILITIES_META]["extensions"][EXTENSION] == {}, (
        "the original is untouched"
    )
    only = stripped(
        {"id": 1, "params": {"_meta": {CLIENT_CAPABILITIES_META: {"extensions": {EXTENSION: {}}}}}}
    )
    assert only is not None and only["params"]["_meta"][CLIENT_CAPABILITIES_META] == {}
    for untouched in (
        {"id": 1},
        {"id": 1, "params": []},
        {"id": 1, "params": {"_meta": {CLIENT_CAPABILITIES_META: {}}}},
    ):
        assert stripped(untouched) is None


def test_the_missing_capability_error_names_the_extension() -> None:
    assert missing_capability(7) == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {
            "code": -32021,
            "message": "Missing required client capability",
            "data": {"requiredCapabilities": {"extensions": {EXTENSION: {}}}},
        },
    }


# ---------------------------------------------------------------------------- the advertisement
def run(answer: AdvertisingAnswer, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [out for message in messages for out in answer.feed(message)]


def start(content_type: bytes, *extra: tuple[bytes, bytes]) -> dict[str, Any]:
    return {
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"content-type", content_type), *extra],
    }


def body(data: bytes, more: bool = False) -> dict[str, Any]:
    return {"type": "http.response.body", "body": data, "more_body": more}


ANSWER = {
    "jsonrpc": "2.0",
    "id": 1,
    "result": {"capabilities": {"tools": {}}, "protocolVersion": "2025-11-25"},
}


def test_a_json_answer_in_chunks_is_advertised_with_its_length_recomputed() -> None:
    raw = json.dumps(ANSWER).encode()
    out = run(
        AdvertisingAnswer(1),
        [
            start(b"application/json", (b"content-length", str(len(raw)).encode())),
            body(raw[:10], True),
            body(raw[10:]),
        ],
    )
    assert [m["type"] for m in out] == ["http.response.start", "http.response.body"]
    rewritten = json.loads(out[1]["body"])
    assert rewritten["result"]["capabilities"] == {"tools": {}, "extensions": {EXTENSION: {}}}
    assert dict(out[0]["headers"])[b"content-length"] == str(len(out[1]["body"])).encode()


def test_an_sse_answer_keeps_its_ids_and_line_ends_and_only_the_answer_changes() -> None:
    note = b'event: message\r\ndata: {"jsonrpc":"2.0","method":"notifications/message"}\r\n\r\n'
    answer = b"id: abc:2\r\nevent: message\r\ndata: " + json.dumps(ANSWER).encode() + b"\r\n\r\n"
    stream = b"id: abc:0\r\nretry: 100\r\ndata: \r\n\r\n" + note + answer
    out = run(
        AdvertisingAnswer(1),
        [start(b"text/event-stream"), body(stream[:30], True), body(stream[30:-7], True), body(stream[-7:])],
    )
    sent = b"".join(m["body"] for m in out[1:])
    assert sent.startswith(
        b"id: abc:0\r\nretry: 100\r\ndata: \r\n\r\n" + note + b"id: abc:2\r\nevent: message\r\ndata: "
    )
    data = sent.split(b"\r\n")[-3]
    assert json.loads(data[6:])["result"]["capabilities"]["extensions"] == {EXTENSION: {}}
    assert out[-1]["more_body"] is False


def test_answers_that_are_not_the_request_pass_untouched() -> None:
    other_id = json.dumps({**ANSWER, "id": 2}).encode()
    error = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "error": {"code": 1, "message": "no capabilities here"}}
    ).encode()
    for raw in (
        other_id,
        error,
        b'not json {"capabilities"',
        json.dumps({**ANSWER, "result": {"capabilities": 3}}).encode(),
    ):
        out = run(AdvertisingAnswer(1), [start(b"application/json"), body(raw)])
        assert out[1]["body"] == raw
    refusal = {
        "type": "http.response.start",
        "status": 404,
        "headers": [(b"content-type", b"application/json")],
    }
    assert run(AdvertisingAnswer(1), [refusal, body(b"{}")]) == [refusal, body(b"{}")]


def test_what_is_too_large_to_hold_goes_out_as_it_came() -> None:
    big = b'{"capabilities":' + b" " * 200 + b"{}}"
    out = run(
        AdvertisingAnswer(1, limit=100), [start(b"application/json"), body(big[:150], True), body(big[150:])]
    )
    assert b"".join(m.get("body", b"") for m in out) == big
    frame_of = b"data: " + big + b"\n\n"
    out = run(
        AdvertisingAnswer(1, limit=100),
        [start(b"text/event-stream"), body(frame_of[:150], True), body(frame_of[150:])],
    )
    assert b"".join(m.get("body", b"") for m in out) == frame_of


# ---------------------------------------------------------------------------- routing headers
def test_header_values_decode_plain_and_base64() -> None:
    assert decode_header_value("abc.DEF-_") == "abc.DEF-_"
    encoded = "=?base64?" + base64.b64encode("tâche".encode()).decode() + "?="
    assert decode_header_value(encoded) == "tâche"
    assert decode_header_value("=?base64?***?=") is None
    assert decode_header_value("caf\u00e9") is None and decode_header_value("a\nb") is None


def test_mcp_name_must_equal_the_task_id() -> None:
    modern, legacy = "2026-07-28", "2025-11-25"
    assert routing_problem(modern, "tasks/get", "t1", ["tasks/get"], ["t1"]) is None
    assert routing_problem(modern, "tasks/get", "t1", ["tasks/get"], ["=?base64?dDE=?="]) is None
    assert routing_problem(legacy, "tasks/get", "t1", [], []) is None, "2025 clients need not send them"
    for methods, names in (
        (["tasks/get"], ["t2"]),
        (["tasks/get"], []),
        ([], ["t1"]),
        (["tasks/cancel"], ["t1"]),
        (["tasks/get", "tasks/get"], ["t1"]),
        (["tasks/get"], ["t1", "t1"]),
        (["tasks/get"], ["=?base64?!!?="]),
    ):
        assert routing_problem(modern, "tasks/get", "t1", methods, names), (methods, names)
    assert routing_problem(legacy, "tasks/get", "t1", [], ["t2"]), "a header that is sent must match"


def test_task_ids_are_bounded_strings() -> None:
    assert task_id_of({"taskId": "abc"}) == "abc"
    for params in ({}, {"taskId": 3}, {"taskId": ""}, {"taskId": "x" * 257}, {"taskId": None}):
        assert task_id_of(params) is None


# ---------------------------------------------------------------------------- policy
def test_the_task_knobs_are_validated() -> None:
    Policy(task_after_s=0, task_required=True, task_ttl_s=5, task_poll_interval_ms=1)
    assert Policy().task_after_s is None and Policy().task_required is False
    for bad in (
        {"task_after_s": -1},
        {"task_after_s": float("inf")},
        {"task_required": True},
        {"task_required": 1, "task_after_s": 0},
        {"task_ttl_s": 0},
        {"task_ttl_s": None},
        {"task_poll_interval_ms": 0},
        {"task_poll_interval_ms": 1.5},
        {"task_poll_interval_ms": True},
    ):
        with pytest.raises((TypeError, ValueError)):
            Policy(**bad)
