"""A task-creating `tools/call` retried with its `Idempotency-Key` (`tasks/retries.py`), end to end.

A stock `MCPServer` app wrapped with `resumable(app, tasks=True)`, on the memory store and
Redis, at 2026-07-28 (the extension declared per request) and 2025-11-25 (declared at
`initialize`). What must hold:

* a call that became a task, retried with the same key, gets the same `CreateTaskResult`
  (same taskId, same `createdAt`), never the request's stream, and the tool ran once;
* a retry that arrives before the call became a task (within `task_after_s`) is answered
  as the original would have been: the same task at the original's deadline (counted from
  the original's arrival), or the plain result if the tool ends first; the tool runs once;
* another principal's retry with the same key never sees the task.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from tests.apps.tasks_app import SEEN
from tests.support.raw import RawSession, Reply
from tests.support.timing import scaled
from tests.test_tasks import AT_ONCE, DECLARED, MODERN, Harness, created, store_kind, wrapped

pytestmark = pytest.mark.anyio
__all__ = ["store_kind"]  # the store fixture (memory, Redis) of test_tasks.py

ERAS = pytest.mark.parametrize("legacy", [False, True], ids=["2026-07-28", "2025-11-25"])


class Caller(RawSession):
    """One client: 2026-07-28, the extension declared in each request's `_meta`, or a
    2025-11-25 session that declared it at `initialize`; with a bearer token if given."""

    def __init__(self, client: httpx.AsyncClient, legacy: bool, token: str | None = None) -> None:
        super().__init__(client, version="2025-11-25" if legacy else MODERN)
        self.legacy = legacy
        self.token = token

    @classmethod
    async def start(cls, h: Harness, legacy: bool, token: str | None = None) -> Caller:
        caller = cls(h.client, legacy, token)
        if legacy:
            reply = await caller.initialize(capabilities=DECLARED)
            assert reply.status == 200 and caller.session_id, reply.raw
        return caller

    def headers(self, **extra: str) -> dict[str, str]:
        headers = super().headers(**extra)
        if self.token is not None:
            headers["authorization"] = f"Bearer {self.token}"
        return headers

    def opening_headers(self) -> dict[str, str]:
        headers = super().opening_headers()
        if self.token is not None:
            headers["authorization"] = f"Bearer {self.token}"
        return headers

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if not self.legacy:
            params = {
                **params,
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": MODERN,
                    "io.modelcontextprotocol/clientCapabilities": DECLARED,
                },
            }
        return {"jsonrpc": "2.0", "id": self.next_id(), "method": method, "params": params}

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return self.request("tools/call", {"name": tool, "arguments": arguments})

    def headers_for(self, body: dict[str, Any], key: str | None = None) -> dict[str, str]:
        extra = {} if key is None else {"idempotency_key": key}
        if not self.legacy:
            params = body["params"]
            extra.update(mcp_method=body["method"], mcp_name=params.get("name") or params["taskId"])
        return self.headers(**extra)

    async def post(self, body: dict[str, Any], key: str | None = None) -> tuple[Reply, dict[str, Any] | None]:
        """The reply, and the JSON-RPC answer to `body` in it (None if there is none)."""
        reply = await self.exchange("POST", "/mcp", body, headers=self.headers_for(body, key))
        if reply.events:
            answers = [m for m in reply.messages() if m.get("id") == body["id"] and "method" not in m]
            return reply, answers[-1] if answers else None
        try:
            answer = json.loads(reply.raw)
        except ValueError:
            return reply, None
        return reply, answer if isinstance(answer, dict) and answer.get("id") == body["id"] else None

    @contextlib.asynccontextmanager
    async def in_flight(self, body: dict[str, Any], key: str) -> AsyncIterator[list[Any]]:
        """`body` POSTed on a connection of its own, kept open until the block ends (its client
        lost it; the server has not noticed): the messages it got, as they come.
        (The server holds its answer's headers for the app's first answer or the task deadline.)"""
        got: list[Any] = []

        async def hold() -> None:
            async with self.open("POST", "/mcp", body, self.headers_for(body, key)) as (response, reader):
                assert response.status_code == 200
                async for event in reader:
                    if event.data:
                        got.append(event.message)
            await anyio.sleep_forever()

        tag = body["params"]["arguments"]["tag"]
        async with anyio.create_task_group() as tg:
            tg.start_soon(hold)
            with anyio.fail_after(scaled(10)):
                while tag not in SEEN.started:  # it has arrived (the app runs it)
                    await anyio.sleep(0.01)
            yield got
            tg.cancel_scope.cancel()

    async def get(self, task_id: str) -> dict[str, Any]:
        _, answer = await self.post(self.request("tasks/get", {"taskId": task_id}))
        assert answer is not None and "result" in answer, answer
        result: dict[str, Any] = answer["result"]
        return result

    async def until_terminal(self, task_id: str, timeout: float = 10) -> dict[str, Any]:
        with anyio.fail_after(scaled(timeout)):
            while (task := await self.get(task_id))["status"] == "working":
                await anyio.sleep(0.05)
        return task


def new_key() -> str:
    return f"k-{uuid.uuid4().hex}"


def task_of(answer: dict[str, Any] | None) -> dict[str, Any]:
    assert answer is not None and "result" in answer, answer
    result: dict[str, Any] = answer["result"]
    assert result["resultType"] == "task" and result["status"] == "working", answer
    return result


@ERAS
@pytest.mark.slow
async def test_a_retry_of_a_call_that_became_a_task_gets_the_same_task(legacy: bool) -> None:
    tag = f"retried-{uuid.uuid4().hex[:8]}"
    async with wrapped() as h:
        caller = await Caller.start(h, legacy)
        call, key = caller.call("slow", {"seconds": 1.0, "tag": tag}), new_key()
        _, first = await caller.post(call, key)
        task = task_of(first)
        created(first)  # the shape `create_task_result` gives (ttl, poll interval, times)
        # The answer was lost: the same call again, the same key.
        reply, again = await caller.post(call, key)
        assert reply.status == 200 and again == first, (first, again)
        assert not reply.events, "the task, not the request's stream"
        done = await caller.until_terminal(task["taskId"])
        assert done["status"] == "completed" and done["result"]["content"][0]["text"] == f"slept {tag}"
        _, after_the_end = await caller.post(call, key)
        assert after_the_end == first, "still the answer the call had: its task"
        assert SEEN.started.count(tag) == 1, "the tool ran once"


@ERAS
@pytest.mark.slow
async def test_a_retry_before_the_call_became_a_task_becomes_the_same_task_at_its_deadline(
    legacy: bool,
) -> None:
    """The original's connection is still open (its client lost it; the server did not notice)."""
    tag = f"early-{uuid.uuid4().hex[:8]}"
    # The retry must arrive before the deadline (2 s): ample on a loaded machine too.
    async with wrapped(AT_ONCE.replace(task_after_s=2.0)) as h:
        caller = await Caller.start(h, legacy)
        call, key = caller.call("slow", {"seconds": 4.0, "tag": tag}), new_key()
        started = anyio.current_time()
        async with caller.in_flight(call, key) as original:
            assert not original, "no answer yet: it is not a task yet"
            reply, answer = await caller.post(call, key)
            took = anyio.current_time() - started
        # A task (not the plain result: the tool still ran), and not before the deadline.
        task = task_of(answer)
        assert tag not in SEEN.finished, "answered at the deadline, not at the tool's end"
        assert took > 1.9, f"answered {took:.2f}s after the original arrived (task_after_s=2.0)"
        assert reply.status == 200
        done = await caller.until_terminal(task["taskId"])
        assert done["status"] == "completed" and done["result"]["content"][0]["text"] == f"slept {tag}"
        _, again = await caller.post(call, key)
        assert again == answer, "one task: a later retry gets the same one"
        assert SEEN.started.count(tag) == 1, "the tool ran once"


