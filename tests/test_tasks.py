"""The Tasks extension (SEP-2663) served for a stock `MCPServer` app, end to end, on both stores."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import httpx
import pytest
from starlette.types import ASGIApp

from mcp_resume_asgi import MemoryStore, Policy, Store, TasksMiddleware, resumable
from mcp_resume_asgi.tasks.operations import stream_of_task
from mcp_resume_asgi.tasks.record import EXTENSION
from mcp_resume_asgi.wire.tokens import TokenSigner
from tests.apps.tasks_app import SEEN, create_app
from tests.support.raw import RawSession
from tests.support.server import serve, serve_in_loop
from tests.support.stores import redis_prefix, redis_url, require_redis
from tests.support.timing import scaled

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"
DECLARED = {"extensions": {EXTENSION: {}}}
AT_ONCE = Policy(retry_ms=None, task_after_s=0, task_ttl_s=60, task_poll_interval_ms=50)
STORE_KIND = "memory"


@pytest.fixture(autouse=True, params=["memory", "redis"])
def store_kind(request: pytest.FixtureRequest) -> str:
    global STORE_KIND
    if request.param == "redis":
        require_redis()
    STORE_KIND = request.param
    return STORE_KIND


class Harness:
    def __init__(self, client: httpx.AsyncClient, store: Store, app: ASGIApp) -> None:
        self.client = client
        self.store = store
        self.app = app
        self.next_id = 100

    @property
    def signer(self) -> TokenSigner:
        """The server's own signer (its task records are sealed with it)."""
        layer = self.app
        assert isinstance(layer, TasksMiddleware)
        signer = layer.app.engine.signer  # type: ignore[attr-defined]
        assert isinstance(signer, TokenSigner)
        return signer

    def stream_of(self, task_id: str) -> str:
        """The stream behind a task id (through the server's own signer)."""
        layer = self.app
        assert isinstance(layer, TasksMiddleware)
        stream_id = stream_of_task(layer.app.engine, task_id)  # type: ignore[attr-defined]
        assert isinstance(stream_id, str)
        return stream_id

    def body(
        self, method: str, params: dict[str, Any], capabilities: dict[str, Any] | None
    ) -> dict[str, Any]:
        self.next_id += 1
        meta = {"io.modelcontextprotocol/protocolVersion": MODERN}
        if capabilities is not None:
            meta["io.modelcontextprotocol/clientCapabilities"] = capabilities  # type: ignore[assignment]
        return {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": {**params, "_meta": meta}}

    def headers(self, method: str, name: str | None, **extra: str) -> dict[str, str]:
        headers = RawSession(self.client, version=MODERN).headers(mcp_method=method, **extra)
        if name is not None:
            headers["mcp-name"] = name
        return headers

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        capabilities: dict[str, Any] | None = DECLARED,
        **extra: str,
    ) -> dict[str, Any]:
        """A 2026-07-28 `tools/call`, read to its end: the answer (result or task, or error)."""
        body = self.body("tools/call", {"name": tool, "arguments": arguments}, capabilities)
        reply = await RawSession(self.client, version=MODERN).exchange(
            "POST", "/mcp", body, headers=self.headers("tools/call", tool, **extra)
        )
        if reply.events:
            answer: dict[str, Any] = reply.messages()[-1]
        else:
            answer = httpx.Response(reply.status, content=reply.raw).json()
        assert answer["id"] == body["id"], answer
        return answer

    async def task(self, method: str, task_id: Any, name: str | None = None, **params: Any) -> httpx.Response:
        capabilities = params.pop("capabilities", DECLARED)
        body = self.body(method, {"taskId": task_id, **params}, capabilities)
        header_name = name if name is not None else (task_id if isinstance(task_id, str) else None)
        return await self.client.post("/mcp", json=body, headers=self.headers(method, header_name))

    async def get(self, task_id: str) -> dict[str, Any]:
        response = await self.task("tasks/get", task_id)
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()["result"]
        assert result["resultType"] == "complete" and result["taskId"] == task_id
        return result

    async def until_terminal(self, task_id: str, timeout: float = 10) -> dict[str, Any]:
        with anyio.fail_after(scaled(timeout)):
            while True:
                task = await self.get(task_id)
                if task["status"] != "working":
                    return task
                await anyio.sleep(task["pollIntervalMs"] / 1000)


