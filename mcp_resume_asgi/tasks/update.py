"""A task's rounds in the store: what `tasks/get` shows of them, and `tasks/update`.

The rules are in `inputs.py` (keys, what is outstanding, the next round's call);
this module reads and writes the store and talks to the app. An answer is taken at
most once: its key is claimed in the store (`add_key`, atomic on every store) before
it goes anywhere, so a retried or concurrent `tasks/update` cannot answer twice, and
the round that every answer completes is issued again by exactly one of them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from starlette.types import Message, Receive, Scope, Send

from mcp_resume_asgi.engine.port import Delivery
from mcp_resume_asgi.http.client_answers import note_answered
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import GapError, StreamMeta, StreamState
from mcp_resume_asgi.tasks.inputs import Pending, mrtr_of, next_round, outstanding, plan_update
from mcp_resume_asgi.tasks.record import StreamView, TaskRecord, answer_of, message_of
from mcp_resume_asgi.tasks.stored import UNREAD, Final, RecordContention, change_record
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.tokens import new_stream_id

if TYPE_CHECKING:
    from mcp_resume_asgi.engine.port import Cluster, RequestContext
    from mcp_resume_asgi.policy import Policy
    from mcp_resume_asgi.store.base import Store

logger = logging.getLogger(__name__)

#: Headers the re-issued call gets anew (the rest are the client's own: its credentials).
_REPLACED = {b"content-length", b"mcp-method", b"mcp-name", b"idempotency-key", b"last-event-id"}


class RoundReader(Protocol):
    """What reading a task's round takes of the engine's port: the store, and the cluster (to
    tell a round whose node is gone). Narrow, so the REST face can pass what it holds."""

    @property
    def store(self) -> Store: ...

    @property
    def node(self) -> Cluster | None: ...


def task_policy(policy: Policy) -> Policy:
    """The policy a task's call runs under: its work and record outlive its client for the
    task's life (`task_ttl_s`)."""
    return policy.replace(
        max_wait_s=max(policy.max_wait_s, policy.task_ttl_s),
        retain_completed_s=max(policy.retain_completed_s, policy.task_ttl_s),
    )


async def view_of(
    port: RoundReader,
    record: TaskRecord,
    meta: StreamMeta | None,
    final: Final = UNREAD,
    *,
    rerun: Callable[[StreamMeta], Awaitable[bool]] | None = None,
    end: Callable[[StreamMeta], Awaitable[bool]] | None = None,
) -> StreamView:
    """The task's current round as the store holds it, with its outstanding input requests
    (`final`: the round's final event if read with `meta`, `stored.read_task`). `rerun`: asked
    to run the round again when its node is gone (`Policy.rerun_on_loss`); True: it goes on.
    `end`: asked to end it otherwise (`EnginePort.end_orphan`: its answer recorded as an error,
    once fleet-wide), so every later read finds it `failed` from the store; without it (or if
    its record went meanwhile) the round reads as lost with its node."""
    if meta is None:
        return StreamView(exists=False)
    if meta.state is StreamState.EXPIRED:
        return StreamView(exists=True, expired=True)
    if meta.final_seq is None:
        node = port.node
        if (
            node is not None
            and node.running
            and meta.owner
            and not await node.alive(meta.owner)
            and (rerun is None or not await rerun(meta))  # (True: run again, it goes on)
        ):
            if end is not None and await end(meta):
                ended = await port.store.get_stream(meta.stream_id)
                if ended is not None and ended.final_seq is not None:
                    return await view_of(port, record, ended)  # (its recorded end: `failed`)
                return StreamView(exists=True)  # (another finder ends it, or a re-run took it)
            return StreamView(exists=True, owner_gone=True)  # nobody will ever answer it
        view = StreamView(exists=True)
    else:
        if final is UNREAD:
            final = await _event(port, meta.stream_id, meta.final_seq)
        if final is None:
            return StreamView(exists=True, final_lost=True)
        answer = answer_of(final)
        result = answer.get("result") if answer is not None and "error" not in answer else None
        round_answer = result if mrtr_of(result) is not None else None
        view = StreamView(exists=True, final=final, input_round=round_answer)
    pending = await pending_of(port, record, meta, view)
    return dataclasses.replace(view, inputs={key: entry.request for key, entry in pending.items()})


async def pending_of(
    port: RoundReader, record: TaskRecord, meta: StreamMeta, view: StreamView
) -> dict[str, Pending]:
    """The round's input requests that no answer has claimed yet, by task key."""
    asked: list[tuple[Any, int, Any]] = []
    if view.final is None:
        for entry in meta.pending_inputs:
            if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], int):
                frame = await _event(port, meta.stream_id, entry[1])
                asked.append((entry[0], entry[1], message_of(frame) if frame is not None else None))
    candidates = outstanding(record.round, result=view.input_round, asked=asked)
    claimed = [await port.store.get_key(keys.task_answer(record.stream_id, key)) for key in candidates]
    return {
        key: entry for (key, entry), taken in zip(candidates.items(), claimed, strict=True) if taken is None
    }


async def _event(port: RoundReader, stream_id: str, seq: int) -> bytes | None:
    try:
        events = await port.store.read(stream_id, seq - 1, 1)
    except GapError:
        return None
    return events[0][1] if events and events[0][0] == seq else None


