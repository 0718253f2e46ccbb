"""A response recognised from its head (`wire.jsonrpc.response_id`), decoded only as a fallback.

`classify` must say what decoding the whole event would say, whatever the id's JSON type,
the spacing, the members' order, or text in the body that looks like a response's head;
and it must read the head alone when the event is written as the SDKs write responses.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_resume_asgi.core.stream import StreamCore
from mcp_resume_asgi.policy import Policy
from mcp_resume_asgi.wire import jsonrpc as p


def by_json(data: bytes) -> tuple[p.Kind, Any]:
    """What `classify` answered before the head was read: the whole event decoded."""
    try:
        message = json.loads(data)
    except (ValueError, RecursionError):
        return p.Kind.OTHER, None
    if not isinstance(message, dict) or "id" not in message:
        return p.Kind.NOTIFICATION if isinstance(message, dict) else p.Kind.OTHER, None
    if "method" in message:
        return p.Kind.SERVER_REQUEST, message["id"]
    if "result" in message or "error" in message:
        return p.Kind.RESPONSE, message["id"]
    return p.Kind.OTHER, None


def same(got: tuple[p.Kind, Any], expected: tuple[p.Kind, Any]) -> None:
    """Equal, and of the same type (1, 1.0 and True are equal in Python, not on the wire)."""
    assert got == expected
    assert type(got[1]) is type(expected[1])


IDS: list[Any] = [
    0,
    1,
    7,
    -3,
    2**63,
    10**25,  # more digits than the head is read for
    1.5,
    1.0,
    1e3,
    True,
    False,
    None,
    "",
    "abc",
    "req-1",
    "a,",
    'a,"result"',
    'a"b',
    "a\\",
    "\\",
    "é",
    "日本",
    "tab\there",
    "\x7f",
    "\ud800",  # a lone surrogate: JSON can carry it escaped
    [1],
    {"a": 1},
]
RESULT = {"content": [{"type": "text", "text": 'x,"result":1 {"jsonrpc":"2.0","id":1,"result":{}}'}]}


def compact(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")


def spellings(message: dict[str, Any]) -> list[bytes]:
    """The same message written several ways: compact (as the SDKs do), escaped, spaced, indented."""
    return [
        compact(message),
        json.dumps(message, separators=(",", ":")).encode(),  # ensure_ascii: non-ASCII escaped
        json.dumps(message).encode(),  # Python's default spacing
        json.dumps(message, indent=2).encode(),
        b" " + compact(message),
        compact(message) + b"\n",
        b"\t" + compact(message) + b" ",
    ]


@pytest.mark.parametrize("request_id", IDS, ids=repr)
@pytest.mark.parametrize("member", ["result", "error"])
def test_a_response_is_classified_as_decoding_it_would(request_id: Any, member: str) -> None:
    body = RESULT if member == "result" else {"code": -32000, "message": 'no,"result"'}
    message = {"jsonrpc": "2.0", "id": request_id, member: body}
    for data in spellings(message):
        same(p.classify(data), by_json(data))
    reordered = {"id": request_id, "jsonrpc": "2.0", member: body}
    for data in spellings(reordered):
        same(p.classify(data), by_json(data))


@pytest.mark.parametrize("request_id", IDS, ids=repr)
def test_a_server_request_and_a_notification_are_not_taken_for_responses(request_id: Any) -> None:
    request = {"jsonrpc": "2.0", "id": request_id, "method": "elicitation/create", "params": RESULT}
    notification = {"jsonrpc": "2.0", "method": "notifications/progress", "params": RESULT}
    for message in (request, notification):
        for data in spellings(message):
            same(p.classify(data), by_json(data))
            assert p.classify(data)[0] is not p.Kind.RESPONSE


@pytest.mark.parametrize(
    "request_id", [0, 1, -3, 2**63, "", "abc", ",a", 'a"b', "a\\", "é", "\ud800"], ids=repr
)
@pytest.mark.parametrize("member", ["result", "error"])
def test_the_compact_form_is_read_from_its_head(request_id: Any, member: str) -> None:
    data = compact({"jsonrpc": "2.0", "id": request_id, member: RESULT})
    found = p.response_id(data)
    assert found is not None and found[0] == request_id and type(found[0]) is type(request_id)


@pytest.mark.parametrize(
    "data",
    [
        b'{"jsonrpc": "2.0", "id": 1, "result": {}}',  # spaced
        b'{"jsonrpc":"2.0","id":1,"result":{}}\n',  # not ending with its object
        b'{"jsonrpc":"2.0","id":1.0,"result":{}}',
        b'{"jsonrpc":"2.0","id":1e3,"result":{}}',
        b'{"jsonrpc":"2.0","id":01,"result":{}}',
        b'{"jsonrpc":"2.0","id":1_0,"result":{}}',
        b'{"jsonrpc":"2.0","id":+1,"result":{}}',
        b'{"jsonrpc":"2.0","id":-,"result":{}}',
        b'{"jsonrpc":"2.0","id":,"result":{}}',
        b'{"jsonrpc":"2.0","id":true,"result":{}}',
        b'{"jsonrpc":"2.0","id":null,"error":{}}',
        b'{"jsonrpc":"2.0","id":"a,","result":{}}',  # the id holds `,"`: cut short, decoded instead
        b'{"jsonrpc":"2.0","id":"a"b","result":{}}',
        b'{"jsonrpc":"2.0","id":"a\tb","result":{}}',
        b'{"jsonrpc":"2.0","id":"' + b"9" * 30 + b'","result":{}}',
        b'{"jsonrpc":"2.0","id":' + b"9" * 30 + b',"result":{}}',
        b'{"jsonrpc":"2.0","id":[1,"x"],"result":{}}',
        b'{"jsonrpc":"2.0","id":1,"method":"ping","result":{}}',
        b'{"jsonrpc":"2.0","id":1,"results":{}}',
        b'{"jsonrpc":"2.0","id":1}',
    ],
)
def test_anything_else_is_left_to_decoding(data: bytes) -> None:
    if data.startswith(b'{"jsonrpc":"2.0","id":"' + b"9"):
        assert p.response_id(data) == ("9" * 30,)  # (a plain string id, however long)
    else:
        assert p.response_id(data) is None
    same(p.classify(data), by_json(data))


@pytest.mark.parametrize(
    "data",
    [
        # A notification quoting a response in its text (quotes escaped, as JSON must).
        compact({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": RESULT}}),
        compact(
            {"jsonrpc": "2.0", "method": "log", "params": {"text": '{"jsonrpc":"2.0","id":1,"result":{}}'}}
        ),
        # Not JSON at all, holding a response's head after its start.
        b'x{"jsonrpc":"2.0","id":1,"result":{}}',
        b'hello {"jsonrpc":"2.0","id":1,"result":{}}',
        # A server request whose params hold such text, with the same id.
        compact(
            {"jsonrpc": "2.0", "id": 1, "method": "sampling/createMessage", "params": {"t": ',"result":'}}
        ),
        # A response whose id is itself an object that looks like a response.
        b'{"jsonrpc":"2.0","id":{"jsonrpc":"2.0","id":1,"result":{}},"result":{}}',
    ],
)
def test_a_body_that_merely_contains_a_response_head_is_not_taken_for_one(data: bytes) -> None:
    same(p.classify(data), by_json(data))
    assert p.classify(data) != (p.Kind.RESPONSE, 1)


def test_a_body_starting_as_a_response_is_taken_for_one_unread() -> None:
    """What the head promises is not checked further: broken JSON after a response's head
    is taken as that response (its client could not read it either way)."""
    data = b'{"jsonrpc":"2.0","id":5,"result":{"text":"cut short"]}'
    assert p.classify(data) == (p.Kind.RESPONSE, 5)
    assert by_json(data) == (p.Kind.OTHER, None)


JSON_IDS = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.text(max_size=12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


@given(
    request_id=JSON_IDS,
    member=st.sampled_from(["result", "error", "method", "params"]),
    value=JSON_VALUES,
    extra=st.dictionaries(st.sampled_from(["result", "error", "method", "x"]), JSON_VALUES, max_size=2),
)
def test_classify_agrees_with_decoding_on_any_message(
    request_id: Any, member: str, value: Any, extra: dict[str, Any]
) -> None:
    message = {"jsonrpc": "2.0", "id": request_id, member: value, **extra}
    data = compact(message)
    got, expected = p.classify(data), by_json(data)
    if expected[0] is p.Kind.SERVER_REQUEST and p.response_id(data) is not None:
        # A message with both a method and a result, the result first: read from its head as a
        # response (the rest is not read). No JSON-RPC message is both.
        assert got == (p.Kind.RESPONSE, request_id)
        return
    same(got, expected)


def core(request_id: Any) -> StreamCore:
    return StreamCore(Policy(), version="2025-11-25", is_request=True, request_id=request_id)


@pytest.mark.parametrize("request_id", [1, 0, -3, "req-1", "a,", 'a"b', "é"], ids=repr)
def test_the_core_finds_its_requests_final_answer(request_id: Any) -> None:
    c = core(request_id)
    other = compact({"jsonrpc": "2.0", "id": f"{request_id}x", "result": {}})
    note = compact({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}})
    quoting = compact(
        {"jsonrpc": "2.0", "method": "m", "params": {"t": compact({"id": request_id}).decode()}}
    )
    answer = compact({"jsonrpc": "2.0", "id": request_id, "result": RESULT})
    recorded = c.record([(b"p", other), (b"p", note), (b"p", quoting)])
    assert recorded is not None and recorded.final_seq is None and c.final_seq is None
    recorded = c.record([(b"p", answer), (b"p", note)])
    assert recorded is not None and recorded.final_seq == 4 and recorded.final_data == answer
    assert [seq for seq, _ in recorded.batch] == [4]  # nothing after the final answer


def test_the_core_does_not_take_an_equal_id_of_another_type_read_from_the_head() -> None:
    c = core(1)
    recorded = c.record([(b"p", b'{"jsonrpc":"2.0","id":"1","result":{}}')])
    assert recorded is not None and recorded.final_seq is None
    recorded = c.record([(b"p", b'{"jsonrpc":"2.0","id":1,"result":{}}')])
    assert recorded is not None and recorded.final_seq == 2
