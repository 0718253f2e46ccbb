"""A task-creating call retried with its `Idempotency-Key`: the same task, never a second run.

A client that lost the answer to a `tools/call` sends it again with the same
`Idempotency-Key`. The engine finds the request the key started (`engine/retried_posts.py`:
the key is scoped by session, else by principal; the app must admit the caller to
that request's stream, whose principal is the one the app's auth saw; the body must
be the same) and asks this layer before it attaches the retry to that stream. The
retry gets what the original got, or would have got:

* The call became a task: its `CreateTaskResult`, the same task id and `createdAt`,
  from the task's record - on any node, however long after, finished or not. Never the
  request's stream: the answer to a task-creating call is the task, and a 2026-07-28
  client cannot resume a stream.
* It runs here and may still become one (`task_after_s` not over yet, or over while no
  connection of the original's was there to turn it into the task): the retry takes
  the original's place with the rest of its deadline, counted from the original's
  arrival. It is answered as the original would have been: the task (made once, by the
  original's own `create`, so one record and one id) or, if the app answers first, the
  plain result. The tool runs once either way.
* It runs on another node and is not a task yet: the retry is relayed there, to be
  answered the same way.
* It became a task whose stream is gone (cancelling a task frees it): its
  `CreateTaskResult` still, from the record, once the app admits the caller to the task
  as it does for `tasks/get` (the engine had no stream to admit it to).
* It ended without becoming a task: its stream (the plain result), as for any retry.

Where a close is a cancel (2026-07-28), the original's client closing before its call
became a task cancelled the call, as without a key; its retry then finds a cancelled
request, as any retry of a cancelled request does.

`decide` is the whole choice, made on plain data; `RetriedCall` gathers that data and
carries the choice out.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.types import Receive, Send

from mcp_resume_asgi.engine.port import BecomingTask, Delivery, RequestContext
from mcp_resume_asgi.store.base import StreamMeta, StreamState
from mcp_resume_asgi.tasks.capability import CLIENT_CAPABILITIES_META
from mcp_resume_asgi.tasks.operations import admit_to_task
from mcp_resume_asgi.tasks.record import EXTENSION, TaskRecord, create_task_result
from mcp_resume_asgi.tasks.stored import read_record
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.replies import send_json
from mcp_resume_asgi.wire.scope_keys import RELAYED_FROM

logger = logging.getLogger(__name__)

Relay = Callable[[RequestContext, Receive, Send, StreamMeta], Awaitable[bool]]
"""Relays a request to the node running the stream `meta` (True), if another, alive, one does."""


class Answer(enum.Enum):
    TASK = "task"
    """It became a task: answer that task's `CreateTaskResult`."""
    JOIN = "join"
    """It runs here and may still become one: take the original's place, with the rest of its deadline."""
    RELAY = "relay"
    """It runs on another node and is not a task yet: that node answers."""
    STREAM = "stream"
    """It is not a task and will not become one here: its stream, as for any retried POST."""


@dataclass(frozen=True, slots=True)
class Found:
    """What a retry finds of the call it repeats."""

    stream_id: str
    record: TaskRecord | None
    """The record stored under the stream's task key (`task:<stream id>`), if any."""
    running: bool
    """The store has the request running (its final answer not recorded, not expired)."""
    becoming_here: bool
    """It runs on this node with a deadline to become a task, and is not answered yet."""
    owner_elsewhere: bool
    """Another node runs it, and this retry was not relayed here from one already."""


def decide(found: Found) -> Answer:
    """How a retried task-creating call is answered (see the module docstring)."""
    if found.record is not None and found.record.stream_id == found.stream_id:
        return Answer.TASK
    if not found.running:
        return Answer.STREAM
    if found.becoming_here:
        return Answer.JOIN
    if found.owner_elsewhere:
        return Answer.RELAY
    return Answer.STREAM


def rest_of_deadline(answer_by: float, now: float) -> float:
    """How long a retry waits for the original's deadline (0: past, it becomes the task now)."""
    return max(0.0, answer_by - now)


