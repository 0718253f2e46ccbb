"""The REST face's sans-IO rules (SEP-1597), without an event loop: routes, problems, the
tool-call resource, its ETag and the conditional-request decisions."""

from __future__ import annotations

import base64
import json
from typing import Any

import anyio
import pytest

from mcp_resume_asgi.rest.calls import decode_cursor, encode_cursor, index_member
from mcp_resume_asgi.rest.json_text import NotAcceptedJSON, depth_of, dumps, parse_app, parse_client, repaired
from mcp_resume_asgi.rest.mcp_client import AnswerReader
from mcp_resume_asgi.rest.problems import from_http, from_jsonrpc, invalid_arguments, problem
from mcp_resume_asgi.rest.resource import (
    CallStatus,
    build,
    first_input,
    not_modified,
    precondition_status,
    progress_of,
    retry_after_s,
    state_of_answer,
    state_of_task,
    valid_idempotency_key,
)
from mcp_resume_asgi.rest.routes import BadRoute, Op, Route, match
from mcp_resume_asgi.rest.single_flight import SingleFlight
from mcp_resume_asgi.wire.headers import encode_header_value, param_headers

# ---------------------------------------------------------------------------------------- routes


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("GET", "/mcp/tools", Route(Op.TOOLS)),
        ("GET", "/mcp/tools/", Route(Op.TOOLS)),
        ("PUT", "/mcp/tools/echo/calls/c1", Route(Op.CALL_PUT, tool="echo", call_id="c1")),
        ("GET", "/mcp/tools/echo/calls/c1", Route(Op.CALL_GET, tool="echo", call_id="c1")),
        ("HEAD", "/mcp/tools/echo/calls/c1", Route(Op.CALL_GET, tool="echo", call_id="c1")),
        ("POST", "/mcp/tools/echo/calls/c1/advance", Route(Op.CALL_ADVANCE, tool="echo", call_id="c1")),
        ("POST", "/mcp/tools/echo/calls/c1/cancel", Route(Op.CALL_CANCEL, tool="echo", call_id="c1")),
        ("GET", "/mcp/tools/echo/calls", Route(Op.CALLS, tool="echo")),
        ("GET", "/mcp/prompts", Route(Op.PROMPTS)),
        ("POST", "/mcp/prompts/greet", Route(Op.PROMPT, name="greet")),
        ("GET", "/mcp/resources", Route(Op.RESOURCES)),
        ("GET", "/mcp/resources/file%3A%2F%2F%2Fa%2Fb.txt", Route(Op.RESOURCE, name="file:///a/b.txt")),
        ("GET", "/mcp/resources-templates", Route(Op.TEMPLATES)),
        ("POST", "/mcp/complete", Route(Op.COMPLETE)),
        ("GET", "/mcp/openapi.json", Route(Op.OPENAPI)),
        # Encoded slashes and friendly ids stay inside their segment.
        (
            "PUT",
            "/mcp/tools/a%2Fb/calls/ada%40example.com%20%231",
            Route(Op.CALL_PUT, tool="a/b", call_id="ada@example.com #1"),
        ),
        ("GET", "/api/mcp/tools", None),
    ],
)
def test_routes_match_the_seps_table(method: str, path: str, expected: Route | None) -> None:
    base = "/api/x" if expected is None else "/mcp"
    assert match(base, method, path) == expected


@pytest.mark.parametrize(
    "path",
    [
        "/mcp",
        "/mcp/",
        "/mcp/streams/abc",
        "/mcp/tools/echo",
        "/mcp/tools/echo/other",
        "/mcp/nothing",
        "/mcp/tools/echo/calls/c1/pause",
        "/mcp/tools/echo/calls/c1/advance/x",
        "/mcpx/tools",
    ],
)
def test_paths_that_are_not_the_faces_go_to_the_app(path: str) -> None:
    assert match("/mcp", "GET", path) is None
    assert match("/mcp", "POST", path) is None