@ERAS
@pytest.mark.slow
async def test_a_retry_before_the_deadline_gets_the_plain_result_when_the_tool_ends_first(
    legacy: bool,
) -> None:
    tag = f"plain-{uuid.uuid4().hex[:8]}"
    async with wrapped(AT_ONCE.replace(task_after_s=3.0)) as h:
        caller = await Caller.start(h, legacy)
        call, key = caller.call("slow", {"seconds": 0.8, "tag": tag}), new_key()
        async with caller.in_flight(call, key) as original:
            assert not original, "no answer yet"
            reply, answer = await caller.post(call, key)
        assert reply.status == 200 and answer is not None, reply.raw
        assert answer["result"]["content"][0]["text"] == f"slept {tag}", answer
        assert answer["result"].get("resultType", "complete") == "complete"
        later, again = await caller.post(call, key)
        if legacy:
            assert again == answer, "the same plain result, from its stream"
        else:
            # Nothing of a 2026-07-28 request is kept once answered, unless it is a task: its key
            # is known and its stream gone or going, so the retry is told 409, 404 or gets an
            # empty stream, by timing (the engine's, not this layer's), never a second run.
            assert again is None or again == answer, (later.status, later.raw)
        assert SEEN.started.count(tag) == 1, "the tool ran once"


