"""The client helper's Tasks driver (SEP-2663) without a network: `TaskState` alone, `drive_task`
over scripted answers, and `ResumableSession` over an in-memory HTTP transport replaying the
wire messages of the extension's example flow (input_required included: the server side of
`input_required` is not in this repository yet, so this is where the client's handling is tested)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest
from trio.testing import MockClock

from mcp_resume_asgi.client import (
    TASKS_EXTENSION,
    McpError,
    ResumableSession,
    ResumableTransport,
    SessionError,
    TaskCancelled,
    TaskPolling,
)
from mcp_resume_asgi.client.tasks import (
    Answer,
    Done,
    FetchNow,
    TaskState,
    Wait,
    declare,
    drive_task,
    routing_headers,
)

pytestmark = pytest.mark.anyio

TASK_ID = "786512e2-9e0d-44bd-8f29-789f320fe840"
TIMES = {"createdAt": "2025-11-25T10:30:00Z", "lastUpdatedAt": "2025-11-25T10:50:00Z", "ttlMs": 3600000}
ELICIT = {
    "method": "elicitation/create",
    "params": {
        "mode": "form",
        "message": "Please enter your name.",
        "requestedSchema": {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        },
    },
}
ON_A_MOCK_CLOCK = pytest.mark.parametrize(
    "anyio_backend",
    [pytest.param(("trio", {"clock": MockClock(autojump_threshold=0)}), id="trio-mock-clock")],
)
"""Run on trio's mock clock: time moves only when every task sleeps, so the gaps between requests
are exactly the waits the driver chose, whatever the machine's load."""
RESULT = {"content": [{"type": "text", "text": "Hello, Luca!"}], "isError": False}


def task(status: str, poll_ms: int = 20, **extra: Any) -> dict[str, Any]:
    return {"taskId": TASK_ID, "status": status, **TIMES, "pollIntervalMs": poll_ms, **extra}


def created(poll_ms: int = 20) -> dict[str, Any]:
    return {"resultType": "task", **task("working", poll_ms)}


def got(status: str, poll_ms: int = 20, **extra: Any) -> dict[str, Any]:
    return {"resultType": "complete", **task(status, poll_ms, **extra)}


# -- TaskState: the decisions, no I/O ------------------------------------------------------------


def test_a_working_task_is_polled_at_the_servers_interval_clamped() -> None:
    state = TaskState(created(poll_ms=250))
    assert state.observe(created(poll_ms=250), seed=True) == Wait(0.25)
    assert state.observe(got("working", poll_ms=5)) == Wait(0.01)  # min_poll_ms
    assert state.observe(got("working", poll_ms=10**9)) == Wait(30.0)  # max_poll_ms
    no_hint = {k: v for k, v in got("working").items() if k != "pollIntervalMs"}
    assert state.observe(no_hint) == Wait(30.0), "an absent hint keeps the last one"
    fresh = {k: v for k, v in created().items() if k != "pollIntervalMs"}
    assert TaskState(fresh).observe(fresh, seed=True) == Wait(1.0), "default_poll_ms"


def test_terminal_states() -> None:
    state = TaskState(created())
    assert state.observe(got("completed", result=RESULT)) == Done(RESULT)
    tool_error = {"content": [], "isError": True}
    assert TaskState(created()).observe(got("completed", result=tool_error)) == Done(tool_error)
    with pytest.raises(McpError) as failed:
        TaskState(created()).observe(got("failed", error={"code": -32042, "message": "no", "data": [1]}))
    assert (failed.value.code, failed.value.message, failed.value.data) == (-32042, "no", [1])
    with pytest.raises(McpError) as vague:
        TaskState(created()).observe(got("failed", statusMessage="rate limited"))
    assert vague.value.code == -32603 and "rate limited" in vague.value.message
    with pytest.raises(TaskCancelled) as cancelled:
        TaskState(created()).observe(got("cancelled", statusMessage="by an operator"))
    assert cancelled.value.task_id == TASK_ID and cancelled.value.status_message == "by an operator"
    with pytest.raises(SessionError):
        TaskState(created()).observe(got("completed"))  # no result


