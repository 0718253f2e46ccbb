"""Tasks (SEP-2663) under faults: a client gone for 30 s, a node killed, Redis restarted.

Harnesses reused: the stock `MCPServer` tasks app (`tests.apps.tasks_app`), in process on the
memory store or as node processes on Redis (`tests.apps.multinode_tasks_app`, behind
`CutProxy` as in tests/test_multinode_tasks.py); Redis that can be killed and started again on
the same port (`own_redis` of tests/support/redis_server.py, optionally with an
append-only file fsynced on every write). The protocol is 2026-07-28 throughout, each request on
a new connection. (Polls round-robin over two nodes: tests/test_multinode_tasks.py.)

What must hold:

* a client that disappears right after its `CreateTaskResult` and polls `tasks/get` 30 s later
  gets the result (the tool finished meanwhile, nobody listening): memory and Redis;
* the owner node SIGKILLed mid-task: polls through the surviving node turn the task `failed`
  with a clear error within `node_timeout_s` (plus a small margin);
* Redis restarted mid-task: a task whose `CreateTaskResult` was received is still found after
  the restart and reaches its result or a clear failed/cancelled status, never "unknown".
  That holds only as far as Redis keeps what it acknowledged: with an append-only file fsynced
  on every write it does; with Redis in memory only, a restart forgets every task (the test
  pins what a client is told then: `failed`, saying so). While Redis is down `tasks/get`
  answers 503 + Retry-After. A task whose tool returns while Redis is down completes once Redis
  is back (the answer the store refused is held and written then).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from mcp_resume_asgi import MemoryStore, Policy, resumable
from mcp_resume_asgi.client.tasks import TASKS_EXTENSION
from tests.apps.tasks_app import SEEN, create_app
from tests.support.cluster import cluster_behind_proxy, pid_of, port_of, prefix, steer
from tests.support.proxy import CutProxy
from tests.support.redis_server import RedisServer, own_redis
from tests.support.server import HOST, SubprocessServer, serve
from tests.support.stores import require_redis
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

__all__ = ["prefix"]  # the fixture, used by name

TARGET = "tests.apps.multinode_tasks_app:create_app"
MODERN = "2026-07-28"
POLICY = {"retry_ms": 20, "task_after_s": 0, "task_ttl_s": 120, "task_poll_interval_ms": 50}
AWAY_S = 30.0
"""How long the client of the first test stays away."""
NODE_TIMEOUT_S = 2.0
NOT_SERVED = -32601
"""`Method not found`: the app's own answer to `tasks/get`, i.e. the Tasks layer did not serve it."""
MARGIN_S = scaled(2.0)
"""What the owner-death test allows beyond `node_timeout_s` (heartbeats, one poll interval), scaled."""