def test_a_known_path_with_another_method_is_405_with_allow() -> None:
    assert match("/mcp", "POST", "/mcp/tools") == BadRoute(405, "POST is not allowed here", ("GET",))
    refused = match("/mcp", "DELETE", "/mcp/tools/echo/calls/c1")
    assert isinstance(refused, BadRoute) and refused.status == 405 and refused.allow == ("GET", "PUT")
    advance = match("/mcp", "GET", "/mcp/tools/echo/calls/c1/advance")
    assert isinstance(advance, BadRoute) and advance.allow == ("POST",)


@pytest.mark.parametrize(
    "path",
    [
        "/mcp/tools/%FF/calls/c1",
        "/mcp/tools/echo/calls/a%0Ab",
        "/mcp/tools/echo/calls/" + "x" * 257,
        "/mcp/tools/echo/calls/%",
    ],
)
def test_a_segment_that_cannot_name_anything_is_400(path: str) -> None:
    refused = match("/mcp", "PUT", path)
    if path.endswith("%"):  # a lone % is kept as it is (unquote's rule): a valid, odd id
        assert refused == Route(Op.CALL_PUT, tool="echo", call_id="%")
        return
    assert isinstance(refused, BadRoute) and refused.status == 400, refused


# -------------------------------------------------------------------------------------- problems


def test_a_problem_is_rfc_9457_json() -> None:
    p = problem(428, "If-Match is required", callId="c1")
    body = json.loads(p.body())
    assert body == {
        "type": "about:blank",
        "title": "Precondition Required",
        "status": 428,
        "detail": "If-Match is required",
        "callId": "c1",
    }
    assert (b"content-type", b"application/problem+json") in p.headers()


@pytest.mark.parametrize(
    ("error", "status"),
    [
        ({"code": -32601, "message": "Method not found"}, 404),
        ({"code": -32602, "message": "Unknown tool: nope"}, 404),
        ({"code": -32602, "message": "Prompt not found"}, 404),
        ({"code": -32002, "message": "Resource missing"}, 404),
        ({"code": -32602, "message": "bad arguments"}, 400),
        ({"code": -32600, "message": "bad"}, 400),
        ({"code": -32603, "message": "boom"}, 502),
        ({"code": -32042, "message": "app's own"}, 400),
        ({"code": -32000, "message": "Too many tasks", "data": {"maxTasks": 5}}, 429),
        ("not an error", 502),
    ],
)
def test_json_rpc_errors_map_to_statuses(error: Any, status: int) -> None:
    p = from_jsonrpc(error, "tool 'x'")
    assert p.status == status
    if isinstance(error, dict):
        assert p.extra["error"] == error


def test_the_apps_http_refusals_keep_what_a_client_needs() -> None:
    challenge = (b"WWW-Authenticate", b'Bearer error="invalid_token"')
    p = from_http(401, [challenge, (b"content-type", b"application/json")], b'{"error":"invalid_token"}', "x")
    assert p.status == 401 and p.detail == "invalid_token"
    assert (b"www-authenticate", challenge[1]) in p.headers()
    outage = from_http(503, [(b"retry-after", b"1")], b"", "x")
    assert outage.status == 503 and (b"retry-after", b"1") in outage.headers()
    other = from_http(500, [], b"<html>\x00", "x")
    assert other.status == 502 and "HTTP 500" in other.detail


def test_invalid_arguments_lists_the_reasons() -> None:
    p = invalid_arguments([{"pointer": "#/text", "detail": "1 is not of type 'string'"}])
    assert p.status == 400 and p.extra["errors"][0]["pointer"] == "#/text"
    assert p.detail.endswith("1 is not of type 'string'")


# -------------------------------------------------------------------------------------- resource

