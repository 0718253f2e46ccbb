"""An SSE answer's bytes and its end, the same whoever serves the connection.

A client connection is served either by the hosted stream's writer, when the
stream's app runs on this node (`writer.py`), or by a follower reading the store,
when it runs elsewhere or has finished (`follower.py`). Both must frame events
with the same ids (`wire.sse.frame_events`), end an answer the same way for the
same reason, and record where a connection stopped the same way, or a client
would see a difference between the two; so that is written once, here.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from mcp_resume_asgi.core.stream import AT_WILL, Attachment, Reason
from mcp_resume_asgi.engine.connection import Connection
from mcp_resume_asgi.wire.sse import frame_events, retry_frame

if TYPE_CHECKING:
    from mcp_resume_asgi.policy import Policy
    from mcp_resume_asgi.store.base import Store

#: (`frame_events` is `wire.sse`'s, re-exported here until the old paths are retired.)
__all__ = ["finish_answer", "frame_events", "note_detached"]


async def finish_answer(conn: Connection, reason: Reason, cursor: int, policy: Policy) -> None:
    """End a connection's answer as its reason says: the feature layer's interim result after
    its deadline, `retry:` after an at-will close, else nothing more."""
    delivery = conn.delivery
    if reason is Reason.DEADLINE and delivery is not None and delivery.on_deadline is not None:
        await conn.finish(await delivery.on_deadline(cursor))
    elif reason in AT_WILL and policy.retry_ms is not None:
        await conn.finish(retry_frame(policy.retry_ms))
    else:
        await conn.finish()


async def note_detached(store: Store, stream_id: str, att: Attachment) -> None:
    """Record where a connection stopped, unless a newer one has taken the stream over."""
    await store.update_stream_if(
        stream_id,
        {"attach_gen": att.gen},
        attached=False,
        last_contact=time.time(),
        delivered_seq=max(att.cursor, 0),
    )