# ----------------------------------------------------------------------------- a raw 2026-07-28 client
class Poller:
    """2026-07-28 requests with the extension declared, a new connection each."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.next_id = 0

    def _request(
        self, method: str, params: dict[str, Any], name: str
    ) -> tuple[dict[str, Any], dict[str, str]]:
        self.next_id += 1
        meta = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}},
        }
        body = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": {**params, "_meta": meta}}
        headers = {
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": MODERN,
            "mcp-method": method,
            "mcp-name": name,
        }
        return body, headers

    async def send(
        self, method: str, params: dict[str, Any], name: str, *, timeout: float = 10
    ) -> tuple[int, dict[str, Any] | str, int]:
        """HTTP status, the JSON-RPC answer (or the body's text when it carries none) and ``x-node``."""
        body, headers = self._request(method, params, name)
        async with httpx.AsyncClient(
            base_url=self.base_url, timeout=timeout, limits=httpx.Limits(max_keepalive_connections=0)
        ) as client:
            response = await client.post("/mcp", json=body, headers=headers)
        node = int(response.headers.get("x-node", 0))
        text = response.text
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            datas = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
            answers = [json.loads(d) for d in datas if d]
            found = [a for a in answers if a.get("id") == body["id"]]
            return response.status_code, (found[0] if found else text), node
        try:
            answer = response.json()
        except ValueError:
            return response.status_code, text, node
        return response.status_code, answer if isinstance(answer, dict) else text, node

    async def create(self, tool: str, arguments: dict[str, Any]) -> str:
        """A `tools/call` answered with a `CreateTaskResult`: the task id."""
        status, answer, _ = await self.send("tools/call", {"name": tool, "arguments": arguments}, tool)
        assert status == 200 and isinstance(answer, dict), (status, answer)
        result = answer["result"]
        assert result["resultType"] == "task" and result["status"] == "working", answer
        task_id: str = result["taskId"]
        return task_id

    async def get(self, task_id: str) -> tuple[int, dict[str, Any] | str]:
        """One `tasks/get`: (HTTP status, the task, or the JSON-RPC error / body text)."""
        status, answer, _ = await self.send("tasks/get", {"taskId": task_id}, task_id)
        if isinstance(answer, dict) and isinstance(answer.get("result"), dict):
            return status, answer["result"]
        if isinstance(answer, dict) and "error" in answer:
            return status, {"error": answer["error"]}
        return status, answer


def describe(answer: tuple[int, dict[str, Any] | str]) -> str:
    status, body = answer
    if isinstance(body, dict) and "status" in body:
        extra = body.get("statusMessage") or body.get("error") or ""
        return f"{status} {body['status']}{f' ({extra})' if extra else ''}"
    return f"{status} {str(body)[:160]}"


# ----------------------------------------------------------------------------- node processes
@contextlib.asynccontextmanager
async def nodes(
    count: int, prefix: str, *, redis_url: str | None = None, options: dict[str, Any] | None = None
) -> AsyncIterator[tuple[list[SubprocessServer], CutProxy]]:
    """`count` tasks nodes on Redis (``redis_url``, else the shared one) behind a round robin."""
    async with cluster_behind_proxy(
        count, prefix, policy=POLICY, options=options, redis_url=redis_url, target=TARGET
    ) as (servers, proxy):
        yield servers, proxy


async def seen_on(server: SubprocessServer) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=5) as client:
        response = await client.get(f"http://{HOST}:{port_of(server)}/__seen__")
    seen: dict[str, Any] = response.json()
    return seen


# ----------------------------------------------------------------------------- 1. away for 30 s
async def _away_then_poll(poller: Poller, tag: str) -> tuple[str, float, dict[str, Any] | str, int]:
    """Create a 3 s task, drop everything, come back `AWAY_S` later with one `tasks/get`."""
    task_id = await poller.create("slow", {"seconds": 3.0, "tag": tag})
    created_at = time.monotonic()  # the client's connection is closed: it is gone
    await anyio.sleep(AWAY_S)
    status, task = await poller.get(task_id)
    return task_id, time.monotonic() - created_at, task, status


@pytest.mark.timeout(90)
async def test_a_client_gone_after_its_create_task_result_gets_the_result_30_s_later_memory() -> None:
    SEEN.finished.clear()
    SEEN.cancelled.clear()
    policy = Policy(**{k: v for k, v in POLICY.items()})
    app = resumable(create_app(), policy=policy, store=MemoryStore(), tasks=True)
    async with serve(app) as info:
        task_id, away, task, status = await _away_then_poll(Poller(info.base_url), "away-memory")
    print(f"\nmemory: polled {away:.1f}s after the CreateTaskResult: {describe((status, task))}")
    assert status == 200 and isinstance(task, dict), task
    assert task["taskId"] == task_id and task["status"] == "completed", task
    assert task["result"]["content"][0]["text"] == "slept away-memory" and task["result"]["isError"] is False
    assert "away-memory" in SEEN.finished and "away-memory" not in SEEN.cancelled


@pytest.mark.timeout(90)
async def test_a_client_gone_after_its_create_task_result_gets_the_result_30_s_later_redis(
    prefix: str,
) -> None:
    """Two nodes on Redis: created on A, the client gone, polled once through B 30 s later."""
    async with nodes(2, prefix) as ((a, b), proxy):
        poller = Poller(proxy.base_url)
        await steer(proxy, port_of(a))
        task_id = await poller.create("slow", {"seconds": 3.0, "tag": "away-redis"})
        created_at = time.monotonic()
        await anyio.sleep(AWAY_S)
        await steer(proxy, port_of(b))
        status, answer, node = await poller.send("tasks/get", {"taskId": task_id}, task_id)
        away = time.monotonic() - created_at
        on_a, on_b = await seen_on(a), await seen_on(b)
    assert isinstance(answer, dict), answer
    task = answer.get("result")
    print(f"\nredis: polled through {'B' if node == pid_of(b) else node} {away:.1f}s later: {answer}")
    assert status == 200 and node == pid_of(b) and isinstance(task, dict), answer
    assert task["taskId"] == task_id and task["status"] == "completed", task
    assert task["result"]["content"][0]["text"] == "slept away-redis" and task["result"]["isError"] is False
    assert on_a["finished"] == ["away-redis"] and on_a["cancelled"] == [] and on_b["started"] == []


