"""A task's record is sealed: one rewritten in the store runs nothing (memory and Redis).

A task record decides who runs what: its call (tool and arguments) is what `tasks/update`
runs for the next round, as the caller. A stock `MCPServer` task waits for its client's input
(`confirm_then_work`); its record is then rewritten in the store to call another tool with
other arguments, in the clear, as whoever can write to the store would - and the client's
`tasks/update` comes: the forged call does not run, and the refusal is logged with why. Left
as it was, the same update runs the round.
"""

from __future__ import annotations

import json
import logging
import uuid

import anyio
import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_resume_asgi.tasks.stored import task_key
from tests.apps.tasks_app import SEEN, create_app
from tests.support.timing import scaled
from tests.test_tasks import created, store_kind, wrapped
from tests.test_tasks_input import ELICITING, YES, until_status, update

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
__all__ = ["store_kind"]  # the store fixture (memory, Redis) of test_tasks.py


def forged(stored: str, tag: str) -> str:
    """The stored record `stored`, its call turned into `slow(tag=tag)`, in the clear."""
    outer = json.loads(stored)
    record = json.loads(outer["sealed"]) if "sealed" in outer else outer
    record["call"]["params"]["name"] = "slow"
    record["call"]["params"]["arguments"] = {"seconds": 0.1, "tag": tag}
    return json.dumps(record)


class Recording:
    """The app, with every request body it is sent kept (`bodies`)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def kept() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                self.bodies.append(message.get("body", b""))
            return message

        await self.app(scope, kept, send)


async def test_a_rewritten_task_record_runs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    mine, theirs = f"mine-{uuid.uuid4().hex[:8]}", f"forged-{uuid.uuid4().hex[:8]}"
    recording = Recording(create_app())
    caplog.set_level(logging.DEBUG, logger="mcp_resume_asgi.tasks.stored")  # (warned once a minute)
    async with wrapped(factory=lambda: recording) as h:
        answer = await h.call("confirm_then_work", {"seconds": 0.1, "tag": mine}, capabilities=ELICITING)
        task_id = created(answer)
        key = next(iter((await until_status(h, task_id, "input_required"))["inputRequests"]))
        record_key = task_key(h.stream_of(task_id))
        stored = await h.store.get_key(record_key)
        assert stored is not None
        await h.store.set_key(record_key, forged(stored, theirs), 600)
        await update(h, task_id, {key: YES})
        await anyio.sleep(0.5)  # (the round the update would issue, had it run)
        # (The first round's end may write the record again meanwhile, from what this node holds
        # of it: then the client's own round runs, never the forged one.)
        assert theirs not in SEEN.started, "the forged call did not run"
        # (The SDK's own request-state binding would refuse it too: it must not reach the app.)
        assert not [body for body in recording.bodies if theirs.encode() in body], (
            "nor was it sent to the app"
        )
    assert "its record in the store is refused" in caplog.text


async def test_the_same_record_left_as_it_was_runs_its_round() -> None:
    mine = f"mine-{uuid.uuid4().hex[:8]}"
    async with wrapped() as h:
        answer = await h.call("confirm_then_work", {"seconds": 0.1, "tag": mine}, capabilities=ELICITING)
        task_id = created(answer)
        key = next(iter((await until_status(h, task_id, "input_required"))["inputRequests"]))
        await update(h, task_id, {key: YES})
        with anyio.fail_after(scaled(10)):
            while mine not in SEEN.finished:
                await anyio.sleep(0.05)
