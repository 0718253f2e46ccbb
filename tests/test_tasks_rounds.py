"""A task's input requests and answers (`tasks/inputs.py`, `record.detailed_task`) without an event loop."""

from __future__ import annotations

import json
from typing import Any

from mcp_resume_asgi.tasks.inputs import (
    MAX_INPUTS,
    Pending,
    mrtr_of,
    next_round,
    outstanding,
    plan_update,
    round_key,
    stream_key,
)
from mcp_resume_asgi.tasks.record import StreamView, TaskRecord, detailed_task

ELICIT = {"method": "elicitation/create", "params": {"message": "Name?", "requestedSchema": {}}}
SAMPLE = {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}}
ASKING = {
    "resultType": "input_required",
    "inputRequests": {"name": ELICIT, "cap": SAMPLE},
    "requestState": "s1",
}
CALL = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "tools/call",
    "params": {"name": "t", "arguments": {"x": 1}, "_meta": {"k": "v"}},
}


def record(**kw: Any) -> TaskRecord:
    return TaskRecord("s", "alice", 1000.0, 60_000, 100, "/mcp", "2026-07-28", **kw)


def final(result: dict[str, Any]) -> bytes:
    return b"event: message\ndata: " + json.dumps({"jsonrpc": "2.0", "id": 7, "result": result}).encode()


def test_an_input_required_result_is_recognised_and_anything_else_is_not() -> None:
    assert mrtr_of(ASKING) == ({"name": ELICIT, "cap": SAMPLE}, "s1")
    assert mrtr_of({"resultType": "input_required", "requestState": 5}) == ({}, None)
    for other in (None, [], {"content": []}, {"resultType": "complete"}, {"resultType": "task"}):
        assert mrtr_of(other) is None
    # Entries that are not request objects are not shown.
    assert mrtr_of({"resultType": "input_required", "inputRequests": {"a": 1, "b": ELICIT}}) == (
        {"b": ELICIT},
        None,
    )


def test_keys_are_unique_over_the_tasks_life() -> None:
    keys = {round_key(0, "name"), round_key(1, "name"), stream_key(0, 3), stream_key(1, 3), round_key(0, "3")}
    assert len(keys) == 5


def test_outstanding_shows_both_kinds_without_ids_and_leaves_out_answered_keys() -> None:
    asked = [(41, 3, {"jsonrpc": "2.0", "id": 41, **ELICIT}), (42, 5, {"jsonrpc": "2.0", "id": 42})]
    pending = outstanding(2, result=ASKING, asked=asked, answered=frozenset({"2/cap"}))
    assert set(pending) == {"2/name", "2#3"}, "a message without a method is no request"
    assert pending["2/name"] == Pending(ELICIT, app_key="name")
    assert pending["2#3"] == Pending(ELICIT, message_id=41)
    assert "id" not in pending["2#3"].request and "jsonrpc" not in pending["2#3"].request
    many = {"resultType": "input_required", "inputRequests": {str(i): ELICIT for i in range(200)}}
    assert len(outstanding(0, result=many)) == MAX_INPUTS
    assert outstanding(0, result={"content": []}) == {}


def test_an_update_takes_outstanding_keys_and_ignores_the_rest() -> None:
    pending = outstanding(0, result=ASKING, asked=[(9, 4, {"id": 9, **ELICIT})])
    plan = plan_update(pending, {"0/name": {"action": "accept"}, "0#4": {"action": "decline"}, "zzz": {}})
    assert plan.error is None and plan.ignored == ["zzz"]
    assert plan.kept == [("0/name", {"action": "accept"})]
    assert plan.to_app == [("0#4", {"jsonrpc": "2.0", "id": 9, "result": {"action": "decline"}})]
    # Answered (no longer outstanding) keys are ignored, even malformed.
    assert plan_update({}, {"0/name": "garbage"}).ignored == ["0/name"]
    for bad in (None, [], "x"):
        assert plan_update(pending, bad).error == "params.inputResponses must be an object"
    refused = plan_update(pending, {"0/name": {"action": "accept"}, "0#4": 3})
    assert refused.error is not None and "0#4" in refused.error


def test_the_next_round_waits_for_every_answer_and_carries_the_apps_keys_and_state() -> None:
    yes = {"action": "accept", "content": {"name": "Ada"}}
    assert next_round(CALL, 0, ASKING, {"0/name": yes}, "r1") is None
    assert next_round(CALL, 0, ASKING, {"0/name": yes, "1/cap": {}}, "r1") is None, "another round's answer"
    message = next_round(CALL, 0, ASKING, {"0/name": yes, "0/cap": {"role": "assistant"}}, "r1")
    assert message == {
        "jsonrpc": "2.0",
        "id": "r1",
        "method": "tools/call",
        "params": {
            "name": "t",
            "arguments": {"x": 1},
            "_meta": {"k": "v"},
            "inputResponses": {"name": yes, "cap": {"role": "assistant"}},
            "requestState": "s1",
        },
    }
    # A stale requestState of an earlier round is not carried into one without state.
    stale = {**CALL, "params": {**CALL["params"], "requestState": "old", "inputResponses": {"x": {}}}}
    stateless = {"resultType": "input_required", "inputRequests": {"name": ELICIT}}
    message = next_round(stale, 1, stateless, {"1/name": yes}, "r2")
    assert message is not None and "requestState" not in message["params"]
    assert message["params"]["inputResponses"] == {"name": yes}
    assert next_round(CALL, 0, {"content": []}, {}, "r1") is None


def test_a_round_that_asks_is_input_required_and_never_completed() -> None:
    view = StreamView(exists=True, final=final(ASKING), input_round=ASKING, inputs={"0/name": ELICIT})
    task = detailed_task("t1", record(ended_at=1001.0), view)
    assert task["status"] == "input_required" and task["inputRequests"] == {"0/name": ELICIT}
    assert "result" not in task and "requestState" not in task
    assert task["lastUpdatedAt"].startswith("1970-01-01T00:16:41")
    # Every request answered, the next round not yet issued: working.
    answered = StreamView(exists=True, final=final(ASKING), input_round=ASKING)
    assert detailed_task("t1", record(), answered)["status"] == "working"
    # Cancelled while it waits.
    assert detailed_task("t1", record(cancelled_at=1002.0), view)["status"] == "cancelled"
    # A running round's own requests (2025 revisions).
    running = StreamView(exists=True, inputs={"0#3": ELICIT})
    assert detailed_task("t1", record(), running)["status"] == "input_required"


def test_the_record_keeps_its_round_and_call_and_moves_to_the_next() -> None:
    first = record(call=CALL, ended_at=1001.0)
    assert first.current_stream == "s" and first.round == 0
    nxt = first.next_round("s2")
    assert nxt.current_stream == "s2" and nxt.round == 1 and nxt.ended_at is None and nxt.stream_id == "s"
    assert TaskRecord.decode(nxt.encode()) == nxt
    assert TaskRecord.decode(json.dumps({**json.loads(nxt.encode()), "round": "1"})) is None
    assert TaskRecord.decode(json.dumps({**json.loads(nxt.encode()), "call": [1]})) is None
    assert TaskRecord.decode(json.dumps({**json.loads(nxt.encode()), "current": 5})) is None
