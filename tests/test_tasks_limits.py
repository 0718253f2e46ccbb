"""The bound on task records per principal (`Policy.max_tasks_per_principal`, issue 13), end to
end: a stock `MCPServer` app wrapped with `resumable(app, tasks=True)`, memory store and Redis.

A call over its caller's bound is not made a task: known before the app runs (no auth: the
shared anonymous bound), it is served as a plain request; found only when it was to become a
task (auth inside the app), a 2025-11-25 client resumes its stream for the plain result and a
2026-07-28 one gets a JSON-RPC error (its call cancelled). See `mcp_resume_asgi/tasks/limits.py`.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import anyio
import pytest

from mcp_resume_asgi import Policy
from mcp_resume_asgi.client import sdk_http_client, sdk_tasks_extension
from mcp_resume_asgi.tasks.limits import ANONYMOUS_INDEX, TOO_MANY_TASKS, index_of
from tests.apps.tasks_app import SEEN
from tests.support.raw import RawSession
from tests.support.timing import scaled
from tests.test_tasks import (  # the Tasks tests' harness, over both stores
    AT_ONCE,
    DECLARED,
    Harness,
    store_kind,  # noqa: F401 - the autouse store parametrisation
    wrapped,
)

pytestmark = pytest.mark.anyio

ALICE = '["oauth","shared-app","https://issuer.example","alice"]'
BOB = '["oauth","shared-app","https://issuer.example","bob"]'


def is_task(answer: dict[str, Any]) -> bool:
    return answer.get("result", {}).get("resultType") == "task"


def plain_text(answer: dict[str, Any]) -> str:
    result = answer["result"]
    assert result.get("resultType", "complete") == "complete" and "content" in result, answer
    return "".join(block["text"] for block in result["content"])


async def until(condition: Any, timeout: float = 10) -> None:
    with anyio.fail_after(scaled(timeout)):
        while not await condition():
            await anyio.sleep(0.02)


@pytest.mark.slow
async def test_a_caller_at_its_bound_gets_plain_results_until_a_task_expires() -> None:
    ttl_s = scaled(1.5)  # the checks below run before the first task expires, on a loaded machine too
    policy = AT_ONCE.replace(max_tasks_per_principal=2, task_ttl_s=ttl_s)
    async with wrapped(policy) as h:
        first = await h.call("slow", {"seconds": 0.2, "tag": "bound-1"})
        assert is_task(first) and is_task(await h.call("slow", {"seconds": 0.2, "tag": "bound-2"}))
        created_at = time.time()  # both tasks were created before this
        over = await h.call("slow", {"seconds": 0.2, "tag": "bound-3"})
        assert plain_text(over) == "slept bound-3", "over the bound: the plain result"
        assert await h.store.index_count(ANONYMOUS_INDEX) == 2
        assert (await h.get(first["result"]["taskId"]))["status"] == "completed", "finished, still counted"
        await anyio.sleep(max(0.0, created_at + ttl_s + 0.1 - time.time()))
        assert await h.store.index_count(ANONYMOUS_INDEX) == 0, "the records expired, and their places"
        assert is_task(await h.call("slow", {"seconds": 0.2, "tag": "bound-4"}))


@pytest.mark.slow
async def test_concurrent_calls_never_pass_the_bound() -> None:
    cap, calls = 3, 12
    async with wrapped(AT_ONCE.replace(max_tasks_per_principal=cap)) as h:
        answers: dict[str, dict[str, Any]] = {}

        async def call(tag: str) -> None:
            answers[tag] = await h.call("slow", {"seconds": 1.5, "tag": tag})

        async with anyio.create_task_group() as tg:
            run = uuid.uuid4().hex[:8]  # (SEEN lives as long as the process)
            for i in range(calls):
                tg.start_soon(call, f"race-{run}-{i}")
        tasks = [tag for tag, answer in answers.items() if is_task(answer)]
        refused = [tag for tag, answer in answers.items() if "error" in answer]
        plain = [tag for tag in answers if tag not in tasks and tag not in refused]
        assert len(tasks) == cap and len(answers) == calls
        assert await h.store.index_count(ANONYMOUS_INDEX) == cap
        for tag in plain:
            assert plain_text(answers[tag]) == f"slept {tag}"
        for tag in refused:  # lost the race for the last place when it was to become a task
            error = answers[tag]["error"]
            assert error["code"] == TOO_MANY_TASKS and error["data"] == {"maxTasks": cap}, error
        with anyio.move_on_after(scaled(10)):
            while not all(tag in SEEN.cancelled for tag in refused):
                await anyio.sleep(0.05)
        # (Said when it fails: whether a refused call's tool ran to its end, or is still running.)
        not_stopped = {
            tag: "finished" if tag in SEEN.finished else "not stopped yet"
            for tag in refused
            if tag not in SEEN.cancelled
        }
        assert not not_stopped, f"a refused call's tool was not stopped: {not_stopped}"
        for tag in tasks:
            assert (await h.until_terminal(answers[tag]["result"]["taskId"]))["status"] == "completed"
        assert not any(tag in SEEN.finished for tag in refused), "a refused call's tool was stopped"


@pytest.mark.slow
async def test_each_principal_has_its_own_bound_and_a_2026_client_over_it_gets_an_error() -> None:
    """Auth inside the app: who calls is known once the app read the request, when the call is
    to become a task; a 2026-07-28 client cannot come back for a plain result."""
    from tests.apps.auth_app import create_app as auth_app

    alice = {"authorization": "Bearer token-alice"}
    async with wrapped(AT_ONCE.replace(max_tasks_per_principal=1), factory=auth_app) as h:
        assert is_task(await h.call("whoami", {"seconds": 1.0, "steps": 1}, **alice))
        over = await h.call("whoami", {"seconds": 1.0, "steps": 1}, **alice)
        assert over["error"]["code"] == TOO_MANY_TASKS and over["error"]["data"] == {"maxTasks": 1}
        assert "1 tasks" in over["error"]["message"]
        bob = await h.call("whoami", {"seconds": 0.3, "steps": 1}, authorization="Bearer token-bob")
        assert is_task(bob), "another principal's bound is its own"
        assert await h.store.index_count(index_of(ALICE)) == 1
        assert await h.store.index_count(index_of(BOB)) == 1
        assert await h.store.index_count(ANONYMOUS_INDEX) == 0


async def _legacy_session(h: Harness, **headers: str) -> RawSession:
    session = RawSession(h.client)
    original = session.headers

    def with_auth(**extra: str) -> dict[str, str]:
        return original(**headers, **extra)

    session.headers = with_auth  # type: ignore[method-assign]
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize"}
    init["params"] = {  # type: ignore[assignment]
        "protocolVersion": "2025-11-25",
        "capabilities": DECLARED,
        "clientInfo": {"name": "raw", "version": "0"},
    }
    reply = await session.exchange("POST", "/mcp", init, headers={**session.opening_headers(), **headers})
    session.session_id = reply.headers.get("mcp-session-id")
    await session.notify("notifications/initialized")
    return session


@pytest.mark.slow
async def test_a_2025_client_over_its_bound_resumes_its_stream_for_the_plain_result() -> None:
    from tests.apps.auth_app import create_app as auth_app

    alice = {"authorization": "Bearer token-alice"}
    policy = AT_ONCE.replace(max_tasks_per_principal=1, retry_ms=50)
    async with wrapped(policy, factory=auth_app) as h:
        session = await _legacy_session(h, **alice)
        first = await session.exchange(
            "POST", "/mcp", session.tool_call("whoami", {"seconds": 1.0, "steps": 1})
        )
        assert is_task(first.messages()[-1])
        over = await session.exchange(
            "POST", "/mcp", session.tool_call("whoami", {"seconds": 0.8, "steps": 2})
        )
        assert over.closed_by_server and over.messages() == [], "closed before any answer, to be resumed"
        assert over.last_id is not None and over.events[-1].retry == 50
        resumed = await session.exchange("GET", "/mcp", headers=session.headers(last_event_id=over.last_id))
        answer = resumed.messages()[-1]
        assert plain_text(answer) == "the secret of alice" and "id" in answer
        assert await h.store.index_count(index_of(ALICE)) == 1


@pytest.mark.slow
async def test_the_stock_sdk_client_gets_a_plain_result_over_the_bound() -> None:
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    async with wrapped(AT_ONCE.replace(max_tasks_per_principal=1)) as h:
        url = str(h.client.base_url).rstrip("/") + "/mcp"
        async with (
            sdk_http_client() as http,
            Client(
                streamable_http_client(url, http_client=http), extensions=[sdk_tasks_extension()]
            ) as client,
        ):
            results: dict[str, Any] = {}

            async def call(tag: str, seconds: float) -> None:
                results[tag] = await client.call_tool("slow", {"seconds": seconds, "tag": tag})

            async def one_task_held() -> bool:
                return await h.store.index_count(ANONYMOUS_INDEX) == 1

            with anyio.fail_after(scaled(20)):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(call, "sdk-task", 1.5)
                    await until(one_task_held)
                    await call("sdk-plain", 0.2)
        assert results["sdk-task"].content[0].text == "slept sdk-task"
        assert results["sdk-plain"].content[0].text == "slept sdk-plain"
        assert await h.store.index_count(ANONYMOUS_INDEX) == 1


def test_the_policy_bound_is_a_positive_int_or_none() -> None:
    assert Policy().max_tasks_per_principal == 1000
    assert Policy(max_tasks_per_principal=None).max_tasks_per_principal is None
    for bad in (0, -1, True, 1.5, "10"):
        with pytest.raises(ValueError):
            Policy(max_tasks_per_principal=bad)  # type: ignore[arg-type]


def test_a_principals_index_is_a_bounded_digest() -> None:
    assert index_of(None) == ANONYMOUS_INDEX
    huge = "x" * 100_000
    assert index_of(huge) == index_of(huge) != index_of(huge + "y")
    assert len(index_of(huge)) == len("tasks:") + 32 and "x" not in index_of(huge).removeprefix("tasks:")
    assert index_of("\udc80 lone surrogate").startswith("tasks:")