@contextlib.asynccontextmanager
async def wrapped(
    policy: Policy = AT_ONCE,
    factory: Callable[[], ASGIApp] = create_app,
    wrap: Callable[[Store], Any] = lambda store: store,
) -> AsyncIterator[Harness]:
    """The app wrapped on the store of this test's `store_kind` (as `wrap` returns it)."""
    if STORE_KIND == "memory":
        store: Store = wrap(MemoryStore())
        app = resumable(factory(), policy=policy, store=store, tasks=True)
        async with serve(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=15) as client:
            yield Harness(client, store, app)
        return
    from mcp_resume_asgi.store import RedisStore

    redis_store = RedisStore(redis_url(), prefix=redis_prefix("test-tasks"))
    store = wrap(redis_store)
    app = resumable(factory(), policy=policy, store=store, secret="tasks-tests-shared-secret", tasks=True)
    try:
        async with (
            serve_in_loop(app) as info,
            httpx.AsyncClient(base_url=info.base_url, timeout=15) as client,
        ):
            yield Harness(client, store, app)
    finally:
        await redis_store.clear()
        await redis_store.aclose()


def created(answer: dict[str, Any]) -> str:
    result = answer["result"]
    assert result["resultType"] == "task" and result["status"] == "working", answer
    assert result["ttlMs"] == 60_000 and result["pollIntervalMs"] == 50
    assert result["createdAt"].endswith("Z") and result["lastUpdatedAt"] == result["createdAt"]
    task_id: str = result["taskId"]
    return task_id


@pytest.mark.slow
async def test_a_call_becomes_a_task_recorded_before_its_answer_and_polled_to_its_result() -> None:
    async with wrapped() as h:
        answer = await h.call("slow", {"seconds": 2.0, "tag": "polled"})
        task_id = created(answer)
        assert await h.store.get_key(f"task:{h.stream_of(task_id)}") is not None
        assert (await h.get(task_id))["status"] == "working"
        task = await h.until_terminal(task_id)
        assert task["status"] == "completed", task
        assert task["result"]["content"][0]["text"] == "slept polled" and task["result"]["isError"] is False
        assert "error" not in task and task["lastUpdatedAt"] >= task["createdAt"]
        assert await h.get(task_id) == task, "a finished task stays readable"


async def test_a_fast_call_with_task_after_zero_is_a_task_too() -> None:
    async with wrapped() as h:
        task_id = created(await h.call("echo", {"text": "quick"}))
        task = await h.until_terminal(task_id)
        assert task["status"] == "completed" and task["result"]["content"][0]["text"] == "quick"


@pytest.mark.slow
async def test_a_tool_error_completes_and_a_json_rpc_error_fails() -> None:
    async with wrapped() as h:
        tool_error = await h.until_terminal(created(await h.call("tool_error", {"seconds": 0.3})))
        assert tool_error["status"] == "completed" and tool_error["result"]["isError"] is True
        assert "error" not in tool_error
        rpc_error = await h.until_terminal(created(await h.call("rpc_error", {"seconds": 0.3})))
        assert rpc_error["status"] == "failed" and "result" not in rpc_error
        assert rpc_error["error"] == {"code": -32042, "message": "the server refused it"}
        assert rpc_error["statusMessage"] == "the server refused it"


@pytest.mark.slow
async def test_only_a_call_still_running_after_task_after_s_becomes_a_task() -> None:
    async with wrapped(AT_ONCE.replace(task_after_s=0.3)) as h:
        with anyio.fail_after(scaled(5)):
            slow = await h.call("slow", {"seconds": 2.5, "tag": "late"})
        task = await h.until_terminal(created(slow))
        assert task["result"]["content"][0]["text"] == "slept late"
        fast = await h.call("echo", {"text": "plain"})
        assert fast["result"]["content"][0]["text"] == "plain" and fast["result"]["resultType"] == "complete"


@pytest.mark.slow
async def test_a_client_without_the_extension_never_gets_a_task() -> None:
    async with wrapped() as h:
        plain = await h.call("slow", {"seconds": 0.3, "tag": "undeclared"}, capabilities={})
        assert plain["result"]["content"][0]["text"] == "slept undeclared"
        response = await h.task("tasks/get", "anything", capabilities={})
        assert response.status_code == 400 and response.json()["error"]["code"] == -32021


@pytest.mark.slow
async def test_task_required_refuses_a_client_without_the_extension() -> None:
    async with wrapped(AT_ONCE.replace(task_required=True)) as h:
        refused = await h.call("echo", {"text": "x"}, capabilities={})
        assert refused["error"]["code"] == -32021
        assert refused["error"]["data"] == {"requiredCapabilities": {"extensions": {EXTENSION: {}}}}
        assert created(await h.call("echo", {"text": "x"}))