WORKING = {"taskId": "t", "status": "working", "pollIntervalMs": 1500}
ELICITING = {
    "taskId": "t",
    "status": "input_required",
    "inputRequests": {
        "0#4": {"method": "roots/list"},
        "1/answer": {"method": "elicitation/create", "params": {"message": "Delete a.txt?"}},
    },
}
SAMPLING = {
    "status": "input_required",
    "inputRequests": {"0#2": {"method": "sampling/createMessage", "params": {"maxTokens": 5}}},
}
RESULT = {"content": [{"type": "text", "text": "done"}], "isError": False, "resultType": "complete"}


@pytest.mark.parametrize(
    ("task", "status"),
    [
        (WORKING, CallStatus.RUNNING),
        (ELICITING, CallStatus.AWAITING_ELICITATION),
        (SAMPLING, CallStatus.AWAITING_SAMPLING),
        ({"status": "completed", "result": RESULT}, CallStatus.SUCCESS),
        ({"status": "completed", "result": {**RESULT, "isError": True}}, CallStatus.FAILED),
        ({"status": "failed", "error": {"code": -32042, "message": "no"}}, CallStatus.FAILED),
        ({"status": "cancelled"}, CallStatus.CANCELED),
        (
            {"status": "input_required", "inputRequests": {"0#1": {"method": "roots/list"}}},
            CallStatus.RUNNING,
        ),
    ],
)
def test_task_statuses_map_to_the_seps(task: dict[str, Any], status: CallStatus) -> None:
    assert state_of_task(task)["status"] is status


def test_the_resource_has_the_seps_shape() -> None:
    r = build("confirm", "c1", {"filename": "a.txt"}, state_of_task(ELICITING), {"progress": 1, "total": 3})
    assert list(r) == ["toolname", "id", "etag", "status", "request", "elicitationRequest", "progress"]
    assert r["status"] == "awaitingElicitationResult"
    assert r["elicitationRequest"] == {"message": "Delete a.txt?"}
    pending = first_input(ELICITING)
    assert pending is not None and pending.key == "1/answer", "roots/list is not a REST client's to answer"
    sampling = build("s", "c1", {}, state_of_task(SAMPLING))
    assert sampling["samplingRequest"] == {"maxTokens": 5} and "elicitationRequest" not in sampling


def test_outcomes_success_tool_error_and_json_rpc_error() -> None:
    ok = build("echo", "c", {}, state_of_answer({"result": RESULT}))
    assert ok["status"] == "success" and ok["result"] == {"content": RESULT["content"], "isError": False}
    assert "error" not in ok
    tool_error = state_of_answer(
        {"result": {**RESULT, "isError": True, "content": [{"type": "text", "text": "it broke"}]}}
    )
    assert tool_error["status"] is CallStatus.FAILED and tool_error["error"] == {"message": "it broke"}
    assert tool_error["result"]["isError"] is True, "the tool's own result is kept"
    rpc = state_of_answer({"error": {"code": -32042, "message": "no"}})
    assert rpc == {"status": CallStatus.FAILED, "error": {"code": -32042, "message": "no"}}


def test_the_etag_is_a_digest_of_the_state() -> None:
    one = build("echo", "c", {"a": 1}, {"status": CallStatus.RUNNING}, {"progress": 1})
    same = build("echo", "c", {"a": 1}, {"status": CallStatus.RUNNING}, {"progress": 1})
    moved = build("echo", "c", {"a": 1}, {"status": CallStatus.RUNNING}, {"progress": 2})
    assert one == same and one["etag"] != moved["etag"] and len(one["etag"]) == 20
    done = build("echo", "c", {"a": 1}, state_of_answer({"result": RESULT}), {"progress": 2})
    assert "progress" not in done, "a finished call's progress is over"


def test_progress_is_the_notifications_params_without_its_token() -> None:
    note = {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": "p", "progress": 2, "total": 3, "message": "m"},
    }
    assert progress_of(note) == {"progress": 2, "total": 3, "message": "m"}
    assert progress_of({"method": "notifications/message", "params": {}}) is None


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, False),
        ('"abc"', True),
        ("abc", True),
        ('W/"abc"', True),
        ('"x", "abc"', True),
        ("*", True),
        ('"abd"', False),
    ],
)
def test_if_none_match(header: str | None, expected: bool) -> None:
    assert not_modified(header, "abc") is expected


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, 428),
        ("", 428),
        ('"abc"', None),
        ('"x", "abc"', None),
        ("*", None),
        ('"abd"', 412),
        ('W/"abc"', 412),
    ],
)
def test_if_match(header: str | None, expected: int | None) -> None:
    assert precondition_status(header, "abc") == expected


