"""`tasks/get`, `tasks/update`, `tasks/cancel`: the requests about a task that exists.

`TasksMiddleware` makes calls into tasks; this answers what a client asks of them
afterwards, on any node: the task is found from its signed id and the store (its
record and its current round's stream), shown only to the principal that created
it (the app's own auth is asked, as on every path answering from the store), and
a request that needs the node running the task's work - an answer to the app's
server-to-client request, a cancel - is relayed there.

Each is reported (`telemetry`) as a SERVER span of its method (`tasks/get` marked a poll, for
a sampler), linked to the task's creation once the caller is admitted to the task - and in
its trace when the request brings no trace context of its own: a task's submit and polls
are one trace.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.types import Receive, Scope, Send

from mcp_resume_asgi.engine.port import (
    NOT_FOUND,
    Delivery,
    EnginePort,
    HostedStreams,
    Refusal,
    RequestContext,
    Serving,
)
from mcp_resume_asgi.store.base import StreamKind, StreamMeta, StreamState
from mcp_resume_asgi.tasks import listen
from mcp_resume_asgi.tasks.record import EMPTY_ACK, TaskRecord, detailed_task, lost_task
from mcp_resume_asgi.tasks.routing import HEADER_MISMATCH, MAX_TASK_ID, routing_problem, task_id_of
from mcp_resume_asgi.tasks.stored import UNREAD, Final, RecordContention, TaskRead, change_record, read_task
from mcp_resume_asgi.tasks.update import task_policy, update, view_of
from mcp_resume_asgi.telemetry import Operation
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.replies import send_json
from mcp_resume_asgi.wire.scope_keys import RELAYED_FROM
from mcp_resume_asgi.wire.tokens import TokenSigner

logger = logging.getLogger(__name__)

TASK_PURPOSE = "task"
TASK_METHODS = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})
#: A cancel whose compare-and-set kept losing (`stored.RecordContention`): not stored, so not acked.
_BUSY = "the task changed too often to be cancelled now; send tasks/cancel again"

#: Hosts the call issued again for a task's next round (`TasksMiddleware._next_round`).
NextRound = Callable[[RequestContext, Delivery, str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class IssuedTask:
    """What a task id says of its task, signed when the task was created (`task_id_for`)."""

    stream_id: str
    created_ms: int | None = None
    """When it was created (Unix ms, rounded down); None in ids of earlier versions (the stream id alone)."""
    ttl_ms: int | None = None
    owner: str | None = None
    """A keyed digest of its principal (`TokenSigner.digest`): whose, without saying who."""

    @property
    def expires_at(self) -> float | None:
        """The earliest moment its record may be gone by its TTL (never before)."""
        if self.created_ms is None or self.ttl_ms is None:
            return None
        return (self.created_ms + self.ttl_ms) / 1000


class Signs(Protocol):
    """What minting and reading a task id takes of the engine's port: its signer. Narrow, so the
    REST face can pass what it holds."""

    @property
    def signer(self) -> TokenSigner: ...


def owner_digest(port: Signs, principal: str | None) -> str:
    return port.signer.digest(TASK_PURPOSE, json.dumps(principal))


def task_id_for(port: Signs, record: TaskRecord) -> str:
    """Unguessable (the stream id is random) and signed (no store read for a forged one). It
    carries when the task was created, its TTL and whose it is (a digest), so that a task whose
    record the store lost before its TTL can still be told apart from an unknown one."""
    created_ms = math.floor(record.created_at * 1000)
    payload = [record.stream_id, created_ms, record.ttl_ms, owner_digest(port, record.principal)]
    return port.signer.sign(TASK_PURPOSE, payload)


def issued_task(port: Signs, task_id: str) -> IssuedTask | None:
    """What a genuine task id says (of this version or an earlier one); None for a forged one."""
    payload = port.signer.unsign(TASK_PURPOSE, task_id, max_length=MAX_TASK_ID)
    if isinstance(payload, str):
        return IssuedTask(payload)
    if (
        isinstance(payload, list)
        and len(payload) == 4
        and isinstance(payload[0], str)
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in payload[1:3])
        and isinstance(payload[3], str)
    ):
        return IssuedTask(payload[0], payload[1], payload[2], payload[3])
    return None


def stream_of_task(port: Signs, task_id: str) -> str | None:
    """The stream behind a task id, as `task_id_for` signed it; None for a forged one."""
    issued = issued_task(port, task_id)
    return issued.stream_id if issued is not None else None


class TaskRequests:
    """The requests about existing tasks, for one `TasksMiddleware` (see the module docstring)."""

    def __init__(self, next_round: NextRound) -> None:
        self.next_round = next_round

    async def serve(self, ctx: RequestContext, receive: Receive, send: Send) -> None:
        """Answer a `tasks/get`, `tasks/update` or `tasks/cancel` of a declaring client."""
        with ctx.port.telemetry.operation(
            ctx.scope,
            ctx.method,
            request_id=ctx.request_id,
            params=ctx.params,
            version=ctx.version,
            poll=ctx.method == "tasks/get",
        ) as op:
            await self._serve(ctx, receive, op.watch(send), op)

    async def _serve(self, ctx: RequestContext, receive: Receive, send: Send, op: Operation) -> None:
        port = ctx.port
        task_id = task_id_of(ctx.params)
        if task_id is None:
            await error_answer(ctx, send, invalid(ctx, "params.taskId must be a task id"))
            return
        problem = routing_problem(
            ctx.version,
            ctx.method,
            task_id,
            _headers(ctx, b"mcp-method"),
            _headers(ctx, b"mcp-name"),
        )
        if problem is not None:
            await send_json(send, 400, p.error_message(ctx.request_id, HEADER_MISMATCH, problem))
            return
        found = await self._find(ctx, send, task_id)
        if found is None:
            return
        if isinstance(found, Gone):
            await self._gone(ctx, send, task_id, found)
            return
        stream_id, read = found
        record, meta = read.record, read.meta
        op.created_by(record.trace, stream_id=stream_id, task_id=task_id)  # (admitted: the caller's own)
        if ctx.method == "tasks/get":
            task = await self.detailed(port, task_id, record, meta, read.final)
            result = {"resultType": "complete", **task}
        elif ctx.method == "tasks/update":
            if meta is not None and meta.pending_inputs and await self.relayed(ctx, receive, send, meta):
                return  # the app's session (its server-to-client requests) lives on that node
            if (
                meta is not None
                and meta.final_seq is not None
                and await self.relayed(ctx, receive, send, meta, finished_round=True)
            ):
                return  # the next round goes where the app sealed this one's `requestState`

            async def answer(message: dict[str, Any]) -> None:
                if "error" in message:
                    await error_answer(ctx, send, message)
                else:
                    await send_json(send, 200, message)

            async def host(round_ctx: RequestContext, delivery: Delivery) -> None:
                await self.next_round(round_ctx, delivery, stream_id)

            await update(ctx, record, meta, answer, host)
            return
        else:
            if not await self._cancel(ctx, receive, send, stream_id, record, meta):
                return  # relayed to the node hosting it, which answered (or an error answered)
            result = EMPTY_ACK
        await send_json(send, 200, {"jsonrpc": "2.0", "id": ctx.request_id, "result": result})

    @staticmethod
    async def detailed(
        port: EnginePort, task_id: str, record: TaskRecord, meta: StreamMeta | None, final: Final = UNREAD
    ) -> dict[str, Any]:
        """The `DetailedTask` as `tasks/get` answers it (and `notifications/tasks` carries it);
        a round whose node is gone is run again if its route allows it (`Policy.rerun_on_loss`),
        else ended (`failed`, recorded: `EnginePort.end_orphan`)."""

        async def rerun(lost: StreamMeta) -> bool:
            return await port.rerun(lost, task_policy(port.routes.by_index(lost.route)))

        async def end(lost: StreamMeta) -> bool:
            return await port.end_orphan(lost, "a task poll")

        view = await view_of(port, record, meta, final, rerun=rerun, end=end)
        if record.ended_at is None and view.ended:
            # Its answer is recorded but the end of its call not noted yet: the first reader to
            # see it fixes the time, so every later poll reports the same lastUpdatedAt.
            now, current = time.time(), record.current_stream

            def ended(r: TaskRecord) -> TaskRecord:
                return r.ended(now) if r.ended_at is None and r.current_stream == current else r

            try:
                stored = await change_record(port.store, port.signer, record.stream_id, ended)
            except RecordContention:
                logger.warning("task %s: the end of its round was not noted", record.stream_id)
                stored = None
            record = stored if stored is not None and stored.current_stream == current else record.ended(now)
            task = detailed_task(task_id, record, view)
            if stored is not None and stored.ended_at == now and stored.cancelled_at is None:
                # This poll noted the end: counted once (a cancel was counted when asked).
                port.telemetry.task_status(str(task["status"]))
            return task
        return detailed_task(task_id, record, view)

    async def resolve(self, ctx: RequestContext, task_id: str) -> str | None:
        """The task's stream id if the caller may see the task, else None (nothing answered)."""
        found = await self._lookup(ctx, task_id)
        return found[0] if isinstance(found, tuple) else None

    async def _find(
        self, ctx: RequestContext, send: Send, task_id: str
    ) -> tuple[str, TaskRead] | Gone | None:
        """The task's stream id, record and stream (if still there: `TaskRead`) when the caller
        may see it, or what its id says of it once its record is gone (`Gone`); else None,
        answered (unknown - another principal's task is unknown too - or the app's own refusal,
        as it gave it)."""
        found = await self._lookup(ctx, task_id)
        if isinstance(found, tuple | Gone):
            return found
        if found is not None:
            await found.send(send)
            return None
        await error_answer(ctx, send, invalid(ctx, "Failed to retrieve task: Task not found"))
        return None

    async def _lookup(
        self, ctx: RequestContext, task_id: str
    ) -> tuple[str, TaskRead] | Gone | Refusal | None:
        """The task if the caller may see it; its gone record, if it was the caller's; the app's
        own refusal; or None (unknown)."""
        port = ctx.port
        issued = issued_task(port, task_id)
        if issued is None:
            return None  # forged: no store read
        read = await read_task(port.store, port.signer, issued.stream_id)
        if read is None:
            return await _gone_record(ctx, issued)
        refusal = await admit_to_task(port, ctx.scope, read.record, read.meta)
        if refusal is None:
            return issued.stream_id, read
        if refusal is not NOT_FOUND:
            return refusal
        return None

    async def _gone(self, ctx: RequestContext, send: Send, task_id: str, gone: Gone) -> None:
        """Answer for a task of the caller's whose record is gone: expired by its TTL, or lost by
        the store before it (a `failed` task; there is nothing to update, and a cancel stops what
        may still run of its first round here)."""
        if gone.expired:
            await error_answer(ctx, send, invalid(ctx, "Failed to retrieve task: Task has expired"))
            return
        issued = gone.issued
        if ctx.method == "tasks/get":
            assert issued.created_ms is not None and issued.ttl_ms is not None
            record = TaskRecord(
                stream_id=issued.stream_id,
                principal=None,
                created_at=issued.created_ms / 1000,
                ttl_ms=issued.ttl_ms,
                poll_interval_ms=ctx.policy.task_poll_interval_ms,
                path=ctx.scope["path"],
                version=ctx.version,
            )
            result = {"resultType": "complete", **lost_task(task_id, record)}
        else:
            if ctx.method == "tasks/cancel":
                _stop(ctx.port, issued.stream_id)
            result = EMPTY_ACK
        await send_json(send, 200, {"jsonrpc": "2.0", "id": ctx.request_id, "result": result})

    async def _cancel(
        self,
        ctx: RequestContext,
        receive: Receive,
        send: Send,
        stream_id: str,
        record: TaskRecord,
        meta: StreamMeta | None,
    ) -> bool:
        """Cancel the task's request where it runs; False when answered already (relayed to the
        node running it, which answered; or an error).

        A task waiting between rounds (its `InputRequiredResult` is its current answer) has no
        request running: it is marked cancelled, and a next round issued meanwhile stops. The mark
        is a compare-and-set (`stored.py`): a next round that takes over before it is found in the
        record as it is written, and stopped here (or relayed to its node); one that takes over
        after it finds the mark and stops itself (`update.py`)."""
        port = ctx.port
        if record.cancelled_at is not None:
            # Idempotent (and a finished task stays finished); a round that took over as the
            # cancel was stored elsewhere is stopped here, where it runs (relayed to this node).
            _stop(port, record.current_stream)
            return True
        if (
            not port.is_live(record.current_stream)
            and meta is not None
            and await self.relayed(ctx, receive, send, meta)
        ):
            return False
        now = time.time()
        try:
            cancelled = await change_record(port.store, port.signer, stream_id, lambda r: r.cancelled(now))
        except RecordContention:
            logger.warning("task %s: its record kept changing; the cancel was not stored", stream_id)
            await error_answer(ctx, send, p.error_message(ctx.request_id, p.INTERNAL_ERROR, _BUSY))
            return False
        if cancelled is None:  # its record expired meanwhile
            await error_answer(ctx, send, invalid(ctx, "Failed to retrieve task: Task not found"))
            return False
        if cancelled.cancelled_at == now:  # (not a cancel stored before: counted once)
            port.telemetry.task_status("cancelled")
        current = cancelled.current_stream
        await listen.touch(port, current)  # (a task between rounds: only its record changed)
        if current != record.current_stream and not port.is_live(current):
            moved = await port.store.get_stream(current)  # a next round took over meanwhile
            if moved is not None and await self.relayed(ctx, receive, send, moved):
                return False
        _stop(port, current)
        return True

    @staticmethod
    async def relayed(
        ctx: RequestContext, receive: Receive, send: Send, meta: StreamMeta, *, finished_round: bool = False
    ) -> bool:
        """Relay the request to the node running the task's request, if another (alive) one does.

        `finished_round`: to the node that ran the task's last round, which ended (with an
        `InputRequiredResult`, when there is a next one): a 2026-07-28 app seals the round's
        `requestState` with a key of its own process unless its nodes are told to share one,
        so the round it asked for is issued to that node's app while it lives."""
        port, node = ctx.port, ctx.port.node
        state = StreamState.COMPLETED if finished_round else StreamState.RUNNING
        if (
            meta.state is state
            and node is not None
            and node.running
            and meta.owner != port.node_id
            and not port.is_live(meta.stream_id)
            and RELAYED_FROM not in ctx.scope
            and await node.alive(meta.owner)
        ):
            await node.relay(meta.owner, ctx.scope, receive, send, ctx.body)
            return True
        return False


