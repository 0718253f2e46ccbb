"""The end of a stream nobody came back for: the app's work is cancelled, the stream freed.

The core says when the resume window of a hosted stream has passed by what this
node knows; a client may be attached on another node, so the store has the last
word (`check`). Cancelling follows the request's protocol revision: a 2025
request gets `notifications/cancelled` on its session, as its client would have
sent; then (and for a 2026-07-28 request, whose closed stream is its cancel) the
app's `receive` reports `http.disconnect`; an app that ignores both for
`CANCEL_GRACE_S` has its call cancelled. Those decisions are `core/expiry.py`'s;
this is their I/O.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Protocol

import anyio

from mcp_resume_asgi.core.expiry import CANCEL_GRACE_S, Step, VerdictKind, cancel_plan, forgets, verdict
from mcp_resume_asgi.core.lifecycle import Record
from mcp_resume_asgi.engine.services import HostedRequest
from mcp_resume_asgi.store.base import StreamKind, StreamState
from mcp_resume_asgi.wire import jsonrpc as p

if TYPE_CHECKING:
    from mcp_resume_asgi.engine.connection import Flag
    from mcp_resume_asgi.engine.port import Delivery

__all__ = [
    "CancellableStream",
    "cancel_app",
    "check",
    "closed_by_client",
    "expire",
    "forget",
]

logger = logging.getLogger(__name__)

_OPEN = Record.OPEN
"""(A global: `frees_record` runs at every request's end, and on Python 3.11 an enum member read
through its class costs a few times as much.)"""


class CancellableStream(HostedRequest, Protocol):
    """What cancelling needs of a hosted stream (a `HostedStream`): who the request is, its
    record, and the two levers on its app (`disconnect_app`, `stop_app`)."""

    @property
    def delivery(self) -> Delivery | None: ...
    @property
    def done(self) -> Flag: ...

    def arm(self) -> None: ...
    def disconnect_app(self) -> None: ...
    def stop_app(self) -> None: ...


async def check(hosted: CancellableStream) -> None:
    """The core's resume window passed: expire, unless the store knows of a client since."""
    try:
        meta = (
            await hosted.store.get_stream(hosted.stream_id)
            if hosted.core.store_record is Record.OPEN
            else None
        )
    except Exception as exc:
        if not hosted.services.store_outage(exc):
            raise
        hosted.core.contact(time.monotonic())  # cannot tell: look again a window later
        hosted.arm()
        return
    if hosted.done.is_set() or hosted.core.expired:
        return
    said = verdict(
        meta,
        record_open=hosted.core.store_record is Record.OPEN,
        max_wait_s=hosted.policy.max_wait_s,
        now_wall=time.time(),
        now_mono=time.monotonic(),
    )
    if said.kind is VerdictKind.CANCEL_DELETED:
        await cancel_app(hosted, "the stream was deleted")
    elif said.kind is VerdictKind.CONTACT:
        assert said.seen is not None
        hosted.core.contact(said.seen)
        hosted.arm()
    elif said.kind is VerdictKind.EXPIRE:
        await expire(hosted)
    # (NONE: its answer is complete; the app is winding down on its own)


async def expire(hosted: CancellableStream) -> None:
    logger.info(
        "stream %s: nobody resumed within %ss; cancelling", hosted.stream_id, hosted.policy.max_wait_s
    )
    hosted.core.expired = True
    if hosted.core.store_record is Record.OPEN:
        await hosted.store.update_stream(hosted.stream_id, state=StreamState.EXPIRED)
    await cancel_app(hosted, "the client did not resume within the resume window")
    if hosted.core.store_record is Record.OPEN:
        await hosted.store.delete_stream(hosted.stream_id)


async def closed_by_client(hosted: CancellableStream) -> None:
    """The client closed a stream whose close is its cancel (`StreamCore.left`, 2026-07-28).

    The app is told at once (`http.disconnect`, as it would be unwrapped) and the
    stream is freed once the app is done (an expired stream is deleted then), for
    nobody may resume it. Nothing of this is an error.
    """
    logger.debug("stream %s: the client closed it; cancelling its request", hosted.stream_id)
    await cancel_app(hosted, "the client closed the stream")


def frees_record(hosted: CancellableStream) -> bool:
    """Whether the record of `hosted`, now over, is freed at once (`forget`): nothing is kept for
    a 2026-07-28 request nobody may resume beyond what a task - `survives_close` - needs."""
    delivery = hosted.delivery
    return forgets(
        close_cancels=hosted.core.close_cancels,
        record_open=hosted.core.store_record is _OPEN,
        expired=hosted.core.expired,
        survives_close=delivery is not None and delivery.survives_close,
    )


async def forget(hosted: CancellableStream) -> None:
    """Free the record of a stream nobody may resume once it is over (when `frees_record` says so)."""
    try:
        await hosted.store.delete_stream(hosted.stream_id)
    except Exception as exc:
        if not hosted.services.store_outage(exc):
            raise
    else:
        hosted.core.freed()


async def cancel_app(hosted: CancellableStream, reason: str) -> None:
    """Stop the app's work for a stream the way its protocol revision expects."""
    hosted.core.expired = True
    hosted.core.cancel()
    plan = cancel_plan(
        is_request=hosted.kind is StreamKind.REQUEST,
        in_session=hosted.session_id is not None,
        version=hosted.version,
    )
    for step in plan:
        if step is Step.NOTIFY:
            notification = {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": hosted.request_id, "reason": reason},
            }
            try:
                await hosted.services.call_app(
                    hosted.scope, hosted.path, hosted.session_id, hosted.version, p.dumps(notification)
                )
            except Exception:
                logger.exception("stream %s: could not deliver the cancellation", hosted.stream_id)
        elif step is Step.WAIT:
            with anyio.move_on_after(CANCEL_GRACE_S):
                await hosted.done.wait()
        elif step is Step.DISCONNECT:
            hosted.disconnect_app()
        elif step is Step.HARD and not hosted.done.is_set():
            logger.warning("stream %s: the app ignored the cancellation; stopping it", hosted.stream_id)
            hosted.stop_app()