def test_a_seed_that_says_the_task_is_over_without_its_outcome_is_fetched_at_once() -> None:
    for status in ("completed", "failed"):
        seed = {"resultType": "task", **task(status)}
        state = TaskState(seed)
        assert state.observe(seed, seed=True) == FetchNow()
        assert not state.terminal or state.status == status


def test_input_requests_are_answered_once_per_key() -> None:
    state = TaskState(created())
    step = state.observe(got("input_required", inputRequests={"name": ELICIT}))
    assert step == Answer({"name": ("elicitation/create", ELICIT["params"])})
    state.note_answered({"name"})
    assert state.observe(got("input_required", inputRequests={"name": ELICIT})) == Wait(0.02), "deduplicated"
    step = state.observe(got("input_required", inputRequests={"name": ELICIT, "age": ELICIT}))
    assert step == Answer({"age": ("elicitation/create", ELICIT["params"])})


@pytest.mark.parametrize(
    "bad",
    [
        {"inputRequests": None},
        {"inputRequests": {"k": "not a request"}},
        {"inputRequests": {"k": {"params": {}}}},
        {"inputRequests": {"k": {"method": "elicitation/create", "params": []}}},
    ],
)
def test_input_requests_that_are_not_requests_break_the_protocol(bad: dict[str, Any]) -> None:
    with pytest.raises(SessionError):
        TaskState(created()).observe(got("input_required", **bad))


def test_answers_about_another_task_and_handles_without_an_id_are_refused() -> None:
    with pytest.raises(SessionError):
        TaskState(created()).observe({**got("working"), "taskId": "another"})
    for bad_id in (None, "", 42, "x" * 2000):
        with pytest.raises(SessionError):
            TaskState({"resultType": "task", "taskId": bad_id, "status": "working"})


def test_declare_routing_headers_and_polling_validation() -> None:
    caps = {"elicitation": {}, "extensions": {"other/ext": {"a": 1}}}
    assert declare(caps) == {"elicitation": {}, "extensions": {"other/ext": {"a": 1}, TASKS_EXTENSION: {}}}
    assert caps["extensions"] == {"other/ext": {"a": 1}}, "the caller's object is not changed"
    assert declare({}) == {"extensions": {TASKS_EXTENSION: {}}}
    assert routing_headers("tasks/get", "abc.DEF_-") == {"mcp-method": "tasks/get", "mcp-name": "abc.DEF_-"}
    assert routing_headers("tasks/get", "tâche")["mcp-name"] == "=?base64?dMOiY2hl?="
    for bad in (
        {"min_poll_ms": 50, "default_poll_ms": 10},
        {"max_poll_ms": 10},
        {"max_failed_polls": 0},
        {"cancel_timeout_s": 0},
    ):
        with pytest.raises(ValueError):
            TaskPolling(**bad)


# -- drive_task over scripted answers -----------------------------------------------------------