async def admit_to_task(
    port: Serving, scope: Scope, record: TaskRecord, meta: StreamMeta | None
) -> Refusal | None:
    """None when the app admits the caller to the task (`meta`: its current round's stream, if
    still there); else what to answer instead (`NOT_FOUND`: another principal's task)."""
    # The stream's principal is the app's own auth's word (it may run inside the app).
    principal = meta.principal if meta is not None else record.principal
    # The app says who is calling, as on every path that answers from the store; no
    # session binds a task (a client may poll from any, after a restart too).
    probe = StreamMeta(record.stream_id, StreamKind.REQUEST, None, principal, record.version, record.path)
    return await port.admit(scope, probe)


@dataclass(frozen=True, slots=True)
class Gone:
    """A task of the caller's whose record is no longer in the store (`_gone_record`)."""

    issued: IssuedTask
    expired: bool
    """Gone by its TTL; else lost by the store before it (restarted empty, or evicted)."""


async def _gone_record(ctx: RequestContext, issued: IssuedTask) -> Gone | Refusal | None:
    """What can honestly be said of a task whose record is not in the store: its id says when
    its TTL ends and whose it is (a digest), so the caller it belongs to - as the app's own
    auth says, asked as on every path - learns that it expired, or that the store lost it; to
    anyone else, and for ids that do not say (earlier versions), it is unknown (None)."""
    expires_at = issued.expires_at
    if expires_at is None or issued.owner is None:
        return None
    port = ctx.port
    who = await port.identify(ctx.scope, ctx.scope["path"], ctx.version)
    if isinstance(who, Refusal):
        return who
    if not hmac.compare_digest(owner_digest(port, who), issued.owner):
        return None
    expired = time.time() >= expires_at
    if not expired:
        logger.debug("task %s: its record is gone before its TTL: the store lost it", issued.stream_id)
    return Gone(issued, expired)


def _stop(port: HostedStreams, stream_id: str) -> None:
    """Cancel the app's request of a cancelled task's round, if it runs on this node."""
    if port.stop(stream_id, "the client cancelled the task"):
        logger.info("stream %s: the client cancelled its task", stream_id)


def _headers(ctx: RequestContext, name: bytes) -> list[str]:
    return [value.decode("latin-1") for key, value in ctx.scope["headers"] if key == name]


def invalid(ctx: RequestContext, text: str) -> dict[str, Any]:
    return p.error_message(ctx.request_id, p.INVALID_PARAMS, text)


async def error_answer(ctx: RequestContext, send: Send, message: dict[str, Any]) -> None:
    """A JSON-RPC error answered by the layer itself, with the status its revision gives it."""
    await send_json(send, p.error_status(ctx.version, message["error"]["code"]), message)
