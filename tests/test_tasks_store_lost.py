"""A task whose record the store lost, or that expired, is told as it is (issue 20, item 9).

Against a real `redis-server` of the test's own, on a free loopback port, restarted empty
(no persistence): a task's id says when its TTL ends and whose it is (a keyed digest), so
the task's creator - as the app's own auth says - gets `failed` "the store lost it" for a
task whose record is gone before its TTL, and anyone else "Task not found", as before. A
2025-11-25 session whose record the store lost is not told it declared nothing (-32021):
its `tasks/get` is served. A REST call's record is gone with the store: its GET is `failed`,
saying so, as a task's (`rest/store_mark.py`). On the memory store, a task past its TTL is "Task has expired" to its
creator and unknown to anyone else.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import httpx
import pytest

from mcp_resume_asgi import MemoryStore, Policy, Store, resumable
from mcp_resume_asgi.rest.store_mark import CALL_LOST
from mcp_resume_asgi.tasks.record import EXTENSION, STORE_LOST
from tests.apps.auth_app import create_app as auth_app
from tests.support.raw import RawSession
from tests.support.redis_server import RedisServer, require_binary
from tests.support.server import serve_in_loop
from tests.support.timing import scaled

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"
DECLARED = {"extensions": {EXTENSION: {}}}
ALICE = {"authorization": "Bearer token-alice"}
BOB = {"authorization": "Bearer token-bob"}
POLICY = Policy(retry_ms=None, task_after_s=0, task_ttl_s=120, task_poll_interval_ms=50)


class Client:
    """2026-07-28 requests of the Tasks extension, as one principal or another."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http
        self.next_id = 0

    def body(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        meta = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": DECLARED,
        }
        return {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": {**params, "_meta": meta}}

    async def post(
        self, method: str, name: str, params: dict[str, Any], auth: dict[str, str]
    ) -> httpx.Response:
        headers = RawSession(self.http, version=MODERN).headers(mcp_method=method) | {"mcp-name": name} | auth
        return await self.http.post("/mcp", json=self.body(method, params), headers=headers)

    async def call(self, auth: dict[str, str]) -> str:
        response = await self.post(
            "tools/call", "whoami", {"name": "whoami", "arguments": {"seconds": 0.2, "steps": 1}}, auth
        )
        answer = response.json() if "json" in response.headers["content-type"] else _last_sse(response.text)
        assert answer["result"]["resultType"] == "task", answer
        task_id: str = answer["result"]["taskId"]
        return task_id

    async def task(self, method: str, task_id: str, auth: dict[str, str], **params: Any) -> httpx.Response:
        return await self.post(method, task_id, {"taskId": task_id, **params}, auth)

    async def until(self, task_id: str, status: str) -> dict[str, Any]:
        with anyio.fail_after(scaled(15)):
            while True:
                response = await self.task("tasks/get", task_id, ALICE)
                if response.status_code == 200:
                    task: dict[str, Any] = response.json()["result"]
                    if task["status"] == status:
                        return task
                await anyio.sleep(0.1)  # (503 while the store comes back)


def _last_sse(text: str) -> dict[str, Any]:
    data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:") and line[5:].strip()]
    answer: dict[str, Any] = json.loads(data[-1])
    return answer


async def alices_session(http: httpx.AsyncClient) -> RawSession:
    """A 2025-11-25 session of alice's that declares the extension."""
    session = RawSession(http)
    params = {
        "protocolVersion": "2025-11-25",
        "capabilities": DECLARED,
        "clientInfo": {"name": "t", "version": "0"},
    }
    init = {"jsonrpc": "2.0", "id": session.next_id(), "method": "initialize", "params": params}
    reply = await session.exchange("POST", "/mcp", init, headers=session.opening_headers() | ALICE)
    session.session_id = reply.headers.get("mcp-session-id")
    assert session.session_id is not None, reply.raw
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await http.post("/mcp", json=initialized, headers=session.headers() | ALICE)).status_code == 202
    return session


@contextlib.asynccontextmanager
async def served(store: Store, policy: Policy = POLICY) -> AsyncIterator[httpx.AsyncClient]:
    app = resumable(auth_app(), policy=policy, store=store, secret="store-lost-tests-secret", rest=True)
    async with serve_in_loop(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=15) as http:
        yield http


@contextlib.asynccontextmanager
async def on_a_redis_to_restart() -> AsyncIterator[tuple[httpx.AsyncClient, Callable[[], Awaitable[None]]]]:
    """The wrapped app on a `redis-server` of this test's own, and how to restart it empty."""
    from mcp_resume_asgi.store import RedisStore

    require_binary()
    redis = RedisServer(name="store-lost")
    await anyio.to_thread.run_sync(redis.start)
    store = RedisStore(redis.url, prefix=f"test-store-lost:{uuid.uuid4().hex}:")

    async def restart() -> None:
        await anyio.to_thread.run_sync(redis.kill)
        await anyio.to_thread.run_sync(redis.start)  # the same port, empty

    try:
        async with served(store) as http:
            yield http, restart
    finally:
        await store.aclose()
        await anyio.to_thread.run_sync(redis.stop)