@pytest.mark.slow
async def test_cancel_stops_the_tool_and_is_idempotent() -> None:
    SEEN.cancelled.clear()
    async with wrapped() as h:
        task_id = created(await h.call("slow", {"seconds": 30, "tag": "to-cancel"}))
        for _ in range(2):
            response = await h.task("tasks/cancel", task_id)
            assert response.status_code == 200 and response.json()["result"] == {"resultType": "complete"}
        with anyio.fail_after(scaled(10)):
            while "to-cancel" not in SEEN.cancelled:
                await anyio.sleep(0.05)
        task = await h.until_terminal(task_id)
        assert task["status"] == "cancelled" and "result" not in task
        again = await h.task("tasks/cancel", task_id)
        assert again.json()["result"] == {"resultType": "complete"}


@pytest.mark.slow
async def test_closing_the_connection_after_the_create_task_result_does_not_cancel() -> None:
    SEEN.cancelled.clear()
    async with wrapped() as h:
        body = h.body("tools/call", {"name": "slow", "arguments": {"seconds": 1.2, "tag": "left"}}, DECLARED)
        session = RawSession(h.client, version=MODERN)
        async with session.open("POST", "/mcp", body, h.headers("tools/call", "slow")) as (_, reader):
            async for event in reader:
                if event.data:
                    task_id = created(event.message)
                    break  # and the client drops the connection
        task = await h.until_terminal(task_id)
        assert task["status"] == "completed" and "left" not in SEEN.cancelled


@pytest.mark.slow
async def test_unknown_and_forged_task_ids_are_invalid_params() -> None:
    async with wrapped() as h:
        task_id = created(await h.call("echo", {"text": "mine"}))
        forged = task_id[:-4] + ("AAAA" if not task_id.endswith("AAAA") else "BBBB")
        for bad in ("unknown", forged, "x" * 300, 42):
            for method in ("tasks/get", "tasks/cancel", "tasks/update"):
                response = await h.task(method, bad, inputResponses={})
                assert response.status_code == 400, (method, bad, response.text)
                assert response.json()["error"]["code"] == -32602


@pytest.mark.slow
async def test_mcp_name_must_be_the_task_id() -> None:
    async with wrapped() as h:
        task_id = created(await h.call("echo", {"text": "routed"}))
        mismatch = await h.task("tasks/get", task_id, name="another-task")
        assert mismatch.status_code == 400 and mismatch.json()["error"]["code"] == -32020
        body = h.body("tasks/get", {"taskId": task_id}, DECLARED)
        missing = await h.client.post("/mcp", json=body, headers=h.headers("tasks/get", None))
        assert missing.status_code == 400 and missing.json()["error"]["code"] == -32020
        assert (await h.get(task_id))["taskId"] == task_id


@pytest.mark.slow
async def test_discover_and_initialize_advertise_the_extension_and_a_2025_session_gets_tasks() -> None:
    async with wrapped() as h:
        discover = await h.client.post(
            "/mcp", json=h.body("server/discover", {}, DECLARED), headers=h.headers("server/discover", None)
        )
        assert discover.json()["result"]["capabilities"]["extensions"] == {EXTENSION: {}}
        legacy = RawSession(h.client)
        init = await legacy.initialize(capabilities=DECLARED)
        assert init.messages()[-1]["result"]["capabilities"]["extensions"] == {EXTENSION: {}}
        reply = await legacy.exchange(
            "POST", "/mcp", legacy.tool_call("slow", {"seconds": 0.5, "tag": "legacy"})
        )
        task_id = created(reply.messages()[-1])
        get = {"jsonrpc": "2.0", "id": legacy.next_id(), "method": "tasks/get", "params": {"taskId": task_id}}
        with anyio.fail_after(scaled(10)):
            while True:
                task = (await h.client.post("/mcp", json=get, headers=legacy.headers())).json()["result"]
                if task["status"] != "working":
                    break
                await anyio.sleep(0.05)
        assert task["status"] == "completed" and task["result"]["content"][0]["text"] == "slept legacy"