def as_sent(message: dict[str, Any]) -> dict[str, Any]:
    """The call with the extension declared again where its client declared it (the per-request
    capabilities this layer took out of what the app sees): what a relay sends on, for the
    node it goes to takes it out again, to the same call (and so the same digest)."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    capabilities = meta.get(CLIENT_CAPABILITIES_META) if isinstance(meta, dict) else None
    if not isinstance(params, dict) or not isinstance(meta, dict) or not isinstance(capabilities, dict):
        return message  # declared at `initialize` (2025 revisions): the session says it again
    extensions = capabilities.get("extensions")
    extensions = {**(extensions if isinstance(extensions, dict) else {}), EXTENSION: {}}
    meta = {**meta, CLIENT_CAPABILITIES_META: {**capabilities, "extensions": extensions}}
    return {**message, "params": {**params, "_meta": meta}}


class RetriedCall:
    """Answers the retries of one task-creating call (`Engine.handle_request`'s `on_retry`)."""

    def __init__(
        self,
        ctx: RequestContext,
        receive: Receive,
        send: Send,
        *,
        task_id: Callable[[TaskRecord], str],
        relay: Relay,
    ) -> None:
        self.ctx = ctx
        self.receive = receive
        self.send = send
        self.task_id = task_id
        self.relay = relay

    async def answer(self, stream_id: str, meta: StreamMeta | None, after_seq: int) -> bool:
        """Answer the retry of the call whose stream is `meta` (admitted: the caller's and the
        same call) or, None, is gone (the same call; not admitted yet); False leaves it to the
        engine, which attaches it to that stream (or answers that it is gone)."""
        ctx, port = self.ctx, self.ctx.port
        record = await read_record(port.store, port.signer, stream_id)
        # What runs here is asked of the engine by the stream's id (a stream gone: nothing).
        becoming = port.becoming_task(stream_id) if meta is not None else None
        live = meta is not None and port.is_live(stream_id)
        found = Found(
            stream_id=stream_id,
            record=record,
            running=meta is not None and meta.state is StreamState.RUNNING,
            becoming_here=becoming is not None,
            owner_elsewhere=(
                meta is not None and not live and meta.owner != port.node_id and RELAYED_FROM not in ctx.scope
            ),
        )
        answer = decide(found)
        logger.debug("stream %s: a retried task-creating call: %s", stream_id, answer.value)
        if answer is Answer.TASK:
            assert record is not None
            refusal = await admit_to_task(port, ctx.scope, record, None) if meta is None else None
            if refusal is not None:
                await refusal.send(self.send)
                return True
            result = create_task_result(self.task_id(record), record)
            headers = [] if ctx.session_id is None else [(b"mcp-session-id", ctx.session_id.encode())]
            await send_json(
                self.send, 200, {"jsonrpc": "2.0", "id": ctx.request_id, "result": result}, headers
            )
            return True
        if answer is Answer.JOIN:
            assert becoming is not None and meta is not None
            await self._join(becoming, meta, after_seq)
            return True
        if answer is Answer.RELAY:
            assert meta is not None
            sent = dataclasses.replace(ctx, body=p.dumps(as_sent(ctx.message)))
            return await self.relay(sent, self.receive, self.send, meta)
        return False

    async def _join(self, becoming: BecomingTask, meta: StreamMeta, after_seq: int) -> None:
        """Serve the retry as the original's connection would have been served from now on."""
        original, answer_by = becoming.delivery, becoming.answer_by
        assert original.on_deadline is not None
        become_task = original.on_deadline
        delivery = Delivery(deadline_s=rest_of_deadline(answer_by, time.monotonic()), at_will=False)

        async def on_deadline(cursor: int) -> bytes:
            frame = await become_task(cursor)  # the original's: one task, made once
            delivery.survives_close = original.survives_close
            return frame

        delivery.on_deadline = on_deadline
        await self.ctx.port.serve(self.ctx.scope, self.receive, self.send, meta, after_seq, delivery)