# ----------------------------------------------------------------------------- 2. the owner killed
@pytest.mark.timeout(60)
async def test_the_owner_killed_mid_task_turns_it_failed_through_the_surviving_node(prefix: str) -> None:
    async with nodes(2, prefix, options={"node_timeout_s": NODE_TIMEOUT_S}) as ((a, b), proxy):
        poller = Poller(proxy.base_url)
        await steer(proxy, port_of(a))
        task_id = await poller.create("slow", {"seconds": 60, "tag": "orphan"})
        proxy.backend_ports = [port_of(b)]  # from now on every request goes to B
        first = await poller.get(task_id)
        assert first[0] == 200 and isinstance(first[1], dict) and first[1]["status"] == "working", first
        assert (await seen_on(a))["started"] == ["orphan"]
        a.kill()
        killed_at = time.monotonic()
        seen: list[str] = []
        answer = first
        with anyio.move_on_after(NODE_TIMEOUT_S + MARGIN_S):
            while True:
                answer = await poller.get(task_id)
                if not seen or seen[-1] != describe(answer):
                    seen.append(describe(answer))
                body = answer[1]
                if not (isinstance(body, dict) and body.get("status") == "working"):
                    break
                await anyio.sleep(0.1)
        took = time.monotonic() - killed_at
    print(f"\nowner killed; through B for {took:.1f}s: {seen}")
    status, task = answer
    assert status == 200 and isinstance(task, dict), answer
    assert task.get("status") == "failed", f"after {took:.1f}s: {seen}"
    assert took <= NODE_TIMEOUT_S + MARGIN_S
    error = task["error"]
    assert isinstance(error.get("code"), int) and "stopped" in error["message"], task


# ----------------------------------------------------------------------------- 3. Redis restarted
async def _poll_until_settled(poller: Poller, task_id: str, within_s: float, log: list[str]) -> Any:
    """Poll every 0.1 s until the task is terminal or unknown, or `within_s` passed; log changes.
    A 503 (the store is down: retry) is polled through."""
    answer: tuple[int, dict[str, Any] | str] = (0, "")
    with anyio.move_on_after(scaled(within_s)):
        while True:
            try:
                answer = await poller.get(task_id)
            except httpx.HTTPError as exc:
                answer = (0, f"{type(exc).__name__}: {exc}")
            line = describe(answer)
            if not log or log[-1] != line:
                log.append(line)
            body = answer[1]
            if isinstance(body, dict) and (
                body.get("status") in ("completed", "failed", "cancelled")
                or ("error" in body and answer[0] != 503 and body["error"].get("code") != NOT_SERVED)
            ):
                break
            await anyio.sleep(0.1)
    return answer


async def _restart_during_task(
    redis_server: RedisServer, poller: Poller, task_id: str, down_s: float, log: list[str]
) -> None:
    """SIGKILL Redis, poll through the outage for `down_s` (logging what the client is told), start it."""
    log.append("created; then " + describe(await poller.get(task_id)))
    redis_server.kill()
    down_at = time.monotonic()
    with anyio.move_on_after(down_s):
        while True:
            line = "down: " + describe(await poller.get(task_id))
            if log[-1] != line:
                log.append(line)
            await anyio.sleep(0.25)
    redis_server.start()
    log.append(f"redis back after {time.monotonic() - down_at:.1f}s")


@pytest.mark.timeout(60)
async def test_redis_restarted_while_the_tool_runs_the_task_still_completes(prefix: str) -> None:
    """Durable Redis (AOF, fsync on every write) SIGKILLed 0 s into a 4 s task, back 1 s later:
    the task is found again and polled to its result."""
    require_redis()
    log: list[str] = []
    with own_redis(durable=True) as redis_server:
        async with nodes(1, prefix, redis_url=redis_server.url) as ((a,), proxy):
            poller = Poller(proxy.base_url)
            task_id = await poller.create("slow", {"seconds": 4.0, "tag": "restart-mid-run"})
            await _restart_during_task(redis_server, poller, task_id, 1.0, log)
            status, task = await _poll_until_settled(poller, task_id, 15, log)
            on_a = await seen_on(a)
    print(f"\ndown mid-run: {' -> '.join(log)}; the tool: {on_a}")
    assert on_a["finished"] == ["restart-mid-run"], on_a
    assert status == 200 and isinstance(task, dict) and task.get("status") == "completed", log
    assert task["taskId"] == task_id and task["result"]["content"][0]["text"] == "slept restart-mid-run"


