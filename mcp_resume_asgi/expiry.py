"""The end of a stream nobody came back for: the app's work is cancelled, the stream freed.

The core says when the resume window of a hosted stream has passed by what this
node knows; a client may be attached on another node, so the store has the last
word (`check`). Cancelling follows the request's protocol revision: a 2025
request gets `notifications/cancelled` on its session, as its client would have
sent; then (and for a 2026-07-28 request, whose closed stream is its cancel) the
app's `receive` reports `http.disconnect`; an app that ignores both for
`CANCEL_GRACE_S` has its call cancelled.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import anyio

from mcp_resume_asgi import protocol as p
from mcp_resume_asgi.core.stream import Reason
from mcp_resume_asgi.scheduler import spawn
from mcp_resume_asgi.store.base import StreamKind, StreamState

if TYPE_CHECKING:
    from mcp_resume_asgi.hosted import HostedStream

logger = logging.getLogger(__name__)

#: Grace given to an app to wind a cancelled request down before the next, harder step.
CANCEL_GRACE_S = 5.0


async def check(hosted: HostedStream) -> None:
    """The core's resume window passed: expire, unless the store knows of a client since."""
    try:
        meta = await hosted.store.get_stream(hosted.stream_id) if hosted.meta_created else None
    except Exception as exc:
        if not hosted.engine.store_outage(exc):
            raise
        hosted.core.contact(time.monotonic())  # cannot tell: look again a window later
        hosted.arm()
        return
    if hosted.done.is_set() or hosted.expired:
        return
    if hosted.meta_created and meta is None:
        await cancel_app(hosted, "the stream was deleted")
        return
    if meta is not None and meta.state is not StreamState.RUNNING:
        return  # its answer is complete; the app is winding down on its own
    if meta is not None and (meta.attached or meta.last_contact + hosted.policy.max_wait_s > time.time()):
        seen = time.monotonic() if meta.attached else time.monotonic() - (time.time() - meta.last_contact)
        hosted.core.contact(seen)
        hosted.arm()
        return
    await expire(hosted)


async def expire(hosted: HostedStream) -> None:
    logger.info(
        "stream %s: nobody resumed within %ss; cancelling", hosted.stream_id, hosted.policy.max_wait_s
    )
    hosted.expired = True
    if hosted.meta_created:
        await hosted.store.update_stream(hosted.stream_id, state=StreamState.EXPIRED)
    await cancel_app(hosted, "the client did not resume within the resume window")
    if hosted.meta_created:
        await hosted.store.delete_stream(hosted.stream_id)


async def closed_by_client(hosted: HostedStream) -> None:
    """The client closed a stream whose close is its cancel (`StreamCore.left`, 2026-07-28).

    The app is told at once (`http.disconnect`, as it would be unwrapped) and the
    stream is freed once the app is done (an expired stream is deleted then), for
    nobody may resume it. Nothing of this is an error.
    """
    logger.debug("stream %s: the client closed it; cancelling its request", hosted.stream_id)
    await cancel_app(hosted, "the client closed the stream")


def left_unanswered(hosted: HostedStream) -> None:
    """The first connection left before its answer opened (the app had not answered yet,
    or its answer was held): where a close is a cancel, the app's work is cancelled."""
    survives = hosted.delivery is not None and hosted.delivery.survives_close
    if hosted.core.left(Reason.GONE, survives_close=survives):
        spawn(closed_by_client, hosted)


async def forget(hosted: HostedStream) -> None:
    """Free the record of a stream nobody may resume once it is over (nothing is kept for
    a 2026-07-28 request beyond what a task - `survives_close` - needs)."""
    delivery = hosted.delivery
    if (
        not hosted.core.close_cancels
        or not hosted.meta_created
        or hosted.expired
        or (delivery is not None and delivery.survives_close)
    ):
        return
    try:
        await hosted.store.delete_stream(hosted.stream_id)
    except Exception as exc:
        if not hosted.engine.store_outage(exc):
            raise


async def cancel_app(hosted: HostedStream, reason: str) -> None:
    """Stop the app's work for a stream the way its protocol revision expects."""
    hosted.expired = True
    hosted.core.expiry_paused = True
    if (
        hosted.kind is StreamKind.REQUEST
        and hosted.session_id is not None
        and not p.at_least(hosted.version, p.SINGLE_EXCHANGE_VERSION)
    ):
        notification = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": hosted.request_id, "reason": reason},
        }
        try:
            await hosted.engine.call_app(
                hosted.scope, hosted.path, hosted.session_id, hosted.version, p.dumps(notification)
            )
        except Exception:
            logger.exception("stream %s: could not deliver the cancellation", hosted.stream_id)
        with anyio.move_on_after(CANCEL_GRACE_S):
            await hosted.done.wait()
    hosted.disconnect_app()
    with anyio.move_on_after(CANCEL_GRACE_S):
        await hosted.done.wait()
    if not hosted.done.is_set():
        logger.warning("stream %s: the app ignored the cancellation; stopping it", hosted.stream_id)
        hosted.app_scope.cancel()
