"""A POST carrying an `Idempotency-Key`: it claims the key, or it is a retry of the one that did.

A client that lost the answer to a POST sends it again with the same `Idempotency-Key`.
The first POST carrying a key claims it in the store for its stream (`RetriedPosts.host`,
before the engine hosts it: the stream must exist before the client can lose its answer).
A retry must never run the request twice: it is attached to the original's stream after
the `Last-Event-ID` it sends, once the app admits it to that stream and its body is the same,
or answered by the feature layer that served the original (`RetryAnswer`: the Tasks layer
answers with the task the call became). This is one decision with its own refusals (409
gone, 422 other body, 400 foreign `Last-Event-ID`), read on its own.

A retry is answered here, not by the app: it is reported (`telemetry`) as a SERVER
span of the request's method, marked a poll, linked to the original once the caller is
admitted to its stream.

`RetriedPosts.host` is the engine port's `host`, which the engine makes: the HTTP front and the
feature layers (the Tasks layer passes a key and its own `on_retry`) host a request through it.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING

import anyio

from mcp_resume_asgi.engine.port import (
    PLAIN,
    Admit,
    EngineHost,
    RequestContext,
    RetryAnswer,
    ServeOptions,
    ServeStream,
)
from mcp_resume_asgi.policy import running_ttl
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import StreamMeta
from mcp_resume_asgi.telemetry import NO_OPERATION, Operation
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.asgi import Receive, Scope, Send
from mcp_resume_asgi.wire.headers import header
from mcp_resume_asgi.wire.replies import send_json

if TYPE_CHECKING:
    from mcp_resume_asgi.engine.hosted import HostedStream
    from mcp_resume_asgi.engine.services import StreamServices

__all__ = ["RetriedPosts", "answer_retry", "opened_record"]

logger = logging.getLogger(__name__)


class RetriedPosts:
    """Hosts requests the way the front does: an `Idempotency-Key` claimed (or a retry answered)
    first, then the engine (`Engine.handle_request`)."""

    def __init__(
        self,
        services: StreamServices[HostedStream],
        engine_host: EngineHost,
        *,
        admit: Admit,
        serve: ServeStream,
    ) -> None:
        self.services = services
        self.engine_host = engine_host
        self.admit = admit
        self.serve = serve

    def host(
        self, ctx: RequestContext, receive: Receive, send: Send, options: ServeOptions = PLAIN
    ) -> Awaitable[tuple[str, int] | None]:
        """See `engine.port.HostRequest` (without a key to claim, the engine's awaitable itself:
        no frame of ours held while the request's call watches its client)."""
        key = options.idempotency_key
        if key is None or ctx.method == "initialize":
            return self.engine_host(ctx, receive, send, options, None)
        return self._claimed(ctx, receive, send, options, key)

    async def _claimed(
        self, ctx: RequestContext, receive: Receive, send: Send, options: ServeOptions, key: str
    ) -> tuple[str, int] | None:
        services = self.services
        scope = ctx.scope
        claimed = keys.idempotency(ctx.session_id, ctx.principal, key)
        digest = hashlib.sha256(p.body_for_app(ctx.body, ctx.message)).hexdigest()
        policy = options.policy or ctx.policy
        existing = await services.store.add_key(claimed, f"{ctx.stream_id} {digest}", running_ttl(policy))
        if existing is not None:
            with services.telemetry.operation(
                scope,
                ctx.method,
                request_id=ctx.request_id,
                params=ctx.params,
                version=ctx.version,
                tool=ctx.tool,
                poll=True,
            ) as op:
                await answer_retry(
                    services,
                    self.admit,
                    self.serve,
                    scope,
                    receive,
                    op.watch(send),
                    existing,
                    digest,
                    options.on_retry,
                    op=op,
                )
            return None
        return await self.engine_host(ctx, receive, send, options, claimed)


async def answer_retry(
    services: StreamServices[HostedStream],
    admit: Admit,
    serve: ServeStream,
    scope: Scope,
    receive: Receive,
    send: Send,
    existing: str,
    digest: str,
    on_retry: RetryAnswer | None = None,
    *,
    op: Operation = NO_OPERATION,
) -> None:
    """A POST repeating an Idempotency-Key attaches to the request already running
    (unless the layer that served the original answers it its own way: `on_retry`;
    `op`: its span, linked to the original once the caller is admitted)."""
    stream_id, _, first_digest = existing.partition(" ")
    meta = await services.store.get_stream(stream_id)
    if meta is None and stream_id in services.live:
        meta = await opened_record(services, stream_id)
    if meta is None:
        if on_retry is not None and first_digest == digest and await on_retry(stream_id, None, 0):
            return  # (a cancelled task's stream is freed; its record still answers)
        await send_json(
            send,
            409,
            p.error_message(
                None, p.INVALID_REQUEST, "the request with this Idempotency-Key is no longer available"
            ),
        )
        return
    refusal = await admit(scope, meta)
    if refusal is not None:
        await refusal.send(send)
        return
    op.created_by(meta.trace, stream_id=stream_id)
    if first_digest != digest:
        await send_json(
            send,
            422,
            p.error_message(None, p.INVALID_REQUEST, "this Idempotency-Key was used for a different request"),
        )
        return
    after = 0
    last_event_id = header(scope, b"last-event-id")
    if last_event_id is not None:
        parsed = services.signer.parse_event_id(last_event_id.strip())
        if parsed is None or parsed[0] != stream_id or parsed[1] > meta.last_seq:
            await send_json(
                send,
                400,
                p.error_message(None, p.INVALID_REQUEST, "Last-Event-ID does not belong to this request"),
            )
            return
        after = parsed[1]
    if on_retry is not None and await on_retry(stream_id, meta, after):
        return
    logger.debug("stream %s: a retried POST attaches after %s", stream_id, after)
    await serve(scope, receive, send, meta, after)


async def opened_record(services: StreamServices[HostedStream], stream_id: str) -> StreamMeta | None:
    """The record of a stream hosted here whose first attempt is still opening it."""
    hosted = services.live[stream_id]
    with anyio.move_on_after(2.0):
        await hosted.opened.wait()
    return await services.store.get_stream(stream_id)