def test_idempotency_keys_and_retry_after() -> None:
    assert valid_idempotency_key("8f0c-uuid") and not valid_idempotency_key(None)
    assert (
        not valid_idempotency_key("") and not valid_idempotency_key("é") and not valid_idempotency_key("a\nb")
    )
    assert not valid_idempotency_key("x" * 256)
    assert retry_after_s(50) == 1 and retry_after_s(1500) == 2 and retry_after_s("x") == 1


# ---------------------------------------------------------------------------- the answer reader


def test_the_answer_reader_finds_the_response_in_sse_and_json() -> None:
    sse = AnswerReader("r1", 1 << 20)
    assert not sse.feed(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
    )
    progress = b'data: {"jsonrpc":"2.0","method":"notifications/progress","params":{}}\n\n'
    assert not sse.feed({"type": "http.response.body", "body": progress, "more_body": True})
    answer = b'id: 7\ndata: {"jsonrpc":"2.0","id":"r1","result":{"ok":true}}\n\n'
    assert sse.feed({"type": "http.response.body", "body": answer[:20], "more_body": True}) is False
    assert sse.feed({"type": "http.response.body", "body": answer[20:], "more_body": True})
    assert sse.answer().result == {"ok": True}
    js = AnswerReader("r2", 1 << 20)
    js.feed(
        {"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"application/json")]}
    )
    js.feed(
        {
            "type": "http.response.body",
            "body": b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Session not found"}}',
        }
    )
    refused = js.answer()
    assert refused.status == 404 and refused.error == {"code": -32600, "message": "Session not found"}
    problem_ = refused.problem("x")
    assert problem_ is not None and problem_.status == 404


def test_the_answer_reader_is_bounded() -> None:
    reader = AnswerReader("r", 100)
    reader.feed(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
    )
    reader.feed({"type": "http.response.body", "body": b"x" * 101})
    answer = reader.answer()
    assert answer.status == 502 and b"larger than 100 bytes" in answer.body


# ------------------------------------------------------------------------------------ headers


def test_parameters_annotated_x_mcp_header_are_mirrored() -> None:
    schema = {
        "type": "object",
        "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "urgent": {"type": "boolean", "x-mcp-header": "Urgent"},
            "where": {"type": "object", "properties": {"zone": {"type": "integer", "x-mcp-header": "Zone"}}},
            "list": {"type": "array", "x-mcp-header": "List"},
            "plain": {"type": "string"},
        },
    }
    args = {"region": "Zürich", "urgent": False, "where": {"zone": 3}, "list": [1], "plain": "x"}
    assert dict(param_headers(schema, args)) == {
        b"mcp-param-region": encode_header_value("Zürich").encode(),
        b"mcp-param-urgent": b"false",
        b"mcp-param-zone": b"3",
    }
    assert encode_header_value("Zürich").startswith("=?base64?") and encode_header_value("eu") == "eu"
    assert param_headers(schema, {}) == [], "an absent argument has no header"
    assert param_headers({"properties": {"a": {"x-mcp-header": "bad token"}}}, {"a": "x"}) == []
    assert param_headers("not a schema", {"a": 1}) == []


