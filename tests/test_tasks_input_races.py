"""A call that becomes a task at once (`task_after_s=0`) and whose app answers at once, on both stores.

The race of issue 20 item 2 seen from the other side: the tool does not end near the deadline,
the app answers as soon as it has read the request (an `InputRequiredResult` on 2026-07-28; a
plain result in a 2025 session). The answer that makes the call a task (the deadline frame,
opened by the core's `DECIDE` as soon as the app read the request) is then on its way - waiting
for the store to attach its connection, or to write the task's record - when the app returns.
Before 74cdcc3 the request was concluded without it: a 2026-07-28 request's stream was freed
as a plain request's is (`expiry.forget`, `survives_close` not set yet), so the task read
`cancelled` ("stopped before it produced a result") instead of `input_required`, and the ASGI
call returned with the answer half written (httpx: "peer closed connection without sending
complete message body"; uvicorn: "ASGI callable returned without completing response"). On
Redis under load (two CPU burners) `tests/test_tasks_input.py` lost about 1 case in 10 that way.

Each case is forced: the app's answer is held (`AnswerGate`) until the task's answer waits in
the store (`PausingStore`), then the app answers and returns, then the store call goes on.
"""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tests.apps.tasks_app import SEEN, create_app
from tests.support.asgi import replaying
from tests.support.pausing_store import Held, PausingStore
from tests.support.raw import RawSession
from tests.support.timing import scaled
from tests.test_tasks import AT_ONCE, created, store_kind, wrapped
from tests.test_tasks_input import ELICITING, YES, until_status, update
from tests.test_tasks_result_races import HOLD_POINTS, engine_of, hold, stream_held, until_the_app_is_done

pytestmark = pytest.mark.anyio
__all__ = ["store_kind"]  # the store fixture (memory, Redis) of test_tasks.py


class AnswerGate:
    """The app, except that its next `tools/call` answer (its `http.response.start`) waits, once
    the app sends it, until the test lets it go: the task's answer gets ahead of the app's."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.next: Held | None = None

    def hold_next(self) -> Held:
        self.next = Held("answer", lambda value: True, operation="answer")
        return self.next

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        held = self.next
        if held is None or scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        first = await receive()
        if b'"tools/call"' not in first.get("body", b"") or self.next is not held:
            await self.app(scope, replaying(first, receive), send)
            return
        self.next = None

        async def gated_send(message: Message) -> None:
            if message["type"] == "http.response.start" and not held._released.is_set():
                await held._hold("answer", "")
            await send(message)

        await self.app(scope, replaying(first, receive), gated_send)


async def forced(gate: AnswerGate, store: PausingStore, point: str, app: Any, call: Any) -> Any:
    """Run `call()` with the task's answer held at `point` while the app answers and returns."""
    engine = engine_of(app)
    answer = gate.hold_next()
    held = hold(store, point, engine)
    results: list[Any] = []

    async def run() -> None:
        try:
            results.append(await call())
        except Exception as exc:  # (the answer cut short: what this test is about)
            results.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        try:
            await held.reached()  # the task's answer waits: attaching, or writing the record
            await answer.reached()  # and the app has its own answer ready
            answer.release()  # the app answers at once, and returns
            await until_the_app_is_done(engine, stream_held(held))
        finally:
            answer.release()
            held.release()
    return results[0]


@pytest.mark.parametrize("point", HOLD_POINTS)
async def test_an_input_required_result_answered_while_the_task_answer_is_made_is_that_tasks_input(
    point: str,
) -> None:
    gate = AnswerGate(create_app())
    async with wrapped(AT_ONCE, factory=lambda: gate, wrap=PausingStore) as h:
        assert isinstance(h.store, PausingStore)
        answer = await forced(
            gate,
            h.store,
            point,
            h.app,
            lambda: h.call("confirm", {"filename": "race.txt"}, capabilities=ELICITING),
        )
        assert isinstance(answer, dict), f"the answer was cut short: {answer!r}"
        task_id = created(answer)
        task = await until_status(h, task_id, "input_required")
        ((key, request),) = task["inputRequests"].items()
        assert request["params"]["message"] == "Delete race.txt?"
        assert (await update(h, task_id, {key: YES})).json()["result"] == {"resultType": "complete"}
        done = await until_status(h, task_id, "completed")
        assert done["result"]["content"][0]["text"] == "deleted race.txt"


@pytest.mark.parametrize("point", HOLD_POINTS)
async def test_a_2025_sessions_call_answered_while_its_task_answer_is_made_is_answered_whole(
    point: str,
) -> None:
    tag = f"input-race-{uuid.uuid4().hex[:8]}"
    gate = AnswerGate(create_app())
    async with wrapped(AT_ONCE, factory=lambda: gate, wrap=PausingStore) as h:
        assert isinstance(h.store, PausingStore)
        session = RawSession(h.client)
        await session.initialize(capabilities=ELICITING)
        call = session.tool_call("slow", {"seconds": 0, "tag": tag})

        async def exchange() -> dict[str, Any]:
            reply = await session.exchange("POST", "/mcp", call)
            message: dict[str, Any] = reply.messages()[-1]
            return message

        answer = await forced(gate, h.store, point, h.app, exchange)
        assert isinstance(answer, dict), f"the answer was cut short: {answer!r}"
        task_id = created(answer)

        async def get() -> dict[str, Any]:
            body = {
                "jsonrpc": "2.0",
                "id": session.next_id(),
                "method": "tasks/get",
                "params": {"taskId": task_id},
            }
            response = await h.client.post("/mcp", json=body, headers=session.headers())
            result: dict[str, Any] = response.json()["result"]
            return result

        with anyio.fail_after(scaled(15)):
            while (task := await get())["status"] == "working":
                await anyio.sleep(0.05)
        assert task["status"] == "completed", task
        assert task["result"]["content"][0]["text"] == f"slept {tag}"
        assert SEEN.started.count(tag) == 1
