"""A task that needs the client's input (`input_required`, `tasks/update`), end to end on both stores.

The app is a stock `MCPServer` whose tools ask the SDK's way (`Resolve` + `Elicit`):
on 2026-07-28 an `InputRequiredResult` (multi round-trip requests), on a 2025 session
an `elicitation/create` request on the call's stream. The task shows either as
`input_required` with `inputRequests`; `tasks/update` delivers the answers as the app
expects them.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from mcp_resume_asgi import RESUMABLE_STREAMS_EXTENSION
from mcp_resume_asgi.tasks.record import EXTENSION
from tests.support.raw import RawSession
from tests.support.timing import scaled
from tests.test_tasks import AT_ONCE, Harness, created, store_kind, wrapped

pytestmark = pytest.mark.anyio
__all__ = ["store_kind"]  # the store fixture (memory, Redis) of test_tasks.py

ELICITING = {"elicitation": {}, "extensions": {EXTENSION: {}}}
YES = {"action": "accept", "content": {"confirm": True}}


async def until_status(h: Harness, task_id: str, status: str, timeout: float = 10) -> dict[str, Any]:
    with anyio.fail_after(scaled(timeout)):
        while True:
            task = await h.get(task_id)
            if task["status"] == status:
                return task
            assert task["status"] in ("working", "input_required"), task
            await anyio.sleep(0.05)


async def update(h: Harness, task_id: str, responses: Any) -> Any:
    response = await h.task("tasks/update", task_id, inputResponses=responses, capabilities=ELICITING)
    return response


@pytest.mark.slow
async def test_an_input_required_result_makes_the_task_input_required_and_tasks_update_resumes_it() -> None:
    async with wrapped() as h:
        task_id = created(await h.call("confirm", {"filename": "a.txt"}, capabilities=ELICITING))
        task = await until_status(h, task_id, "input_required")
        assert "requestState" not in task and "result" not in task
        (key, request), *others = task["inputRequests"].items()
        assert not others and request["method"] == "elicitation/create"
        assert request["params"]["message"] == "Delete a.txt?"
        assert (await h.get(task_id))["inputRequests"] == task["inputRequests"], "the same key on every poll"
        # Unknown keys are ignored (acknowledged, nothing changes).
        ignored = await update(h, task_id, {"no-such-key": YES})
        assert ignored.status_code == 200 and ignored.json()["result"] == {"resultType": "complete"}
        assert (await h.get(task_id))["status"] == "input_required"
        acked = await update(h, task_id, {key: YES})
        assert acked.json()["result"] == {"resultType": "complete"}
        done = await until_status(h, task_id, "completed")
        assert done["result"]["content"][0]["text"] == "deleted a.txt"
        again = await update(h, task_id, {key: YES})  # already answered: ignored
        assert again.status_code == 200 and (await h.get(task_id))["status"] == "completed"


@pytest.mark.slow
async def test_a_partial_answer_keeps_the_task_waiting_for_the_rest() -> None:
    async with wrapped() as h:
        task_id = created(await h.call("two_questions", {}, capabilities=ELICITING))
        task = await until_status(h, task_id, "input_required")
        first, second = sorted(task["inputRequests"])
        await update(h, task_id, {first: {"action": "accept", "content": {"name": "Ada"}}})
        waiting = await h.get(task_id)
        assert waiting["status"] == "input_required" and list(waiting["inputRequests"]) == [second]
        # The answered key again (another value) is ignored: its first answer stands.
        await update(h, task_id, {first: {"action": "accept", "content": {"name": "Eve"}}})
        await update(h, task_id, {second: {"action": "accept", "content": {"name": "Bob"}}})
        done = await until_status(h, task_id, "completed")
        assert sorted(done["result"]["content"][0]["text"].split(" and ")) == ["Ada", "Bob"]


async def test_a_malformed_answer_is_invalid_params_and_answers_nothing() -> None:
    async with wrapped() as h:
        task_id = created(await h.call("confirm", {"filename": "b.txt"}, capabilities=ELICITING))
        key = next(iter((await until_status(h, task_id, "input_required"))["inputRequests"]))
        for bad in ({key: "yes"}, [YES], None):
            response = await update(h, task_id, bad)
            assert response.status_code == 400 and response.json()["error"]["code"] == -32602
        assert list((await h.get(task_id))["inputRequests"]) == [key]


@pytest.mark.slow
async def test_cancelling_a_task_that_waits_for_input() -> None:
    async with wrapped() as h:
        task_id = created(await h.call("confirm", {"filename": "c.txt"}, capabilities=ELICITING))
        key = next(iter((await until_status(h, task_id, "input_required"))["inputRequests"]))
        assert (await h.task("tasks/cancel", task_id)).json()["result"] == {"resultType": "complete"}
        assert (await h.get(task_id))["status"] == "cancelled"
        await update(h, task_id, {key: YES})  # too late: nothing runs again
        await anyio.sleep(0.5)
        assert (await h.get(task_id))["status"] == "cancelled"


@pytest.mark.slow
async def test_input_before_the_task_exists_stays_synchronous() -> None:
    async with wrapped(AT_ONCE.replace(task_after_s=1.0)) as h:
        answer = await h.call("confirm", {"filename": "d.txt"}, capabilities=ELICITING)
        result = answer["result"]
        assert result["resultType"] == "input_required" and "taskId" not in result
        ((key, _),) = result["inputRequests"].items()
        params = {"filename": "d.txt"}
        body = h.body("tools/call", {"name": "confirm", "arguments": params}, ELICITING)
        body["params"] |= {"inputResponses": {key: YES}, "requestState": result.get("requestState")}
        reply = await RawSession(h.client, version="2026-07-28").exchange(
            "POST", "/mcp", body, headers=h.headers("tools/call", "confirm")
        )
        final = reply.messages()[-1] if reply.events else reply.json()
        assert final["result"]["content"][0]["text"] == "deleted d.txt"


@pytest.mark.slow
async def test_a_2025_session_answers_the_apps_elicitation_through_tasks_update() -> None:
    async with wrapped() as h:
        session = RawSession(h.client)
        await session.initialize(capabilities=ELICITING)
        reply = await session.exchange("POST", "/mcp", session.tool_call("confirm", {"filename": "e.txt"}))
        task_id = created(reply.messages()[-1])

        async def call(method: str, **params: Any) -> dict[str, Any]:
            body = {"jsonrpc": "2.0", "id": session.next_id(), "method": method, "params": params}
            response = await h.client.post("/mcp", json=body, headers=session.headers())
            return response.json()  # type: ignore[no-any-return]

        with anyio.fail_after(scaled(10)):
            while (task := (await call("tasks/get", taskId=task_id))["result"])["status"] != "input_required":
                assert task["status"] == "working", task
                await anyio.sleep(0.05)
        ((key, request),) = task["inputRequests"].items()
        assert request["method"] == "elicitation/create" and "id" not in request
        assert (await call("tasks/update", taskId=task_id, inputResponses={key: YES}))["result"] == {
            "resultType": "complete"
        }
        with anyio.fail_after(scaled(10)):
            while (task := (await call("tasks/get", taskId=task_id))["result"])["status"] != "completed":
                assert task["status"] in ("working", "input_required"), task
                await anyio.sleep(0.05)
        assert task["result"]["content"][0]["text"] == "deleted e.txt"
        again = await call("tasks/update", taskId=task_id, inputResponses={key: YES})
        assert again["result"] == {"resultType": "complete"}


@pytest.mark.slow
async def test_a_2025_session_declares_the_extension_yet_the_app_never_sees_it() -> None:
    async with wrapped() as h:
        session = RawSession(h.client)
        await session.initialize(capabilities={"extensions": {EXTENSION: {}, "x.example/other": {}}})
        seen = await session.exchange("POST", "/mcp", session.tool_call("declared_extensions", {}))
        answer = seen.messages()[-1]
        task_id = created(answer)  # the session declared it: its calls become tasks
        with anyio.fail_after(scaled(10)):
            while True:
                body = {
                    "jsonrpc": "2.0",
                    "id": session.next_id(),
                    "method": "tasks/get",
                    "params": {"taskId": task_id},
                }
                task = (await h.client.post("/mcp", json=body, headers=session.headers())).json()["result"]
                if task["status"] == "completed":
                    break
                await anyio.sleep(0.05)
        assert task["result"]["content"][0]["text"] == "x.example/other", (
            "the app saw only the other extension"
        )


async def test_a_2026_request_declaring_the_middlewares_extensions_reaches_the_app_without_them() -> None:
    async with wrapped() as h:
        declared = {"extensions": {EXTENSION: {}, RESUMABLE_STREAMS_EXTENSION: {}, "x.example/other": {}}}
        task_id = created(await h.call("declared_extensions", {}, capabilities=declared))
        task = await h.until_terminal(task_id)
        assert task["result"]["content"][0]["text"] == "x.example/other", "only the app's own extension"
