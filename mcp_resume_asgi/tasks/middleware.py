"""`TasksMiddleware`: the Tasks extension (SEP-2663) for any ASGI MCP app.

A task is a durable view of a request the engine already hosts and records. A
`tools/call` from a client that declared `io.modelcontextprotocol/tasks` is hosted
with a deadline (`Policy.task_after_s`, per route): still running then, its client
is answered with a `CreateTaskResult` - the deadline frame of the resume-token
mechanism - while the app's work goes on, detached, for the task's TTL. The task's
record is in the store before that answer goes out; `tasks/get` builds the task
from the record and the request's stream (`record.py`), so any node answers it
and the client may be gone for minutes. `tasks/cancel` cancels the app's request
the way its revision says, on the node that hosts it. A task is visible only to
the principal that created it: to anyone else it is unknown.

Which calls become tasks is policy: `task_after_s` None never, 0 at once, > 0 when
still running after that long; `task_required` answers -32021 to a client that did
not declare the extension. The app is told nothing: the declaration is taken out of
what it sees, and its `initialize` / `server/discover` answer gets the advertisement.

What a client asks of a task afterwards (`tasks/get`, `update`, `cancel`) is
`operations.py`; `notifications/tasks` on `subscriptions/listen` is `listen.py`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Protocol

import anyio
from starlette.types import ASGIApp, Message, Receive, Send

from mcp_resume_asgi.engine.port import Delivery, RequestContext, RetryAnswer, ServeOptions
from mcp_resume_asgi.features.seam import FeatureMiddleware
from mcp_resume_asgi.policy import Policy
from mcp_resume_asgi.store.base import StreamMeta
from mcp_resume_asgi.tasks import limits, listen
from mcp_resume_asgi.tasks.advertising import AdvertisingAnswer
from mcp_resume_asgi.tasks.capability import declares, missing_capability, stripped, stripped_initialize
from mcp_resume_asgi.tasks.operations import TASK_METHODS, TaskRequests, error_answer, task_id_for
from mcp_resume_asgi.tasks.record import (
    SUPPORTED_METHODS,
    TaskRecord,
    create_task_result,
    detailed_task,
)
from mcp_resume_asgi.tasks.retries import RetriedCall
from mcp_resume_asgi.tasks.stored import RecordContention, change_record, create_record
from mcp_resume_asgi.tasks.update import RoundReader, no_client, view_of
from mcp_resume_asgi.telemetry import Telemetry
from mcp_resume_asgi.wire import header_rules
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.headers import header
from mcp_resume_asgi.wire.replies import send_bytes
from mcp_resume_asgi.wire.scope_keys import DECLARED_CAPABILITIES, FEATURES_KEY
from mcp_resume_asgi.wire.sse import encode_payload
from mcp_resume_asgi.wire.tokens import TokenSigner

logger = logging.getLogger(__name__)

ADVERTISED_IN = frozenset({"initialize", "server/discover"})


class TasksMiddleware(FeatureMiddleware):
    """Serves the Tasks extension for the app it wraps (see the module docstring).

    Place it before `ResumeMiddleware`; `resumable(app, tasks=True)` does that. Which
    calls become tasks comes from each route's `Policy` (`task_after_s`, `task_required`,
    `task_ttl_s`, `task_poll_interval_ms`).
    """

    answers = TASK_METHODS
    task_id = staticmethod(task_id_for)
    stack_place = 1  # outside every other layer but the REST face: a call that becomes a task is its alone

    def __init__(self, app: ASGIApp) -> None:
        super().__init__(app)
        self.requests = TaskRequests(self._next_round)

    async def intercept(self, ctx: RequestContext, receive: Receive, send: Send) -> bool:
        method = ctx.method
        declared = declares(ctx.capabilities)
        if method in TASK_METHODS:
            # (Its headers and session were judged as the app would: `http/middleware.py`.)
            if not declared and await declaration_known(ctx):
                await error_answer(ctx, send, missing_capability(ctx.request_id))
            else:
                await self.requests.serve(ctx, receive, send)
            return True
        if (
            method in SUPPORTED_METHODS
            and not declared
            and ctx.policy.task_required
            and await declaration_known(ctx)  # (else the app answers it plainly, not refused on a guess)
        ):
            await refuse_missing_capability(ctx, send)
            return True
        plain = stripped(ctx.message)
        if plain is not None:
            ctx = dataclasses.replace(ctx, message=plain, body=p.dumps(plain))
        elif method == "initialize" and (plain := stripped_initialize(ctx.message)) is not None:
            # The session keeps what its client declared; the app sees it without the extension.
            scope = {**ctx.scope, DECLARED_CAPABILITIES: ctx.params.get("capabilities")}
            ctx = dataclasses.replace(ctx, scope=scope, message=plain, body=p.dumps(plain))
        if method == listen.LISTEN and (task_ids := listen.requested_task_ids(ctx.params)) is not None:
            if not declared and await declaration_known(ctx):
                await refuse_missing_capability(ctx, send)
            else:
                await listen.serve(self, ctx, receive, send, task_ids)
            return True
        if method in ADVERTISED_IN:
            answer = AdvertisingAnswer(ctx.request_id)

            async def advertising_send(message: Message) -> None:
                for out in answer.feed(message):
                    await send(out)

            await self._forward(ctx, receive, advertising_send)
            return True
        if method in SUPPORTED_METHODS and declared and ctx.policy.task_after_s is not None:
            await self._as_task(ctx, receive, send)
            return True
        if plain is None:
            return False
        await self._forward(ctx, receive, send)
        return True

    async def forward(self, ctx: RequestContext, receive: Receive, send: Send) -> None:
        """Hand a request the layer has edited on to the app (see `_forward`)."""
        await self._forward(ctx, receive, send)

    async def _forward(
        self,
        ctx: RequestContext,
        receive: Receive,
        send: Send,
        *,
        delivery: Delivery | None = None,
        policy: Policy | None = None,
        on_retry: RetryAnswer | None = None,
    ) -> tuple[str, int] | None:
        """Hand the request on as the middleware would have (the layers after this one may
        still take it, unless it is to become a task), with the body the app is to see."""
        features: tuple[FeatureMiddleware, ...] = ctx.scope.get(FEATURES_KEY, ())
        if delivery is None and self in features:
            for feature in features[features.index(self) + 1 :]:
                if await feature.intercept(ctx, receive, send):
                    return None
        first: list[dict[str, Any]] = []
        for feature in features:
            first += await feature.first_messages(ctx)
        if delivery is None and ctx.survives_close:  # as `ResumeMiddleware` does (SEP-975's way back)
            delivery = Delivery(survives_close=True)
        options = ServeOptions(
            delivery=delivery,
            policy=policy,
            first_messages=tuple(first),
            idempotency_key=header(ctx.scope, b"idempotency-key"),
            on_retry=on_retry,
        )
        return await ctx.host(receive, send, options)

    # ------------------------------------------------------------------ a call that may become a task
    async def _as_task(self, ctx: RequestContext, receive: Receive, send: Send) -> None:
        """Host the call; answer a `CreateTaskResult` instead of its result once it is a task.

        After `task_after_s`, counted from the request's arrival, it becomes one by the
        delivery's deadline, as a resume token's interim result does; a call done sooner keeps
        its plain result. With 0 it is a task from the start, whatever the app answers: its
        record is written and the client answered as soon as the app has read the request (its
        auth said who is calling, whom the task is bound to; the core's `request_read`), not
        when the app starts its answer.
        """
        policy = ctx.policy
        after_s = policy.task_after_s
        assert after_s is not None
        port, stream_id = ctx.port, ctx.stream_id
        ttl_s = policy.task_ttl_s
        cap = policy.max_tasks_per_principal
        if cap is not None and not await limits.has_room(port.store, port.principal(ctx.scope), cap):
            # The caller holds its most task records already: a plain request (`limits.py`).
            limits.log_refusal(port.principal(ctx.scope), cap, stream_id, "served as a plain request")
            await self._forward(ctx, receive, send)
            return
        refused: list[str | None] = []  # (the principal refused a task)
        # The task's work and its record outlive the client for the task's life.
        hosted_policy = policy.replace(
            max_wait_s=max(policy.max_wait_s, ttl_s),
            retain_completed_s=max(policy.retain_completed_s, ttl_s),
        )
        created: list[TaskRecord] = []
        # Not `survives_close` yet: until it is a task, a close cancels where it does.
        delivery = Delivery(deadline_s=after_s, at_will=False)

        creating = anyio.Lock()  # the original's deadline and a retry's may both ask, at once

        async def create() -> TaskRecord | None:
            async with creating:
                return await create_once()

        async def create_once() -> TaskRecord | None:
            if refused:
                return None
            if not created:
                record = TaskRecord(
                    stream_id=stream_id,
                    principal=port.hosted_principal(stream_id, ctx.scope),
                    created_at=time.time(),
                    ttl_ms=round(ttl_s * 1000),
                    poll_interval_ms=policy.task_poll_interval_ms,
                    path=ctx.scope["path"],
                    version=ctx.version,
                    call=ctx.message,
                )
                # Its creation is a span of the caller's trace (or a new one): polls link to it.
                task_id = self.task_id(port, record)
                trace = port.telemetry.created(
                    ctx.scope,
                    "tools/call",
                    params=ctx.params,
                    request_id=ctx.request_id,
                    tool=ctx.tool,
                    stream_id=stream_id,
                    task_id=task_id,
                )
                if trace is not None:
                    record = dataclasses.replace(record, trace=trace)
                expires_at = record.created_at + ttl_s
                if cap is not None and not await limits.claim(
                    port.store, record.principal, stream_id, expires_at, cap
                ):
                    refused.append(record.principal)
                    return None
                # Durable before the client hears of it: a `tasks/get` for the id resolves from now on.
                created.append(await create_record(port.store, port.signer, record))
                port.telemetry.task_status("working")
                delivery.survives_close = True
                logger.debug("stream %s is a task", stream_id)
            return created[0]

        def frame(record: TaskRecord) -> bytes:
            result = create_task_result(self.task_id(port, record), record)
            return encode_payload(p.dumps({"jsonrpc": "2.0", "id": ctx.request_id, "result": result}))

        async def on_deadline(cursor: int) -> bytes:
            record = await create()
            if record is None:  # the caller holds its most task records (`limits.py`)
                return limits.refused_answer(port, stream_id, ctx.request_id, policy, refused[0])
            return frame(record)

        delivery.on_deadline = on_deadline
        # A retry of this call (its Idempotency-Key) gets its task, never a second run (`retries.py`).
        retried = RetriedCall(
            ctx,
            receive,
            send,
            task_id=lambda record: self.task_id(port, record),
            relay=self.requests.relayed,
        )

        async def app_over() -> None:
            # The app is done (its request ran on an engine task, which runs this) and its stream
            # is concluded; its client's call may have returned long before.
            if not created:
                # Answered with its plain result: kept no longer than any other request's stream.
                await port.store.update_stream(stream_id, ttl_s=policy.retain_completed_s)
                return
            await _round_ended(port, stream_id, stream_id, created[0])

        delivery.after_app = app_over
        await self._forward(
            ctx, receive, send, delivery=delivery, policy=hosted_policy, on_retry=retried.answer
        )

    async def _next_round(self, ctx: RequestContext, delivery: Delivery, origin: str) -> None:
        """Host the call issued again for a task's next round (`update.py`) on this ASGI call,
        whose client has its acknowledgement already, as `_as_task` hosts the first."""
        ttl_s = ctx.policy.task_ttl_s
        hosted_policy = ctx.policy.replace(
            max_wait_s=max(ctx.policy.max_wait_s, ttl_s),
            retain_completed_s=max(ctx.policy.retain_completed_s, ttl_s),
        )
        receive, send = no_client()

        async def app_over() -> None:  # (on the engine's task, once the round's app is done)
            await _round_ended(ctx.port, origin, ctx.stream_id, None)

        delivery.after_app = app_over
        await self._forward(ctx, receive, send, delivery=delivery, policy=hosted_policy)


async def declaration_known(ctx: RequestContext) -> bool:
    """Whether what the client declared is known: per request (2026-07-28 `_meta`), or at its
    session's `initialize` as the store holds it. A session the store does not hold - lost in a
    restart, or not recorded during an outage - declared something nobody can tell now, and a
    -32021 saying it declared nothing would be a guess presented as a fact."""
    if ctx.session_id is None or p.request_capabilities(ctx.message) is not None:
        return True
    return await ctx.port.store.get_session(ctx.session_id) is not None


async def refuse_missing_capability(ctx: RequestContext, send: Send) -> None:
    """-32021 for a request the app would have answered, after the header checks it would have
    made (`wire/header_rules.py`): a malformed request is refused for that first."""
    refusal = header_rules.refusal(ctx.scope["headers"], ctx.message)
    if refusal is None:
        await error_answer(ctx, send, missing_capability(ctx.request_id))
        return
    content_type = [(b"content-type", b"application/json")] if refusal.body else []
    await send_bytes(send, refusal.status, refusal.body, content_type)


class RoundEndPort(RoundReader, Protocol):
    """What noting a round's end uses of the engine's port: reading the round (`RoundReader`),
    writing the task's record, and counting the status it ended in."""

    @property
    def signer(self) -> TokenSigner: ...
    @property
    def telemetry(self) -> Telemetry: ...


async def _round_ended(port: RoundEndPort, origin: str, stream_id: str, fallback: TaskRecord | None) -> None:
    """The app returned the call of the task's round `stream_id`: note when (its last update),
    and whose it was as the app's own auth saw the caller (`fallback`: the record as created,
    written again if the store lost it)."""
    meta = await port.store.get_stream(stream_id)
    now = time.time()

    def ended(record: TaskRecord) -> TaskRecord:
        if record.current_stream != stream_id:
            return record  # the task has moved on to its next round
        if meta is not None:
            record = dataclasses.replace(record, principal=meta.principal)
        # (A poll that saw the answer first fixed the time already.)
        return record if record.ended_at is not None else record.ended(now)

    try:
        stored = await change_record(port.store, port.signer, origin, ended, create=fallback)
    except RecordContention:
        logger.exception("task %s: the end of its round %s was not noted", origin, stream_id)
        return
    if (
        stored is not None
        and stored.ended_at == now
        and stored.cancelled_at is None
        and port.telemetry.enabled
    ):
        await count_status(port, stored, meta)


async def count_status(port: RoundEndPort, record: TaskRecord, meta: StreamMeta | None) -> None:
    """The status a task's round ended in, counted by whoever noted the end (once per round:
    the end is noted by one compare-and-set, here or by the first poll that saw it)."""
    view = await view_of(port, record, meta)
    port.telemetry.task_status(str(detailed_task("", record, view)["status"]))