class Scripted:
    """A server as a list of answers to tasks/get; records every request with its time."""

    def __init__(self, gets: list[dict[str, Any] | Exception], *, block_after: bool = False) -> None:
        self.gets = list(gets)
        self.block_after = block_after
        self.sent: list[tuple[str, dict[str, Any], float]] = []

    async def send(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.sent.append((method, params, anyio.current_time()))
        assert params["taskId"] == TASK_ID
        if method != "tasks/get":
            return {"resultType": "complete"}
        if not self.gets and self.block_after:
            await anyio.sleep_forever()
        answer = self.gets.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def methods(self) -> list[str]:
        return [method for method, _, _ in self.sent]


class Broken(Exception):
    pass


def transient(exc: Exception) -> bool:
    return isinstance(exc, Broken)


@ON_A_MOCK_CLOCK
async def test_the_example_flow_of_the_extension_ends_with_the_result() -> None:
    """The spec's example: working, input_required (twice, the same key), working, completed."""
    server = Scripted(
        [
            got("working"),
            got("input_required", inputRequests={"name": ELICIT}),
            got("input_required", inputRequests={"name": ELICIT}),
            got("working"),
            got("completed", result=RESULT),
        ]
    )
    asked: list[tuple[str, str, dict[str, Any]]] = []

    async def answer(key: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
        asked.append((key, method, params))
        return {"action": "accept", "content": {"input": "Luca"}}

    start = anyio.current_time()
    result = await drive_task(created(), send=server.send, answer_input=answer, transient=transient)
    assert result == RESULT
    assert asked == [("name", "elicitation/create", ELICIT["params"])], "asked once, though polled twice"
    assert server.methods() == [
        "tasks/get",
        "tasks/get",
        "tasks/update",
        "tasks/get",
        "tasks/get",
        "tasks/get",
    ]
    update = server.sent[2][1]
    assert update == {
        "taskId": TASK_ID,
        "inputResponses": {"name": {"action": "accept", "content": {"input": "Luca"}}},
    }
    gaps = [b[2] - a[2] for a, b in zip([("", {}, start), *server.sent], server.sent, strict=False)]
    assert all(gap == pytest.approx(0.02) for i, gap in enumerate(gaps) if i != 2), gaps  # pollIntervalMs
    assert gaps[2] == 0, "the answers go out as soon as they are known"


async def test_a_failed_task_raises_its_json_rpc_error_and_sends_no_cancel() -> None:
    server = Scripted([got("failed", error={"code": -32042, "message": "the server refused it"})])
    with pytest.raises(McpError) as caught:
        await drive_task(created(), send=server.send, answer_input=None, transient=transient)
    assert caught.value.code == -32042
    assert server.methods() == ["tasks/get"]


async def test_a_cancelled_task_raises_task_cancelled() -> None:
    server = Scripted([got("working"), got("cancelled")])
    with pytest.raises(TaskCancelled):
        await drive_task(created(), send=server.send, answer_input=None, transient=transient)
    assert server.methods() == ["tasks/get", "tasks/get"]


@ON_A_MOCK_CLOCK
async def test_the_caller_cancelling_sends_tasks_cancel_even_mid_poll() -> None:
    server = Scripted([got("working")], block_after=True)
    with anyio.move_on_after(0.2) as scope:
        await drive_task(created(), send=server.send, answer_input=None, transient=transient)
    assert scope.cancelled_caught
    assert server.methods() == ["tasks/get", "tasks/get", "tasks/cancel"]


async def test_a_handler_that_fails_cancels_the_task_and_its_error_propagates() -> None:
    server = Scripted([got("input_required", inputRequests={"k": ELICIT})])

    async def refuse(key: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise McpError(-1, "the user closed the window")

    with pytest.raises(McpError, match="closed the window"):
        await drive_task(created(), send=server.send, answer_input=refuse, transient=transient)
    assert server.methods() == ["tasks/get", "tasks/cancel"]
    server = Scripted([got("input_required", inputRequests={"k": ELICIT})])
    with pytest.raises(McpError, match="cannot give"):
        await drive_task(created(), send=server.send, answer_input=None, transient=transient)
    assert server.methods() == ["tasks/get", "tasks/cancel"]


async def test_broken_polls_are_retried_a_bounded_number_of_times() -> None:
    server = Scripted([Broken(), Broken(), got("completed", result=RESULT)])
    assert await drive_task(created(), send=server.send, answer_input=None, transient=transient) == RESULT
    assert server.methods() == ["tasks/get"] * 3
    server = Scripted([Broken()] * 3 + [Broken()] * 2)  # the last two are tasks/cancel's... not reached
    polling = TaskPolling(max_failed_polls=3, default_poll_ms=10, cancel_timeout_s=0.5)
    with pytest.raises(Broken):
        await drive_task(created(), send=server.send, answer_input=None, transient=transient, polling=polling)
    assert server.methods() == ["tasks/get"] * 3 + ["tasks/cancel"]
    server = Scripted([ValueError("not transient")])
    with pytest.raises(ValueError):
        await drive_task(created(), send=server.send, answer_input=None, transient=transient)
    assert server.methods() == ["tasks/get", "tasks/cancel"]


# -- ResumableSession over an in-memory server ----------------------------------------------------


class WireServer:
    """Answers like a wrapped 2025-11-25 server: a session, a task for every tools/call."""

    def __init__(self, gets: list[dict[str, Any]]) -> None:
        self.gets = list(gets)
        self.requests: list[tuple[dict[str, Any], httpx.Headers]] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.method == "DELETE":
            return httpx.Response(204)
        message = json.loads(request.content)
        self.requests.append((message, request.headers))
        if "id" not in message:
            return httpx.Response(202)
        method = message["method"]
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"extensions": {TASKS_EXTENSION: {}}},
                "serverInfo": {"name": "wire", "version": "0"},
            }
        elif method in ("tools/call", "prompts/get"):
            result = created()
        elif method == "tasks/get":
            result = self.gets.pop(0)
        else:
            result = {"resultType": "complete"}
        body = {"jsonrpc": "2.0", "id": message["id"], "result": result}
        return httpx.Response(200, json=body, headers={"mcp-session-id": "s-1"})

    def sent(self, method: str) -> list[tuple[dict[str, Any], httpx.Headers]]:
        return [(m, h) for m, h in self.requests if m.get("method") == method]


def session_over(server: WireServer, **kwargs: Any) -> ResumableSession:
    transport = ResumableTransport(httpx.MockTransport(server.handler))
    return ResumableSession(
        "http://wire.test/mcp", http_client=httpx.AsyncClient(transport=transport), **kwargs
    )


async def test_the_session_declares_tasks_and_hands_back_the_final_result() -> None:
    server = WireServer([got("working"), got("completed", result=RESULT)])
    async with session_over(server) as session:
        assert await session.call_tool("hello_world", {}) == RESULT
    ((init, _),) = server.sent("initialize")
    assert init["params"]["capabilities"]["extensions"] == {TASKS_EXTENSION: {}}
    assert init["params"]["capabilities"]["experimental"] == {"resumeTokens": {}}, "nothing else lost"
    gets = server.sent("tasks/get")
    assert [m["params"] for m, _ in gets] == [{"taskId": TASK_ID}] * 2
    assert all(h["mcp-name"] == TASK_ID and h["mcp-method"] == "tasks/get" for _, h in gets)
    assert all(h["mcp-session-id"] == "s-1" for _, h in gets)


async def test_the_session_answers_input_requests_with_its_on_request_callback() -> None:
    server = WireServer(
        [got("input_required", inputRequests={"name": ELICIT}), got("completed", result=RESULT)]
    )
    asked: list[tuple[str, dict[str, Any]]] = []

    def on_request(method: str, params: dict[str, Any]) -> dict[str, Any]:  # a sync one, as today
        asked.append((method, params))
        return {"action": "accept", "content": {"input": "Luca"}}

    async with session_over(server, on_request=on_request) as session:
        assert await session.call_tool("hello_world", {}) == RESULT
    assert asked == [("elicitation/create", ELICIT["params"])]
    ((update, headers),) = server.sent("tasks/update")
    assert update["params"] == {
        "taskId": TASK_ID,
        "inputResponses": {"name": {"action": "accept", "content": {"input": "Luca"}}},
    }
    assert headers["mcp-name"] == TASK_ID and headers["mcp-method"] == "tasks/update"


async def test_a_session_without_a_handler_cancels_a_task_that_asks_for_input() -> None:
    server = WireServer([got("input_required", inputRequests={"name": ELICIT})])
    async with session_over(server) as session:
        with pytest.raises(McpError) as caught:
            await session.call_tool("hello_world", {})
    assert caught.value.code == -32601
    assert len(server.sent("tasks/cancel")) == 1 and not server.sent("tasks/update")


async def test_tasks_false_declares_nothing_and_leaves_results_alone() -> None:
    server = WireServer([])
    async with session_over(server, tasks=False) as session:
        assert (await session.call_tool("hello_world", {}))["resultType"] == "task"
    ((init, _),) = server.sent("initialize")
    assert "extensions" not in init["params"]["capabilities"]
    assert not server.sent("tasks/get")


async def test_only_tools_call_is_followed() -> None:
    server = WireServer([])
    async with session_over(server) as session:
        # prompts/get is not a method tasks stand in for: the handle comes back as the server sent it.
        answer: Callable[..., Any] = session.request
        assert (await answer("prompts/get", {"name": "x"}))["resultType"] == "task"
        assert not server.sent("tasks/get")