@pytest.mark.slow
async def test_a_task_is_visible_only_to_the_principal_that_created_it() -> None:
    from tests.apps.auth_app import create_app as auth_app

    async with wrapped(factory=auth_app) as h:
        alice = {"authorization": "Bearer token-alice"}
        answer = await h.call("whoami", {"seconds": 0.3, "steps": 1}, **alice)
        task_id = created(answer)
        body = h.body("tasks/get", {"taskId": task_id}, DECLARED)
        as_bob = await h.client.post(
            "/mcp", json=body, headers=h.headers("tasks/get", task_id, authorization="Bearer token-bob")
        )
        assert as_bob.status_code == 400 and as_bob.json()["error"]["code"] == -32602, as_bob.text
        nobody = await h.client.post("/mcp", json=body, headers=h.headers("tasks/get", task_id))
        assert nobody.status_code == 401
        cancel = h.body("tasks/cancel", {"taskId": task_id}, DECLARED)
        bob_cancels = await h.client.post(
            "/mcp", json=cancel, headers=h.headers("tasks/cancel", task_id, authorization="Bearer token-bob")
        )
        assert bob_cancels.json()["error"]["code"] == -32602
        with anyio.fail_after(scaled(10)):
            while True:
                mine = await h.client.post(
                    "/mcp", json=body, headers=h.headers("tasks/get", task_id, **alice)
                )
                task = mine.json().get("result") or pytest.fail(mine.text)
                if task["status"] != "working":
                    break
                await anyio.sleep(0.05)
        assert task["status"] == "completed" and task["result"]["content"][0]["text"] == "the secret of alice"


async def _first_answer_after(
    h: Harness, legacy: bool, tool: str, arguments: dict[str, Any]
) -> tuple[Any, float]:
    """The first JSON-RPC answer to a call (read as it arrives) and how long it took."""
    if legacy:
        session = RawSession(h.client)
        await session.initialize(capabilities=DECLARED)
        body = session.tool_call(tool, arguments)
        headers = session.headers()
    else:
        session = RawSession(h.client, version=MODERN)
        body = h.body("tools/call", {"name": tool, "arguments": arguments}, DECLARED)
        headers = h.headers("tools/call", tool)
    started = anyio.current_time()
    async with session.open("POST", "/mcp", body, headers) as (_, reader):
        async for event in reader:
            if event.data and "id" in event.message:
                return event.message, anyio.current_time() - started
    raise AssertionError("no answer")


@pytest.mark.parametrize("legacy", [False, True], ids=["2026-07-28", "2025-11-25"])
async def test_task_after_zero_answers_at_once_without_waiting_for_the_app(legacy: bool) -> None:
    tag = f"at-once-{uuid.uuid4().hex[:8]}"
    async with wrapped() as h:
        answer, _ = await _first_answer_after(h, legacy, "slow", {"seconds": 60, "tag": tag})
        assert tag not in SEEN.finished, "answered while the tool runs"
        task_id = created(answer)
        assert (await h.get(task_id))["status"] == "working"
        assert (await h.task("tasks/cancel", task_id)).status_code == 200


@pytest.mark.parametrize("legacy", [False, True], ids=["2026-07-28", "2025-11-25"])
@pytest.mark.slow
async def test_task_after_s_counts_from_the_requests_arrival(legacy: bool) -> None:
    tag = f"from-arrival-{uuid.uuid4().hex[:8]}"
    async with wrapped(AT_ONCE.replace(task_after_s=0.4)) as h:
        answer, took = await _first_answer_after(h, legacy, "slow", {"seconds": 60, "tag": tag})
        assert tag not in SEEN.finished, "answered at the deadline, not at the tool's end"
        task_id = created(answer)
        # Not before the deadline; and soon after it (a generous bound: a deadline counted from
        # anything later than the arrival would show as a second or more).
        assert 0.35 < took < 0.4 + scaled(1.5), f"the CreateTaskResult took {took:.2f}s"
        assert (await h.task("tasks/cancel", task_id)).status_code == 200
        plain, _ = await _first_answer_after(h, legacy, "slow", {"seconds": 0, "tag": "in-time"})
        assert plain["result"]["content"][0]["text"] == "slept in-time", "a tool done in time: no task"


async def test_a_task_still_running_at_the_drain_budget_is_failed_saying_the_server_shut_down() -> None:
    """Issue 22: `drain()` lets a task run on up to `drain_s`, then ends it: `failed`, with a
    message that says the server shut down (never a record left `working`)."""
    from mcp_resume_asgi.engine.services import SHUT_DOWN

    store = MemoryStore()
    app = resumable(create_app(), policy=AT_ONCE, store=store, tasks=True, drain_s=0.2)
    async with serve(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=15) as client:
        h = Harness(client, store, app)
        task_id = created(await h.call("slow", {"seconds": 30.0, "tag": "at-the-budget"}))
        drained = await app.drain()
        assert drained.running == 1 and drained.stopped == 1 and drained.finished == 0, drained
        task = await h.until_terminal(task_id)
    assert task["status"] == "failed", task
    assert task["statusMessage"] == SHUT_DOWN and task["error"]["message"] == SHUT_DOWN, task
