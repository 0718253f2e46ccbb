"""How a retried task-creating call is answered (`tasks/retries.py`), decided on plain data."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mcp_resume_asgi.tasks.capability import CLIENT_CAPABILITIES_META, declares, stripped
from mcp_resume_asgi.tasks.record import EXTENSION, TaskRecord
from mcp_resume_asgi.tasks.retries import Answer, Found, as_sent, decide, rest_of_deadline
from mcp_resume_asgi.wire import jsonrpc as p

RECORD = TaskRecord("s1", None, 1.0, 60_000, 50, "/mcp", "2026-07-28")


def found(**changes: Any) -> Found:
    fields: dict[str, Any] = {
        "stream_id": "s1",
        "record": None,
        "running": True,
        "becoming_here": False,
        "owner_elsewhere": False,
    }
    return Found(**{**fields, **changes})


@pytest.mark.parametrize("running", [True, False])
@pytest.mark.parametrize("here", [True, False])
def test_a_call_that_became_a_task_is_answered_with_it_wherever_and_whenever(
    running: bool, here: bool
) -> None:
    assert decide(found(record=RECORD, running=running, becoming_here=here)) is Answer.TASK
    assert decide(found(record=RECORD, running=running, owner_elsewhere=not here)) is Answer.TASK


def test_a_record_of_another_stream_is_not_its_task() -> None:
    other = TaskRecord("s2", None, 1.0, 60_000, 50, "/mcp", "2026-07-28")
    assert decide(found(record=other, running=False)) is Answer.STREAM


def test_a_call_still_running_joins_here_is_relayed_elsewhere_and_else_gets_its_stream() -> None:
    assert decide(found(becoming_here=True)) is Answer.JOIN
    assert decide(found(owner_elsewhere=True)) is Answer.RELAY
    assert decide(found()) is Answer.STREAM  # e.g. its node is gone: the stream says what became of it


def test_a_call_that_ended_without_becoming_a_task_keeps_its_plain_result() -> None:
    assert decide(found(running=False, becoming_here=True)) is Answer.STREAM
    assert decide(found(running=False, owner_elsewhere=True)) is Answer.STREAM


def test_the_rest_of_the_deadline_counts_from_the_originals_arrival() -> None:
    assert rest_of_deadline(answer_by=10.0, now=9.25) == 0.75
    assert rest_of_deadline(answer_by=10.0, now=10.0) == 0.0
    assert rest_of_deadline(answer_by=10.0, now=42.0) == 0.0  # past: the task now


def _call(capabilities: dict[str, Any] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "progressToken": 7}
    if capabilities is not None:
        meta[CLIENT_CAPABILITIES_META] = capabilities
    params = {"name": "slow", "arguments": {"seconds": 1.5}, "_meta": meta}
    return {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": params}


@pytest.mark.parametrize(
    "capabilities",
    [
        {"extensions": {EXTENSION: {}}},
        {"elicitation": {}, "extensions": {EXTENSION: {}}},
        {"extensions": {"x.example/other": {"a": 1}, EXTENSION: {}}},
        {"extensions": {EXTENSION: {}, "x.example/other": {}}, "sampling": {}},
    ],
)
def test_a_relayed_retry_declares_the_extension_again_and_strips_to_the_same_call(
    capabilities: dict[str, Any],
) -> None:
    original = _call(capabilities)
    kept = copy.deepcopy(original)
    plain = stripped(original)
    assert plain is not None
    sent = as_sent(plain)
    assert declares(sent["params"]["_meta"][CLIENT_CAPABILITIES_META])
    again = stripped(sent)
    assert again is not None and p.dumps(again) == p.dumps(plain), "the same digest as the key's first call"
    assert original == kept and sent != plain, "nothing edited in place"


def test_a_call_without_per_request_capabilities_is_relayed_as_it_is() -> None:
    legacy = _call(None)  # a 2025 session declared the extension at initialize
    assert as_sent(legacy) is legacy