# ---------------------------------------------------------------------------------------- JSON text


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"a":"\\ud800"}', "lone surrogate"),
        (b'{"a":"\\uDFFF"}', "lone surrogate"),
        (b'{"a":["x",{"b":"\\ud83d"}]}', "lone surrogate"),
        (b'{"\\ud800":1}', "lone surrogate"),
        (b'{"a":"\xed\xa0\x80"}', "not UTF-8"),
        (b'{"a":"\xe9"}', "not UTF-8"),
        (b'{"a":NaN}', "NaN"),
        (b'{"a":Infinity}', "Infinity"),
        (b'{"a":-Infinity}', "-Infinity"),
        (b'{"a":1e999}', "too large"),
        (b'{"a":-1E400}', "too large"),
        (b"[" * 129 + b"]" * 129, "deeper than 128"),
        (b"[" * 100_000, "deeper than 128"),
        (b'{"a":' + b"9" * 5000 + b"}", "not JSON"),
        (b"\xef\xbb\xbf{}", "not JSON"),
        ('{"a":1}'.encode("utf-16"), "not UTF-8"),
        (b'{"a":1}x', "not JSON"),
    ],
)
def test_a_clients_json_that_no_wire_carries_is_refused_with_the_reason(body: bytes, reason: str) -> None:
    with pytest.raises(NotAcceptedJSON) as refused:
        parse_client(body)
    assert reason in refused.value.detail


@pytest.mark.parametrize(
    ("body", "value"),
    [
        (b'{"a":"\\ud83d\\ude00"}', {"a": "\U0001f600"}),  # a pair is one character
        ('{"a":"é ✓ \U0001f600"}'.encode(), {"a": "é ✓ \U0001f600"}),
        (
            b'{"a":1e308,"b":-0.0,"c":123456789012345678901234567890}',
            {"a": 1e308, "b": -0.0, "c": 123456789012345678901234567890},
        ),
        (b"[" * 128 + b"]" * 128, json.loads(b"[" * 128 + b"]" * 128)),
        (b'"NaN"', "NaN"),
    ],
)
def test_a_clients_json_that_is_json_is_taken(body: bytes, value: Any) -> None:
    assert parse_client(body) == value


def test_the_apps_json_is_repaired_not_refused() -> None:
    value = parse_app(
        b'{"n":NaN,"i":-Infinity,"big":1e999,"s":"a\\ud800b","\\udc00":1,"raw":"\xed\xa0\x80","ok":"\\ud83d\\ude00"}'
    )
    assert value == {
        "n": None,
        "i": None,
        "big": None,
        "s": "a\ufffdb",
        "\ufffd": 1,
        "raw": "\ufffd" * 3,
        "ok": "\U0001f600",
    }
    with pytest.raises(ValueError):
        parse_app(b"{not json")


def test_what_the_face_writes_is_standard_json_whatever_it_holds() -> None:
    written = dumps({"n": float("nan"), "s": "\ud800", "l": [float("inf"), ("t", "\udfff")], "ok": "é"})
    assert written == '{"n":null,"s":"\ufffd","l":[null,["t","\ufffd"]],"ok":"é"}'.encode()
    assert dumps({"b": 1, "a": 2}, sort_keys=True) == b'{"a":2,"b":1}'
    deep: Any = "\ud800"
    for _ in range(50_000):
        deep = [deep]
    fixed = repaired(deep)  # iterative: deeper than the stack allows
    assert depth_of(fixed) == 50_000
    while isinstance(fixed, list):
        fixed = fixed[0]
    assert fixed == "\ufffd"


