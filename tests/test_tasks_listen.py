"""`notifications/tasks` on a stock `MCPServer`'s own `subscriptions/listen` stream, both stores.

The app serves the listen stream (its acknowledgement, its list-changed notifications) and
knows nothing of tasks; the middleware names the agreed task ids in the acknowledgement and
writes each change of those tasks onto the stream. A task id that is not the caller's is
left out, and a client that did not declare the extension gets -32021.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from mcp_resume_asgi.tasks.listen import ListenStream, notification, requested_task_ids
from tests.support.timing import scaled
from tests.test_tasks import DECLARED, Harness, created, store_kind, wrapped
from tests.test_tasks_input import ELICITING, YES, update

pytestmark = pytest.mark.anyio
__all__ = ["store_kind"]  # the store fixture (memory, Redis) of test_tasks.py

META = "io.modelcontextprotocol/subscriptionId"


class Listener:
    """One `subscriptions/listen` stream, read message by message."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.lines = response.aiter_lines()

    async def next(self, timeout: float = 10) -> dict[str, Any]:
        data: list[str] = []
        with anyio.fail_after(scaled(timeout)):
            async for line in self.lines:
                if line.startswith("data:"):
                    data.append(line[5:].lstrip())
                elif not line and data:
                    message: dict[str, Any] = json.loads("\n".join(data))
                    return message
        raise AssertionError("the listen stream ended")

    async def task_updates(self, task_id: str, until: str, timeout: float = 10) -> list[dict[str, Any]]:
        """The `notifications/tasks` for `task_id` up to the first with status `until`."""
        seen: list[dict[str, Any]] = []
        with anyio.fail_after(scaled(timeout)):
            while True:
                message = await self.next(timeout)
                if message.get("method") != "notifications/tasks":
                    continue
                params = message["params"]
                assert params["taskId"] == task_id, message
                seen.append(params)
                if params["status"] == until:
                    return seen


@contextlib.asynccontextmanager
async def listening(
    h: Harness, task_ids: list[Any], capabilities: dict[str, Any] | None = DECLARED
) -> AsyncIterator[tuple[Listener, dict[str, Any]]]:
    body = h.body(
        "subscriptions/listen",
        {"notifications": {"taskIds": task_ids, "toolsListChanged": True}},
        capabilities,
    )
    async with h.client.stream(
        "POST", "/mcp", json=body, headers=h.headers("subscriptions/listen", None)
    ) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        listener = Listener(response)
        ack = await listener.next()
        assert ack["method"] == "notifications/subscriptions/acknowledged", ack
        assert ack["params"]["_meta"][META] == body["id"]
        yield listener, ack


@pytest.mark.slow
async def test_a_listen_stream_carries_each_change_of_the_callers_task_to_its_end() -> None:
    async with wrapped() as h:
        task_id = created(await h.call("slow", {"seconds": 1.0, "tag": "listened"}))
        unknown = "not-a-task"
        async with listening(h, [task_id, unknown, task_id]) as (listener, ack):
            notifications = ack["params"]["notifications"]
            assert notifications["taskIds"] == [task_id], "the caller's task, once; the unknown id left out"
            assert notifications.get("toolsListChanged") is True, "the app's own part of the answer is kept"
            updates = await listener.task_updates(task_id, "completed")
        first, *_, last = updates
        assert first["status"] == "working" and first["_meta"][META] == ack["params"]["_meta"][META]
        assert last["result"]["content"][0]["text"] == "slept listened"
        assert "resultType" not in last
        polled = await h.get(task_id)
        assert {k: v for k, v in last.items() if k != "_meta"} == {
            k: v for k, v in polled.items() if k != "resultType"
        }, "each notification is what tasks/get answers"


@pytest.mark.slow
async def test_input_required_then_the_answer_then_completion_all_arrive_on_the_stream() -> None:
    async with wrapped() as h:
        task_id = created(await h.call("confirm", {"filename": "l.txt"}, capabilities=ELICITING))
        async with listening(h, [task_id]) as (listener, _):
            waiting = (await listener.task_updates(task_id, "input_required"))[-1]
            (key,) = waiting["inputRequests"]
            assert (await update(h, task_id, {key: YES})).status_code == 200
            after = await listener.task_updates(task_id, "completed")
        assert after[-1]["result"]["content"][0]["text"] == "deleted l.txt"
        assert all(u["status"] in ("working", "completed") for u in after), after


async def test_a_cancel_arrives_as_cancelled() -> None:
    async with wrapped() as h:
        task_id = created(await h.call("slow", {"seconds": 30.0, "tag": "cancel-listened"}))
        async with listening(h, [task_id]) as (listener, _):
            assert (await listener.task_updates(task_id, "working"))[-1]["status"] == "working"
            assert (await h.task("tasks/cancel", task_id)).status_code == 200
            cancelled = (await listener.task_updates(task_id, "cancelled"))[-1]
        assert cancelled["statusMessage"]


@pytest.mark.slow
async def test_a_client_that_did_not_declare_the_extension_gets_32021() -> None:
    async with wrapped() as h:
        task_id = created(await h.call("slow", {"seconds": 0.5}))
        body = h.body("subscriptions/listen", {"notifications": {"taskIds": [task_id]}}, {})
        response = await h.client.post("/mcp", json=body, headers=h.headers("subscriptions/listen", None))
        assert response.status_code == 400
        assert response.json()["error"]["code"] == -32021


async def test_a_listen_without_task_ids_is_the_apps_alone() -> None:
    async with wrapped() as h:
        body = h.body("subscriptions/listen", {"notifications": {"toolsListChanged": True}}, DECLARED)
        async with h.client.stream(
            "POST", "/mcp", json=body, headers=h.headers("subscriptions/listen", None)
        ) as response:
            ack = await Listener(response).next()
        assert ack["params"]["notifications"] == {"toolsListChanged": True}


# ---------------------------------------------------------------------------- no event loop
def test_requested_ids_are_deduplicated_bounded_and_strings_only() -> None:
    assert requested_task_ids({}) is None
    assert requested_task_ids({"notifications": {"toolsListChanged": True}}) is None
    assert requested_task_ids({"notifications": {"taskIds": ["a", 1, "a", None, "b"]}}) == ["a", "b"]
    assert len(requested_task_ids({"notifications": {"taskIds": [str(i) for i in range(500)]}}) or []) == 32


def _sse(message: dict[str, Any]) -> bytes:
    return b"event: message\ndata: " + json.dumps(message).encode() + b"\n\n"


def test_own_frames_go_between_the_apps_never_inside_one() -> None:
    stream = ListenStream(5, ["t1"])
    start = {
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"content-type", b"text/event-stream")],
    }
    assert stream.feed(start) == [start]
    ack = {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {"notifications": {}},
    }
    out = stream.feed({"type": "http.response.body", "body": _sse(ack), "more_body": True})
    assert stream.acked and b'"taskIds":["t1"]' in out[0]["body"], out
    changed = _sse({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    out = stream.feed({"type": "http.response.body", "body": changed[:20], "more_body": True})
    assert stream.add(notification({"taskId": "t1", "status": "working"}, 5)) is None, "queued mid-frame"
    out += stream.feed({"type": "http.response.body", "body": changed[20:], "more_body": True})
    assert b"".join(m["body"] for m in out).startswith(changed), "the app's frame whole, then ours"
    assert b"notifications/tasks" in out[-1]["body"]
    end = {"type": "http.response.body", "body": b"", "more_body": False}
    stream.feed(end)
    assert stream.add(notification({"taskId": "t1", "status": "completed"}, 5)) is None, (
        "nothing after the end"
    )
