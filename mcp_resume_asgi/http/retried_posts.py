"""A POST retried with its `Idempotency-Key`: attached to the request the key started.

A client that lost the answer to a POST sends it again with the same
`Idempotency-Key` (`Engine.handle_request` claims the key for the first one). The
retry must never run the request twice: it is attached to the original's stream
after the `Last-Event-ID` it sends, once the app admits it to that stream and its
body is the same, or answered by the feature layer that served the original
(`RetryAnswer`: the Tasks layer answers with the task the call became). This is
kept apart from the engine because it is one decision with its own refusals
(409 gone, 422 other body, 400 foreign `Last-Event-ID`), read on its own.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio
from starlette.types import Receive, Scope, Send

from mcp_resume_asgi import protocol as p
from mcp_resume_asgi._http import header, send_json
from mcp_resume_asgi.engine.port import EnginePort, RetryAnswer
from mcp_resume_asgi.store.base import StreamMeta

if TYPE_CHECKING:
    from mcp_resume_asgi.engine.services import StreamServices
    from mcp_resume_asgi.hosted import HostedStream

__all__ = ["RetryAnswer", "answer_retry", "opened_record"]

logger = logging.getLogger(__name__)


async def answer_retry(
    services: StreamServices[HostedStream],
    port: EnginePort,
    scope: Scope,
    receive: Receive,
    send: Send,
    existing: str,
    digest: str,
    on_retry: RetryAnswer | None = None,
) -> None:
    """A POST repeating an Idempotency-Key attaches to the request already running
    (unless the layer that served the original answers it its own way: `on_retry`)."""
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
    refusal = await port.admit(scope, meta)
    if refusal is not None:
        await refusal.send(send)
        return
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
    await port.serve(scope, receive, send, meta, after)


async def opened_record(services: StreamServices[HostedStream], stream_id: str) -> StreamMeta | None:
    """The record of a stream hosted here whose first attempt is still opening it."""
    hosted = services.live[stream_id]
    with anyio.move_on_after(2.0):
        await hosted.opened.wait()
    return await services.store.get_stream(stream_id)