async def test_a_task_the_store_lost_before_its_ttl_is_failed_to_its_creator_and_unknown_to_others() -> None:
    async with on_a_redis_to_restart() as (http, restart):
        client = Client(http)
        task_id = await client.call(ALICE)
        finished = await client.until(task_id, "completed")
        await restart()
        lost = await client.until(task_id, "failed")
        assert lost["statusMessage"] == STORE_LOST and lost["error"] == {
            "code": -32603,
            "message": STORE_LOST,
        }
        for field in ("taskId", "createdAt", "ttlMs"):
            assert lost[field] == finished[field], field
        as_bob = await client.task("tasks/get", task_id, BOB)
        assert as_bob.status_code == 400 and as_bob.json()["error"]["code"] == -32602, as_bob.text
        assert as_bob.json()["error"]["message"] == "Failed to retrieve task: Task not found"
        assert (await client.task("tasks/get", task_id, {})).status_code == 401
        bob_cancels = await client.task("tasks/cancel", task_id, BOB)
        assert bob_cancels.json()["error"]["code"] == -32602
        for method, params in (("tasks/cancel", {}), ("tasks/update", {"inputResponses": {}})):
            acked = await client.task(method, task_id, ALICE, **params)
            assert acked.status_code == 200 and acked.json()["result"] == {"resultType": "complete"}, (
                acked.text
            )


async def test_a_2025_session_the_store_forgot_is_not_told_it_declared_nothing() -> None:
    async with on_a_redis_to_restart() as (http, restart):
        legacy = await alices_session(http)
        call = legacy.tool_call("whoami", {"seconds": 0.2, "steps": 1})
        reply = await legacy.exchange("POST", "/mcp", call, headers=legacy.headers() | ALICE)
        task_id = reply.messages()[-1]["result"]["taskId"]
        await restart()
        get = {"jsonrpc": "2.0", "id": legacy.next_id(), "method": "tasks/get", "params": {"taskId": task_id}}
        with anyio.fail_after(scaled(15)):
            while (
                response := await http.post("/mcp", json=get, headers=legacy.headers() | ALICE)
            ).status_code == 503:
                await anyio.sleep(0.1)  # (the store coming back)
        answer = response.json()
        assert "error" not in answer, answer  # was -32021 "Missing required client capability"
        # Failed, saying the store lost it: the task's record (STORE_LOST), or - when the tool
        # ended after the restart, as it may on a busy machine - its request's stream.
        result = answer["result"]
        assert result["status"] == "failed" and "store lost" in result["statusMessage"], result
        bobs = await http.post("/mcp", json=get, headers=legacy.headers() | BOB)
        assert bobs.status_code == 404, bobs.text  # the app's word: not bob's session


async def test_a_rest_call_the_store_lost_is_failed_saying_so() -> None:
    """A REST call after the store restarted empty is `failed`, saying the store lost it (what a
    task's creator is told), not 404 "no call": its client made it. A call of a tool the app has
    not is still 404, and a PUT of the lost call runs it again."""
    async with on_a_redis_to_restart() as (http, restart):
        url = "/mcp/tools/whoami/calls/c-1"
        put = await http.put(url, json={"seconds": 0.1}, headers={"idempotency-key": "k-1"} | ALICE)
        assert put.status_code == 201, put.text
        await restart()
        with anyio.fail_after(scaled(15)):
            while (response := await http.get(url, headers=ALICE)).status_code == 503:
                await anyio.sleep(0.1)
        assert response.status_code == 200, response.text
        lost = response.json()
        assert lost["status"] == "failed" and lost["toolname"] == "whoami" and lost["id"] == "c-1", lost
        assert lost["error"] == {"code": -32603, "message": CALL_LOST}
        assert response.headers["etag"].strip('"') == lost["etag"]
        cached = await http.get(url, headers=ALICE | {"if-none-match": response.headers["etag"]})
        assert cached.status_code == 304
        assert (await http.get("/mcp/tools/nosuchtool/calls/c-1", headers=ALICE)).status_code == 404
        assert (await http.get(url, headers={})).status_code == 401
        cancelled = await http.post(f"{url}/cancel", headers=ALICE)
        assert cancelled.status_code == 200 and cancelled.json() == lost, "over already: as a finished call"
        advance = await http.post(f"{url}/advance", json={}, headers=ALICE | {"if-match": "*"})
        assert advance.status_code == 409, advance.text
        again = await http.put(url, json={"seconds": 0.1}, headers={"idempotency-key": "k-1"} | ALICE)
        assert again.status_code == 201, again.text
        with anyio.fail_after(scaled(15)):
            while (await http.get(url, headers=ALICE)).json()["status"] == "running":
                await anyio.sleep(0.1)
        assert (await http.get(url, headers=ALICE)).json()["status"] == "success"


async def test_a_rest_call_never_made_on_a_store_that_lost_nothing_is_not_found() -> None:
    async with on_a_redis_to_restart() as (http, _):
        put = await http.put(
            "/mcp/tools/whoami/calls/c-1", json={"seconds": 0.1}, headers={"idempotency-key": "k"} | ALICE
        )
        assert put.status_code == 201, put.text
        assert (await http.get("/mcp/tools/whoami/calls/c-2", headers=ALICE)).status_code == 404


async def test_a_task_past_its_ttl_has_expired_for_its_creator_and_is_unknown_to_others() -> None:
    async with served(MemoryStore(), POLICY.replace(task_ttl_s=1)) as http:
        client = Client(http)
        task_id = await client.call(ALICE)
        await client.until(task_id, "completed")
        with anyio.fail_after(scaled(15)):
            while (response := await client.task("tasks/get", task_id, ALICE)).status_code == 200:
                await anyio.sleep(0.2)
        error = response.json()["error"]
        assert response.status_code == 400 and error == {
            "code": -32602,
            "message": "Failed to retrieve task: Task has expired",
        }
        as_bob = await client.task("tasks/get", task_id, BOB)
        assert as_bob.json()["error"]["message"] == "Failed to retrieve task: Task not found"
