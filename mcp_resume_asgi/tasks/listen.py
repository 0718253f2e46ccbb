"""`notifications/tasks` on the app's `subscriptions/listen` stream (SEP-2663, SEP-2575).

A 2026-07-28 client may ask, in `subscriptions/listen`, to be told when its tasks
change (`notifications.taskIds`) instead of polling. The app serves that stream -
its acknowledgement, its list-changed notifications - but knows nothing of tasks:
the middleware takes `taskIds` out of what the app sees, adds the ids it agreed to
(the caller's own tasks; others are unknown and left out) to the app's
acknowledgement, and writes a `notifications/tasks` - the `DetailedTask`
`tasks/get` would answer, tagged with the subscription id - onto the same stream
whenever one of those tasks changes, until the task ends or the stream does.
An app that does not serve `subscriptions/listen` answers with its own error, and
clients poll, as the extension allows.

The task's status is derived from its request's stream, so a change wakes whoever
waits on that stream (`Store.wait`); what changes only the task's record (a cancel
between rounds, the next round) touches the stream for the same effect (`touch`).
The stream editing (acknowledgement, frame boundaries) is plain code here
(`ListenStream`); the async part only waits and writes.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from starlette.types import Message, Receive, Send

from mcp_resume_asgi.engine.port import RequestContext
from mcp_resume_asgi.tasks.advertising import AdvertisingAnswer
from mcp_resume_asgi.tasks.record import TERMINAL
from mcp_resume_asgi.tasks.stored import read_task
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.sse import encode_payload

if TYPE_CHECKING:
    from mcp_resume_asgi.engine.port import EnginePort, Records
    from mcp_resume_asgi.store.base import StreamMeta
    from mcp_resume_asgi.tasks.record import TaskRecord
    from mcp_resume_asgi.tasks.stored import Final

logger = logging.getLogger(__name__)

LISTEN = "subscriptions/listen"
ACKNOWLEDGED = "notifications/subscriptions/acknowledged"
NOTIFICATION = "notifications/tasks"
SUBSCRIPTION_ID_META = "io.modelcontextprotocol/subscriptionId"


class TaskLookup(Protocol):
    """The Tasks layer's answers about one task, as a listen stream asks them
    (`operations.TaskRequests`)."""

    async def resolve(self, ctx: RequestContext, task_id: str) -> str | None:
        """The task's stream id if the caller may see the task, else None."""
        ...

    async def detailed(
        self, port: EnginePort, task_id: str, record: TaskRecord, meta: StreamMeta | None, final: Final = ...
    ) -> dict[str, Any]:
        """The task as `tasks/get` answers it."""
        ...


class TasksLayer(Protocol):
    """What a listen stream uses of the Tasks layer (`middleware.TasksMiddleware`), so that this
    module, which the layer imports, does not import it back."""

    @property
    def requests(self) -> TaskLookup: ...

    async def forward(self, ctx: RequestContext, receive: Receive, send: Send) -> None:
        """Pass the request on to the engine (and the app) as the layer would."""
        ...


#: Most tasks one listen stream follows (the ids beyond are not agreed to): each task followed
#: holds a store waiter (on Redis, a connection of the `max_waiters` pool) until it ends.
MAX_LISTEN_TASKS = 32
_ENDS_FRAME = re.compile(rb"(?:\r\n|\r|\n)(?:\r\n|\r|\n)\Z")


def requested_task_ids(params: dict[str, Any]) -> list[str] | None:
    """The task ids a listen request asks about (deduplicated, at most `MAX_LISTEN_TASKS`);
    None when it asks about none (the request is the app's alone)."""
    notifications = params.get("notifications")
    ids = notifications.get("taskIds") if isinstance(notifications, dict) else None
    if not isinstance(ids, list):
        return None
    unique = list(dict.fromkeys(i for i in ids if isinstance(i, str)))
    return unique[:MAX_LISTEN_TASKS]


def without_task_ids(message: dict[str, Any]) -> dict[str, Any]:
    """The listen request as the app is to see it: `taskIds` is the middleware's."""
    out = copy.copy(message)
    params = dict(message.get("params") or {})
    notifications = dict(params.get("notifications") or {})
    notifications.pop("taskIds", None)
    params["notifications"] = notifications
    out["params"] = params
    return out


def acknowledging(agreed: list[str]) -> Callable[[Any], bool]:
    """An edit for the app's acknowledgement: name the task ids agreed to (in place)."""

    def edit(message: Any) -> bool:
        if not isinstance(message, dict) or message.get("method") != ACKNOWLEDGED:
            return False
        params = message.setdefault("params", {})
        if not isinstance(params, dict):
            return False
        notifications = params.setdefault("notifications", {})
        if not isinstance(notifications, dict):
            return False
        notifications["taskIds"] = list(agreed)
        return True

    return edit


