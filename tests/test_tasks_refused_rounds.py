"""A 2026-07-28 task whose next round the app refuses ends `failed` with the app's error
(issue 20, item 6), end to end on both stores; a `NaN` never reaches the app.

SEP-2663: a task ends `failed` when its request meets a JSON-RPC error, and `tasks/get`
returns what the request would have returned. After `tasks/update`, the task's request is
the call issued again with the answers (MRTR); a stock server refuses answers its schema
rejects (`{"action": "bogus"}`) with an HTTP 400 and a -32602 error - what a plain MRTR
client retrying the call would get - so the task ends `failed` with that error, never
`working` with nothing running. The update itself was taken (its answers were delivered)
and is acknowledged, as the extension's eventually consistent acknowledgement allows.
A body with `NaN` is no JSON: the middleware refuses it as a parse error (400, -32700)
before anything reaches the app, and the task still waits for a correct answer.
"""

from __future__ import annotations

import json

import anyio
import pytest

from tests.test_tasks import Harness, created, store_kind, wrapped
from tests.test_tasks_input import ELICITING, YES, until_status, update

pytestmark = pytest.mark.anyio
__all__ = ["store_kind"]  # the store fixture (memory, Redis) of test_tasks.py


async def settled(h: Harness, task_id: str) -> dict[str, object]:
    """The task once it is neither working nor waiting (the app returned its round)."""
    with anyio.fail_after(10):
        while True:
            task = await h.get(task_id)
            if task["status"] not in ("working", "input_required"):
                return task
            await anyio.sleep(0.05)


@pytest.mark.parametrize("tool", ["confirm", "confirm_then_work"])
async def test_a_round_the_app_refuses_fails_the_task_with_the_apps_error(tool: str) -> None:
    arguments = {"filename": "a.txt"} if tool == "confirm" else {"seconds": 0.1, "tag": "refused"}
    async with wrapped() as h:
        task_id = created(await h.call(tool, arguments, capabilities=ELICITING))
        key = next(iter((await until_status(h, task_id, "input_required"))["inputRequests"]))
        acked = await update(h, task_id, {key: {"action": "bogus"}})
        assert acked.status_code == 200 and acked.json()["result"] == {"resultType": "complete"}
        task = await settled(h, task_id)
        assert task["status"] == "failed", task
        error = task["error"]
        assert isinstance(error, dict) and error["code"] == -32602, error
        assert task["statusMessage"] == error["message"]
        again = await update(h, task_id, {key: YES})  # too late: answered, nothing runs again
        assert again.status_code == 200
        await anyio.sleep(0.3)
        assert await h.get(task_id) == task, "a failed task stays failed"


async def test_a_nan_answer_is_a_parse_error_and_the_task_still_waits() -> None:
    async with wrapped() as h:
        task_id = created(await h.call("confirm", {"filename": "n.txt"}, capabilities=ELICITING))
        task = await until_status(h, task_id, "input_required")
        key = next(iter(task["inputRequests"]))
        body = h.body("tasks/update", {"taskId": task_id, "inputResponses": {key: {}}}, ELICITING)
        raw = json.dumps(body).replace("{}}", '{"action": NaN}}', 1).encode()
        assert b"NaN" in raw
        refused = await h.client.post("/mcp", content=raw, headers=h.headers("tasks/update", task_id))
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["code"] == -32700 and refused.json()["id"] is None
        assert (await h.get(task_id))["inputRequests"] == task["inputRequests"], "nothing was taken"
        await update(h, task_id, {key: YES})
        done = await settled(h, task_id)
        assert done["status"] == "completed" and done["result"]["content"][0]["text"] == "deleted n.txt"