@pytest.mark.timeout(60)
async def test_redis_down_when_the_tool_returns_the_task_ends_clearly_once_it_is_back(prefix: str) -> None:
    """Durable Redis SIGKILLed right after the `CreateTaskResult` of a 1.5 s task, back 3 s later
    (the tool returned meanwhile): the answer the store could not take is held and written once it
    is back, so the task is found and completed with its result - never 'working' or unknown.
    (It stayed 'working' until its TTL: nothing wrote the answer the store had refused.)"""
    require_redis()
    log: list[str] = []
    with own_redis(durable=True) as redis_server:
        async with nodes(1, prefix, redis_url=redis_server.url) as ((a,), proxy):
            poller = Poller(proxy.base_url)
            task_id = await poller.create("slow", {"seconds": 1.5, "tag": "restart-at-finish"})
            await _restart_during_task(redis_server, poller, task_id, 3.0, log)
            status, task = await _poll_until_settled(poller, task_id, 15, log)
            on_a = await seen_on(a)
    print(f"\ndown at finish: {' -> '.join(log)}; the tool: {on_a}")
    assert on_a["finished"] == ["restart-at-finish"], on_a
    assert status == 200 and isinstance(task, dict) and task.get("taskId") == task_id, log
    assert task["status"] == "completed", log
    assert task["result"]["content"][0]["text"] == "slept restart-at-finish", task


@pytest.mark.timeout(60)
async def test_tasks_get_during_a_store_outage_says_retry_not_method_not_found(prefix: str) -> None:
    require_redis()
    with own_redis(durable=True) as redis_server:
        async with nodes(1, prefix, redis_url=redis_server.url) as (_, proxy):
            poller = Poller(proxy.base_url)
            task_id = await poller.create("slow", {"seconds": 3.0, "tag": "outage-poll"})
            redis_server.kill()
            answers = [await poller.get(task_id) for _ in range(3)]
            redis_server.start()
    print(f"\ntasks/get while Redis is down: {[describe(a) for a in answers]}")
    for status, body in answers:
        assert status == 503, describe((status, body))
        assert isinstance(body, dict) and body["error"]["code"] != NOT_SERVED, body


@pytest.mark.timeout(60)
async def test_redis_in_memory_only_restarted_the_task_ends_with_a_reason(prefix: str) -> None:
    """Redis without persistence (`--save "" --appendonly no`) restarted 0.5 s into a 3 s task: the
    store forgot it. Unknown (-32602) until the tool returns; then `failed`, its statusMessage saying
    the store lost the request's stream (not `cancelled`: nobody cancelled it), promptly."""
    require_redis()
    log: list[str] = []
    with own_redis(durable=False) as redis_server:
        async with nodes(1, prefix, redis_url=redis_server.url) as ((a,), proxy):
            poller = Poller(proxy.base_url)
            task_id = await poller.create("slow", {"seconds": 3.0, "tag": "forgotten"})
            await _restart_during_task(redis_server, poller, task_id, 0.5, log)
            answer: tuple[int, dict[str, Any] | str] = (0, "")
            started = time.monotonic()
            while time.monotonic() - started < scaled(6):  # past the tool's end, every answer logged
                answer = await poller.get(task_id)
                line = f"{time.monotonic() - started:.1f}s: {describe(answer)}"
                if not log[-1].endswith(describe(answer)):
                    log.append(line)
                await anyio.sleep(0.1)
            on_a = await seen_on(a)
    print(f"\nin-memory Redis restarted: {' -> '.join(log)}; the tool: {on_a}")
    _status, task = answer
    assert on_a["finished"] == ["forgotten"], on_a
    assert isinstance(task, dict) and task.get("status") == "failed", log
    assert "store lost" in task["statusMessage"] and task["error"]["message"] == task["statusMessage"], task
    assert not any("cancelled" in line for line in log), log