async def update(
    ctx: RequestContext,
    record: TaskRecord,
    meta: StreamMeta | None,
    answer: Callable[[dict[str, Any]], Awaitable[None]],
    host: Callable[[RequestContext, Delivery], Awaitable[None]],
) -> None:
    """`tasks/update`: take the answers to what is outstanding (ignore the rest), ack with
    `answer`, and issue the call again (`host`) once its round is answered."""
    port = ctx.port
    view = await view_of(port, record, meta)
    pending = await pending_of(port, record, meta, view) if meta is not None else {}
    plan = plan_update(pending, ctx.params.get("inputResponses"))
    if plan.error is not None:
        await answer(p.error_message(ctx.request_id, p.INVALID_PARAMS, plan.error))
        return
    ttl = record.ttl_left_s(time.time())
    for key, response in plan.to_app:
        if await port.store.add_key(keys.task_answer(record.stream_id, key), "1", ttl) is not None:
            continue  # answered meanwhile
        assert meta is not None
        status, _ = await port.call_app(
            ctx.scope, meta.path, meta.session_id, meta.protocol_version, p.dumps(response)
        )
        if status >= 300:
            logger.warning("task %s: the app refused an answer with HTTP %s", meta.stream_id, status)
        await note_answered(port.store, meta.session_id, response["id"], meta.stream_id)
    for key, response in plan.kept:
        await port.store.add_key(keys.task_answer(record.stream_id, key), p.dumps(response).decode(), ttl)
    await answer({"jsonrpc": "2.0", "id": ctx.request_id, "result": {"resultType": "complete"}})
    if plan.kept and record.call is not None:
        await _next_round(ctx, record, view, host)


async def _next_round(
    ctx: RequestContext,
    record: TaskRecord,
    view: StreamView,
    host: Callable[[RequestContext, Delivery], Awaitable[None]],
) -> None:
    """Issue the call again once every request of the round's `InputRequiredResult` is answered."""
    port, origin = ctx.port, record.stream_id
    requests = mrtr_of(view.input_round)
    assert requests is not None and record.call is not None
    answers: dict[str, Any] = {}
    for app_key in requests[0]:
        key = f"{record.round}/{app_key}"
        raw = await port.store.get_key(keys.task_answer(origin, key))
        if raw is None:
            return  # still waiting for others (the task stays `input_required`)
        try:
            answers[key] = json.loads(raw)
        except ValueError:
            return
    request_id = f"task-{record.round + 1}-{secrets.token_hex(4)}"
    message = next_round(record.call, record.round, view.input_round, answers, request_id)
    if message is None:
        return
    ttl = record.ttl_left_s(time.time())
    if await port.store.add_key(keys.task_round(origin, record.round), "1", ttl) is not None:
        return  # another update issued it
    stream_id = new_stream_id()
    tool = message["params"].get("name")
    route, policy = port.routes.choose(record.path, "tools/call", tool if isinstance(tool, str) else None)
    body = p.dumps(message)
    headers = [(k, v) for k, v in ctx.scope["headers"] if k not in _REPLACED]
    headers += [(b"content-length", str(len(body)).encode()), (b"mcp-method", b"tools/call")]
    if isinstance(tool, str):
        headers.append((b"mcp-name", tool.encode()))
    scope: Scope = dict(ctx.scope, headers=headers, path=record.path, raw_path=record.path.encode())

    def moved_on(current: TaskRecord) -> TaskRecord:
        return current if current.current == stream_id else current.next_round(stream_id)

    async def point_record(cursor: int) -> bytes:
        """The new round's stream exists: the task continues on it. Atomically: a cancel stored
        before this write stops the round here; one stored after it finds the round in the record."""
        try:
            moved = await change_record(port.store, port.signer, origin, moved_on, create=record)
        except RecordContention:
            logger.exception("task %s: its next round %s is stopped", origin, stream_id)
            moved = None
        # Wakes a listen stream following the round this update answered (only it moves the task on).
        await port.store.update_stream(record.current_stream)
        if moved is None or moved.cancelled_at is not None:
            port.cancel_soon(stream_id, "the client cancelled the task")
        return b""

    # The round's answer is the task's, whatever it is: the app refusing the answers (a 400 for an
    # answer its schema rejects) is recorded as the round's answer, and the task `failed` with it.
    delivery = Delivery(
        deadline_s=0, at_will=False, survives_close=True, on_deadline=point_record, refusal_recorded=True
    )
    logger.debug("task %s: round %s answered, issued again as %s", origin, record.round, stream_id)
    round_ctx = dataclasses.replace(
        ctx,
        scope=scope,
        body=body,
        message=message,
        method="tools/call",
        tool=tool if isinstance(tool, str) else None,
        route=route,
        policy=policy,
        stream_id=stream_id,
    )
    await host(round_ctx, delivery)


async def never_gone() -> Message:
    """The `receive` of a round issued by the middleware: no client is there to leave."""
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


async def discard(message: Message) -> None:
    """The `send` of a round issued by the middleware: its answer goes to the task, not a client."""


def no_client() -> tuple[Receive, Send]:
    return never_gone, discard