@pytest.mark.slow
async def test_a_2025_retry_after_the_deadline_of_a_call_whose_client_vanished_makes_the_task() -> None:
    """On 2025-11-25 a close does not cancel: a call whose client left before its deadline
    runs on, not a task yet (no connection to answer); its retry makes it the task at once."""
    tag = f"vanished-{uuid.uuid4().hex[:8]}"
    async with wrapped(AT_ONCE.replace(task_after_s=0.5)) as h:
        caller = await Caller.start(h, legacy=True)
        call, key = caller.call("slow", {"seconds": 2.5, "tag": tag}), new_key()
        async with caller.in_flight(call, key) as original:
            assert not original  # and its client goes before its answer's headers
        await anyio.sleep(1.0)
        _, answer = await caller.post(call, key)
        task = task_of(answer)
        assert tag not in SEEN.finished, "its deadline is past: a task at once, not at the tool's end"
        done = await caller.until_terminal(task["taskId"])
        assert done["result"]["content"][0]["text"] == f"slept {tag}" and tag not in SEEN.cancelled
        _, again = await caller.post(call, key)
        assert again == answer
        assert SEEN.started.count(tag) == 1, "the tool ran once"


async def test_a_2026_call_whose_client_closed_before_it_became_a_task_was_cancelled() -> None:
    """On 2026-07-28 closing the stream cancels the call, key or not, until it is a task: its
    retry gets no answer (the request is gone) and does not run the tool again."""
    tag = f"closed-{uuid.uuid4().hex[:8]}"
    async with wrapped(AT_ONCE.replace(task_after_s=1.0)) as h:
        caller = await Caller.start(h, legacy=False)
        call, key = caller.call("slow", {"seconds": 2.5, "tag": tag}), new_key()
        async with caller.in_flight(call, key) as original:
            assert not original  # and its client goes before its answer's headers
        with anyio.fail_after(scaled(5)):
            while tag not in SEEN.cancelled:
                await anyio.sleep(0.05)
        reply, answer = await caller.post(call, key)
        # Told it is gone: 409 once its stream is freed (404 or an empty stream just before).
        assert answer is None and reply.status in (200, 404, 409), (reply.status, reply.raw)
        assert SEEN.started.count(tag) == 1, "the tool did not run again"


@ERAS
@pytest.mark.slow
async def test_another_principals_retry_with_the_same_key_never_sees_the_task(legacy: bool) -> None:
    from tests.apps.auth_app import create_app as auth_app

    async with wrapped(factory=auth_app) as h:
        alice = await Caller.start(h, legacy, "token-alice")
        call, key = alice.call("whoami", {"seconds": 1.0, "steps": 2}), new_key()
        _, first = await alice.post(call, key)
        task = task_of(first)
        bob = await Caller.start(h, legacy, "token-bob")
        if legacy:
            # Bob's session scopes his key: the same call and key is a call of his own.
            _, his = await bob.post(call, key)
            assert task_of(his)["taskId"] != task["taskId"]
            done = await bob.until_terminal(task_of(his)["taskId"])
            assert done["result"]["content"][0]["text"] == "the secret of bob"
            # Presenting alice's session gets the app's own refusal.
            intruder = Caller(h.client, legacy, "token-bob")
            intruder.session_id = alice.session_id
            reply, answer = await intruder.post(call, key)
        else:
            reply, answer = await bob.post(call, key)
        assert reply.status == 404 and answer is None, (reply.status, reply.raw)
        assert task["taskId"] not in reply.raw.decode() and "alice" not in reply.raw.decode()
        _, again = await alice.post(call, key)
        assert again == first, "alice still gets her task"
        done = await alice.until_terminal(task["taskId"])
        assert done["result"]["content"][0]["text"] == "the secret of alice"


