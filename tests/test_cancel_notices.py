"""A 2026-07-28 client that opted into resumable streams cancels with `notifications/cancelled`.

Its close only detaches (it may resume), so the middleware answers a notice declaring
`RESUMABLE_STREAMS_EXTENSION` itself (`client_cancels.py`): the request the caller has
running under that id - and, if the request carried one, that `Idempotency-Key`, which
the notice repeats - is cancelled (the app sees `http.disconnect`, as after a close) and
its stream freed; the answer is 202 whatever the notice names. Against stock `MCPServer`
apps under uvicorn, raw httpx, memory and Redis stores.
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import httpx
import pytest
from starlette.types import ASGIApp

from mcp_resume_asgi import RESUMABLE_STREAMS_EXTENSION, MemoryStore, Policy, Store, resumable
from tests.apps.tasks_app import SEEN, create_app
from tests.support.raw import ACCEPT_BOTH, SSEReader
from tests.support.server import serve, serve_in_loop
from tests.support.stores import redis_prefix, redis_url, require_redis
from tests.support.timing import scaled
from tests.test_2026_streams import streams_left

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

VERSION = "2026-07-28"
POLICY = Policy(retry_ms=20, max_wait_s=60.0)
TASKS = "io.modelcontextprotocol/tasks"


@contextlib.asynccontextmanager
async def wrapped(
    store_kind: str, factory: Callable[[], ASGIApp] = create_app, **options: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, Store]]:
    if store_kind == "memory":
        store: Store = MemoryStore()
        app = resumable(factory(), policy=POLICY, store=store, **options)
        async with serve(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=10) as client:
            yield client, store
        return
    require_redis()
    from mcp_resume_asgi.store import RedisStore

    redis_store = RedisStore(redis_url(), prefix=redis_prefix("test-cancel"))
    app = resumable(factory(), policy=POLICY, store=redis_store, secret="cancel-tests-secret", **options)
    try:
        async with (
            serve_in_loop(app) as info,
            httpx.AsyncClient(base_url=info.base_url, timeout=10) as client,
        ):
            yield client, redis_store
    finally:
        await redis_store.clear()
        await redis_store.aclose()


def meta(*extensions: str) -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {e: {} for e in extensions}},
    }


def call(
    request_id: Any, tool: str, arguments: dict[str, Any], *extensions: str, progress: bool = False
) -> dict[str, Any]:
    params = {"name": tool, "arguments": arguments, "_meta": meta(RESUMABLE_STREAMS_EXTENSION, *extensions)}
    if progress:  # (the stock SDK then answers with SSE, each progress notification an event)
        params["_meta"]["progressToken"] = f"p{request_id}"
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def notice(request_id: Any, *, opt_in: bool = True) -> dict[str, Any]:
    params = {"requestId": request_id, "reason": "the user pressed stop"}
    params["_meta"] = meta(RESUMABLE_STREAMS_EXTENSION) if opt_in else meta()
    return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}


def headers(method: str, name: str | None = None, **extra: str | None) -> dict[str, str]:
    out = {"accept": ACCEPT_BOTH, "content-type": "application/json", "mcp-protocol-version": VERSION}
    out["mcp-method"] = method
    if name is not None:
        out["mcp-name"] = name
    out.update({k.replace("_", "-"): v for k, v in extra.items() if v is not None})
    return out


async def cancel(client: httpx.AsyncClient, request_id: Any, **extra: str | None) -> int:
    response = await client.post(
        "/mcp", json=notice(request_id), headers=headers("notifications/cancelled", **extra)
    )
    assert response.content == b"" or response.status_code >= 400, response.text
    return response.status_code


class Call:
    """A tool call whose answer is read in the background (`attached`) or dropped after its
    priming event (the opt-in keeps it running)."""

    def __init__(self, client: httpx.AsyncClient, body: dict[str, Any], **extra: str | None) -> None:
        self.client, self.body, self.extra = client, body, extra
        self.messages: list[Any] = []
        self.status: int | None = None
        self.ended = anyio.Event()

    async def run(self, *, attached: bool, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        h = headers("tools/call", self.body["params"]["name"], **self.extra)
        try:
            async with self.client.stream("POST", "/mcp", json=self.body, headers=h) as response:
                self.status = response.status_code
                assert response.status_code == 200, await response.aread()
                task_status.started()
                if response.headers["content-type"].startswith("application/json"):
                    self.messages.append(json.loads(await response.aread()))
                    return
                async for event in SSEReader(response):
                    if event.data:
                        self.messages.append(event.message)
                    if not attached:
                        return  # (the priming event: the stream is resumable, and left)
        finally:
            self.ended.set()

    @property
    def answer(self) -> Any:
        return next((m for m in self.messages if m.get("id") == self.body["id"]), None)


async def until(predicate: Callable[[], bool], within: float) -> bool:
    with anyio.move_on_after(scaled(within)):
        while not predicate():
            await anyio.sleep(0.02)
        return True
    return False


@pytest.mark.parametrize("store_kind", ["memory", "redis"])
@pytest.mark.parametrize("when", ["held", "attached", "detached"])
async def test_a_notice_cancels_the_callers_running_call_at_once_and_frees_its_stream(
    store_kind: str, when: str, caplog: pytest.LogCaptureFixture
) -> None:
    """`held`: before its answer opened (an Idempotency-Key holds it up to 1 s for the app's
    status; the app answers this tool with JSON at its end); `attached`: its SSE answer open;
    `detached`: its client left after the priming event."""
    caplog.set_level(logging.WARNING, logger="mcp_resume_asgi")
    tag = f"cancel-{store_kind}-{when}"
    key = uuid.uuid4().hex
    async with wrapped(store_kind) as (client, store), anyio.create_task_group() as tg:
        first = Call(client, call(1, "slow", {"seconds": 30, "tag": tag}), idempotency_key=key)
        if when == "held":
            tg.start_soon(lambda: first.run(attached=True))
        else:
            await tg.start(
                lambda task_status: first.run(attached=when == "attached", task_status=task_status)
            )
        assert await until(lambda: tag in SEEN.started, 5)
        if when == "detached":
            await first.ended.wait()
            await anyio.sleep(0.3)
            assert tag not in SEEN.cancelled, "a close of an opted-in stream cancelled it"
        assert await cancel(client, 1, idempotency_key=key) == 202
        assert await until(lambda: tag in SEEN.cancelled, 1.0), "the tool was not cancelled promptly"
        assert tag not in SEEN.finished
        with anyio.fail_after(scaled(5)):
            await first.ended.wait()
        assert first.status == 200 and first.answer is None, "a cancelled request was answered"
        assert await streams_left(store) == 0, "the stream of a cancelled request was kept"
        assert await cancel(client, 1, idempotency_key=key) == 202  # again: nothing left to stop
    noisy = [
        r for r in caplog.records if r.name.startswith("mcp_resume_asgi") and r.levelno >= logging.WARNING
    ]
    assert not noisy, [r.getMessage() for r in noisy]


@pytest.mark.parametrize("store_kind", ["memory", "redis"])
async def test_unknown_finished_foreign_and_malformed_notices_are_202_and_change_nothing(
    store_kind: str,
) -> None:
    tag = f"keeps-{store_kind}"
    key = uuid.uuid4().hex
    async with wrapped(store_kind) as (client, _), anyio.create_task_group() as tg:
        done = Call(client, call("done", "echo", {"text": "hi"}), idempotency_key=uuid.uuid4().hex)
        await done.run(attached=True)
        assert done.answer["result"]["content"][0]["text"] == "hi"

        keyed = Call(client, call(5, "slow", {"seconds": 3, "tag": tag}), idempotency_key=key)
        keyless = Call(client, call(6, "slow", {"seconds": 3, "tag": tag + "-keyless"}))
        tg.start_soon(lambda: keyed.run(attached=True))
        tg.start_soon(lambda: keyless.run(attached=True))  # (its answer is JSON, at its end)
        assert await until(lambda: tag in SEEN.started and tag + "-keyless" in SEEN.started, 5)

        assert await cancel(client, 404, idempotency_key=key) == 202  # unknown
        assert await cancel(client, "done") == 202  # finished
        assert await cancel(client, 5) == 202  # anonymous without the call's key: not its caller
        assert await cancel(client, 5, idempotency_key=uuid.uuid4().hex) == 202  # another key
        assert (
            await cancel(client, 5, idempotency_key="k" * 256) == 202
        )  # a key no request may carry (too long)
        assert await cancel(client, 6) == 202  # an anonymous call without a key: no notice names it
        for bad in ({"requestId": 5.0}, {"requestId": {"id": 5}}, {}):
            body = notice(5)
            body["params"] = {**bad, "_meta": body["params"]["_meta"]}
            response = await client.post(
                "/mcp", json=body, headers=headers("notifications/cancelled", idempotency_key=key)
            )
            assert response.status_code == 202
        # Without the extension it is the app's (the stock SDK acknowledges and drops it).
        plain = await client.post(
            "/mcp",
            json=notice(5, opt_in=False),
            headers=headers("notifications/cancelled", idempotency_key=key),
        )
        assert plain.status_code == 202
        assert tag not in SEEN.finished and tag + "-keyless" not in SEEN.finished, "too late to tell"
        with anyio.fail_after(scaled(10)):
            await keyed.ended.wait()
            await keyless.ended.wait()
    assert keyed.answer["result"]["content"][0]["text"] == f"slept {tag}"
    assert keyless.answer["result"]["content"][0]["text"] == f"slept {tag}-keyless"
    assert tag not in SEEN.cancelled and tag + "-keyless" not in SEEN.cancelled


@pytest.mark.parametrize("store_kind", ["memory", "redis"])
async def test_a_notice_names_only_its_principals_call_and_never_one_of_two(store_kind: str) -> None:
    """alice and bob (two users of one OAuth client) both run call 7: bob's notice cancels his
    own; alice's two calls numbered 9 are both named by her notice: neither is cancelled."""
    from tests.apps.auth_app import create_app as auth_app

    alice, bob = "Bearer token-alice", "Bearer token-bob"
    async with wrapped(store_kind, auth_app) as (client, _), anyio.create_task_group() as tg:
        args = {"seconds": 2.0, "steps": 20}
        calls = {
            "alice 7": Call(client, call(7, "whoami", args, progress=True), authorization=alice),
            "bob 7": Call(client, call(7, "whoami", args, progress=True), authorization=bob),
            "alice 9": Call(client, call(9, "whoami", args, progress=True), authorization=alice),
            "alice 9 again": Call(client, call(9, "whoami", args, progress=True), authorization=alice),
        }
        for one in calls.values():
            await tg.start(lambda task_status, one=one: one.run(attached=True, task_status=task_status))
        assert await until(lambda: all(c.messages for c in calls.values()), 5)
        assert await cancel(client, 7) == 401  # the app's own refusal of a caller without credentials
        assert await cancel(client, 7, authorization=bob) == 202
        assert await cancel(client, 9, authorization=alice) == 202
        assert not any(c.answer for c in calls.values()), "too late to tell"
        with anyio.fail_after(scaled(10)):
            for one in calls.values():
                await one.ended.wait()
    texts = {name: c.answer and c.answer["result"]["content"][0]["text"] for name, c in calls.items()}
    assert texts == {
        "alice 7": "the secret of alice",
        "bob 7": None,
        "alice 9": "the secret of alice",
        "alice 9 again": "the secret of alice",
    }
    assert len(calls["bob 7"].messages) < 20, "bob's call ran to its end"


async def test_a_call_that_became_a_task_is_not_cancelled_by_a_notice_naming_its_request() -> None:
    """Its request was answered (`CreateTaskResult`); the task is cancelled with `tasks/cancel`."""
    tag = "a-task"
    key = uuid.uuid4().hex
    app = resumable(create_app(), policy=POLICY.replace(task_after_s=0, task_ttl_s=60), tasks=True)
    async with serve(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=10) as client:
        body = call(3, "slow", {"seconds": 1.0, "tag": tag}, TASKS)
        response = await client.post(
            "/mcp", json=body, headers=headers("tools/call", "slow", idempotency_key=key)
        )
        answer = next(m for m in _messages(response) if m.get("id") == 3)
        assert answer["result"]["resultType"] == "task", answer
        assert await cancel(client, 3, idempotency_key=key) == 202
        assert await until(lambda: tag in SEEN.finished, 5), SEEN
    assert tag not in SEEN.cancelled


def _messages(response: httpx.Response) -> list[Any]:
    if response.headers.get("content-type", "").startswith("application/json"):
        return [response.json()]
    return [
        json.loads(line[5:])
        for line in response.text.splitlines()
        if line.startswith("data:") and line[5:].strip()
    ]