def notification(task: dict[str, Any], subscription_id: Any) -> bytes:
    """The SSE frame of a `notifications/tasks` carrying `task` (a `DetailedTask`)."""
    params = {k: v for k, v in task.items() if k != "resultType"}
    params["_meta"] = {SUBSCRIPTION_ID_META: subscription_id}
    return encode_payload(p.dumps({"jsonrpc": "2.0", "method": NOTIFICATION, "params": params}))


class ListenStream:
    """The app's listen response on its way out: its acknowledgement completed, and where
    frames of the middleware's own may go in (between the app's, never inside one)."""

    __slots__ = ("acked", "answer", "at_boundary", "ended", "queued", "sse")

    def __init__(self, request_id: Any, agreed: list[str]) -> None:
        self.answer = AdvertisingAnswer(request_id, edit=acknowledging(agreed), marker=ACKNOWLEDGED.encode())
        self.sse = False
        self.acked = False
        self.at_boundary = True
        self.ended = False
        self.queued: list[bytes] = []

    def feed(self, message: Message) -> list[Message]:
        """The messages to send for one of the app's."""
        out = self.answer.feed(message)
        for item in out:
            if item["type"] == "http.response.start":
                self.sse = self.answer.mode == "sse"
            elif item["type"] == "http.response.body":
                body: bytes = item.get("body", b"")
                if body:
                    self.at_boundary = _ENDS_FRAME.search(body) is not None
                if not item.get("more_body", False):
                    self.ended = True
        self.acked = self.acked or (self.sse and self.answer.done)
        if self.at_boundary and self.queued and not self.ended and out:
            out.append(self._flush())
        return out

    def add(self, frame: bytes) -> Message | None:
        """A frame of the middleware's: the message to send now, or None (queued until the app
        ends its current frame; dropped once the stream has ended)."""
        if self.ended:
            return None
        self.queued.append(frame)
        return self._flush() if self.at_boundary else None

    def _flush(self) -> Message:
        body, self.queued = b"".join(self.queued), []
        return {"type": "http.response.body", "body": body, "more_body": True}


async def serve(
    tasks: TasksLayer, ctx: RequestContext, receive: Receive, send: Send, task_ids: list[str]
) -> None:
    """Forward the listen request to the app and follow the agreed tasks on its stream (one
    SERVER span of `subscriptions/listen`, for the tasks the middleware adds to it)."""
    with ctx.port.telemetry.operation(
        ctx.scope, LISTEN, request_id=ctx.request_id, params=ctx.params, version=ctx.version
    ) as op:
        await _serve(tasks, ctx, receive, op.watch(send), task_ids)


async def _serve(
    tasks: TasksLayer, ctx: RequestContext, receive: Receive, send: Send, task_ids: list[str]
) -> None:
    found: list[tuple[str, str]] = []
    for task_id in task_ids:
        hit = await tasks.requests.resolve(ctx, task_id)
        if hit is not None:
            found.append((task_id, hit))
    stream = ListenStream(ctx.request_id, [task_id for task_id, _ in found])
    lock = anyio.Lock()
    acked = anyio.Event()

    async def app_send(message: Message) -> None:
        async with lock:
            for out in stream.feed(message):
                await send(out)
        if stream.acked:
            acked.set()

    async def write(frame: bytes) -> None:
        async with lock:
            out = stream.add(frame)
            if out is not None:
                await send(out)

    plain = without_task_ids(ctx.message)
    app_ctx = dataclasses.replace(ctx, message=plain, body=p.dumps(plain))
    async with anyio.create_task_group() as group:

        async def follow_all() -> None:
            await acked.wait()
            async with anyio.create_task_group() as followers:
                for task_id, stream_id in found:
                    followers.start_soon(follow, tasks, ctx, task_id, stream_id, write)

        group.start_soon(follow_all)
        try:
            await tasks.forward(app_ctx, receive, app_send)
        finally:
            group.cancel_scope.cancel()


async def follow(
    tasks: TasksLayer,
    ctx: RequestContext,
    task_id: str,
    stream_id: str,
    write: Callable[[bytes], Awaitable[None]],
) -> None:
    """Write the task's state once, then at every change of it, until it ends."""
    port = ctx.port
    last: tuple[Any, ...] | None = None
    while True:
        read = await read_task(port.store, port.signer, stream_id)
        if read is None:
            return  # expired: nothing more will be said of it
        record, meta = read.record, read.meta
        task = await tasks.requests.detailed(port, task_id, record, meta, read.final)
        seen = (task["status"], task.get("statusMessage"), task.get("lastUpdatedAt"), _keys(task))
        if seen != last:
            last = seen
            await write(notification(task, ctx.request_id))
        if task["status"] in TERMINAL:
            return
        if meta is None:
            return
        left = record.ttl_left_s(time.time())
        await port.store.wait(meta.stream_id, meta.last_seq, left, version=meta.version)


def _keys(task: dict[str, Any]) -> tuple[str, ...]:
    inputs = task.get("inputRequests")
    return tuple(sorted(inputs)) if isinstance(inputs, dict) else ()


async def touch(port: Records, stream_id: str) -> None:
    """A task's record changed where its stream did not: wake whoever follows that stream."""
    await port.store.update_stream(stream_id)