@pytest.mark.slow
async def test_a_plain_idempotent_retry_while_the_originals_answer_is_held_keeps_the_stream() -> None:
    """Not a task (no extension declared): the original's answer waits up to a second for the
    app's first answer (a 2026-07-28 tool answers only when done); a retry meanwhile takes the
    stream, and the original must not take it back when the app answers."""
    tag = f"held-{uuid.uuid4().hex[:8]}"
    async with wrapped() as h:
        caller = await Caller.start(h, legacy=False)
        call, key = caller.call("slow", {"seconds": 0.8, "tag": tag}), new_key()
        call["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = {}
        async with caller.in_flight(call, key) as original:
            reply, answer = await caller.post(call, key)
            assert not original, "the retry has the stream"
        assert reply.status == 200 and answer is not None, (reply.status, reply.raw)
        assert answer["result"]["content"][0]["text"] == f"slept {tag}"
        assert SEEN.started.count(tag) == 1, "the tool ran once"


async def until_freed(h: Harness, task_id: str) -> None:
    """Until the task's stream is gone from the store (a cancelled task's is freed)."""
    stream_id = h.stream_of(task_id)
    with anyio.fail_after(scaled(10)):
        while await h.store.get_stream(stream_id) is not None:
            await anyio.sleep(0.05)


@ERAS
@pytest.mark.slow
async def test_a_retry_of_a_cancelled_task_whose_stream_is_freed_gets_the_same_task(legacy: bool) -> None:
    """Cancelling a task frees its stream; the call retried with its key is answered from the
    task's record - the same `CreateTaskResult`, the task `cancelled` - not 409, not a second run."""
    tag = f"cancelled-{uuid.uuid4().hex[:8]}"
    async with wrapped() as h:
        caller = await Caller.start(h, legacy)
        call, key = caller.call("slow", {"seconds": 5.0, "tag": tag}), new_key()
        _, first = await caller.post(call, key)
        task = task_of(first)
        _, ack = await caller.post(caller.request("tasks/cancel", {"taskId": task["taskId"]}))
        assert ack is not None and ack["result"] == {"resultType": "complete"}, ack
        await until_freed(h, task["taskId"])
        reply, again = await caller.post(call, key)
        assert reply.status == 200 and again == first, (reply.status, reply.raw)
        assert (await caller.get(task["taskId"]))["status"] == "cancelled"
        assert SEEN.started.count(tag) == 1 and tag in SEEN.cancelled, "the tool ran once, cancelled"


@pytest.mark.slow
async def test_a_cancelled_tasks_record_answers_a_retry_only_once_the_app_admits_the_caller() -> None:
    """Bob presenting alice's 2025 session and key, once her cancelled task's stream is freed,
    gets the app's refusal (404), as `tasks/get` of her task would: never her task."""
    from tests.apps.auth_app import create_app as auth_app

    async with wrapped(factory=auth_app) as h:
        alice = await Caller.start(h, True, "token-alice")
        call, key = alice.call("whoami", {"seconds": 5.0, "steps": 2}), new_key()
        _, first = await alice.post(call, key)
        task = task_of(first)
        _, ack = await alice.post(alice.request("tasks/cancel", {"taskId": task["taskId"]}))
        assert ack is not None and ack["result"] == {"resultType": "complete"}, ack
        await until_freed(h, task["taskId"])
        intruder = Caller(h.client, True, "token-bob")
        intruder.session_id = alice.session_id
        reply, answer = await intruder.post(call, key)
        assert reply.status == 404 and answer is None, (reply.status, reply.raw)
        assert task["taskId"] not in reply.raw.decode()
        _, again = await alice.post(call, key)
        assert again == first, "alice still gets her task"