def test_listing_cursors_are_the_faces_own_or_refused() -> None:
    member = index_member("call-1")
    cursor = encode_cursor(1_800_000_000.5, member)
    assert decode_cursor(cursor) == (1_800_000_000.5, member)

    def encoded(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    for raw in (
        b'[1,"\\ud800"]',
        b'[1,"\xed\xa0\x80"]',
        b'[1,"' + member.encode()[:-1] + b'\\u00e9"]',
        b'[1,"' + member.upper().encode() + b'"]',
        b'[NaN,"' + member.encode() + b'"]',
        b'[1e999,"' + member.encode() + b'"]',
        b'[-1,"' + member.encode() + b'"]',
        b'[1e12,"' + member.encode() + b'"]',
        b'[true,"' + member.encode() + b'"]',
        b'[1,"' + member.encode() + b'",3]',
        b"[" * 300,
    ):
        assert decode_cursor(encoded(raw)) is None, raw
    for text in ("", "=", "!!!!", "\ud800", "é" * 4, "A" * 600):
        assert decode_cursor(text) is None, text


def test_the_apps_413_421_and_431_are_the_callers() -> None:
    assert from_http(413, [], b"Request body too large", "tools/call").status == 413
    assert from_http(421, [], b"Invalid Host header", "tools/list").status == 421
    assert from_http(431, [], b"", "tools/list").status == 431
    assert from_http(406, [], b"", "tools/list").status == 502  # the face's own request: the gateway's fault


# ---------------------------------------------------------------------------------------- single flight


@pytest.mark.anyio
async def test_a_single_flight_runs_once_for_concurrent_callers_and_never_shares_a_failure() -> None:
    flights: SingleFlight[int] = SingleFlight()
    runs: list[str] = []
    release = anyio.Event()

    async def work(tag: str, fail: bool = False) -> int:
        runs.append(tag)
        await release.wait()
        if fail:
            raise RuntimeError("the run failed")
        return len(runs)

    results: list[int] = []
    async with anyio.create_task_group() as tg:

        async def ask(tag: str) -> None:
            results.append(await flights.run("k", lambda: work(tag)))

        for i in range(5):
            tg.start_soon(ask, f"t{i}")
        await anyio.wait_all_tasks_blocked()
        assert runs == ["t0"] and len(flights) == 1
        release.set()
    assert results == [1] * 5 and len(flights) == 0

    runs.clear()
    release = anyio.Event()
    outcomes: list[Any] = []
    async with anyio.create_task_group() as tg:

        async def failing() -> None:
            try:
                await flights.run("k", lambda: work("first", fail=True))
            except RuntimeError as exc:
                outcomes.append(str(exc))

        async def waiting() -> None:
            outcomes.append(await flights.run("k", lambda: work("second")))

        tg.start_soon(failing)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(waiting)
        await anyio.wait_all_tasks_blocked()
        release.set()
    assert runs == ["first", "second"], "the waiter ran the work itself once the first run failed"
    assert sorted(map(str, outcomes)) == ["2", "the run failed"]


# ---------------------------------------------------------------------- the store's mark
def test_the_store_mark_tells_a_lost_store_from_a_new_node_and_bounds_what_it_reads() -> None:
    from mcp_resume_asgi import MemoryStore
    from mcp_resume_asgi.rest.store_mark import StoreMark
    from mcp_resume_asgi.store import keys

    async def main() -> None:
        store = MemoryStore()
        first, joining = StoreMark(store), StoreMark(store)
        assert await first.lost_at(100.0) is None, "a store seen for the first time lost nothing"
        assert await joining.lost_at(101.0) is None, "a node joining reads the same mark"
        assert await first.lost_at(102.0) is None
        await store.delete_key(keys.rest_store_mark())  # the store restarted empty
        assert await joining.lost_at(110.0) == 110.0
        assert await first.lost_at(120.0) == 110.0, "every node reads when it was found"
        assert await StoreMark(store).lost_at(130.0) == 110.0
        # Another mark than the one read before (a fresh node wrote it first): lost too.
        await store.set_key(keys.rest_store_mark(), '{"id":"other","lost_at":null}', 60)
        assert await first.lost_at(140.0) == 140.0
        # What is read back is bounded and checked: garbage, a loss ahead of the clock.
        for garbage in ("x" * 1000, "[1]", '{"id":"","lost_at":1}', "{"):
            await store.set_key(keys.rest_store_mark(), garbage, 60)
            assert await StoreMark(store).lost_at(150.0) is None, garbage
        await store.set_key(keys.rest_store_mark(), '{"id":"ahead","lost_at":1e12}', 60)
        assert await StoreMark(store).lost_at(160.0) is None

    anyio.run(main)
