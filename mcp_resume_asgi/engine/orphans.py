"""Ending a stream whose node is gone, the one way every finder does, once fleet-wide.

A stream whose owner died before its answer (`core/orphans.py`) and that is not run again
(`Engine.rerun`) is found by whoever comes first: a client following it (`follower.py`), a task
poll or a REST call's GET (`tasks/update.view_of`), or the sweep (`sweep.py`), on any node and
maybe at once. Each ends it here, and only one of them does: the record is taken from the dead
owner with a compare-and-set (`Store.update_stream_if` on its owner and state, the same one a
re-run takes it with), so of two finders, or of a finder and a re-run, one wins and the others
read on. The winner records the error (`core.orphans.ORPHAN_TEXT`) as the request's answer,
under an id past every one the lost node can have handed out (`core.orphans.after_loss`: not
right after the record's last event, which that node may have given a client for an event its
store never kept), fenced on itself (`Store.append_final` with `owner`): from then on every
client, `tasks/get` and the REST face read the same end from the store - a resume gets the
error event, a task is `failed` with it, a REST call `failed` - whether or not anyone was there
when it was found.
A winner that dies before its write leaves the record owned by a node that is gone: the next
finder takes it the same way.

A session's standalone GET stream has no answer to record: it is marked expired (the session
itself moves with `adoption.py`).
"""

from __future__ import annotations

import logging
import time

from mcp_resume_asgi.core.orphans import ORPHAN_TEXT, after_loss
from mcp_resume_asgi.policy import Policy
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import FencedError, Store, StreamKind, StreamMeta, StreamState
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.sse import encode_payload

__all__ = ["end_orphan"]

logger = logging.getLogger(__name__)


async def end_orphan(store: Store, node_id: str, meta: StreamMeta, policy: Policy, found_by: str) -> bool:
    """End `meta`'s stream, whose owner (`meta.owner`) is gone, for `node_id`, unless another
    finder or a re-run took it first. True when the stream is over or goes on (ended here or
    by another node, answered, run again: its clients read on); False when its record is gone.
    `found_by`: who found it (logged)."""
    stream_id, lost = meta.stream_id, meta.owner
    expect = {"owner": lost, "state": StreamState.RUNNING}
    if meta.kind is not StreamKind.REQUEST:
        applied, now = await store.update_stream_if(stream_id, expect, state=StreamState.EXPIRED)
        if applied:
            logger.info("stream %s: its node %s is gone; expired (found by %s)", stream_id, lost, found_by)
        return now is not None
    applied, taken = await store.update_stream_if(stream_id, expect, owner=node_id, last_contact=time.time())
    if not applied or taken is None or taken.final_seq is not None:
        return taken is not None  # (another finder, a re-run or its own answer came first)
    seq = after_loss(taken.last_seq)
    error = p.error_message(meta.request_id, p.STREAM_ERROR, ORPHAN_TEXT)
    try:
        await store.append_final(
            stream_id,
            [(seq, encode_payload(p.dumps(error), b"message"))],
            max_events=policy.max_events_per_stream,
            max_bytes=policy.max_bytes_per_stream,
            final_seq=seq,
            owner=node_id,  # (kept as long as its record was: a task's outlives its TTL)
        )
    except FencedError:
        return True  # (taken from this node meanwhile: it took it for lost, as it did its owner)
    if policy.rerun_on_loss:
        await store.delete_key(keys.rerun_request(stream_id))  # (ended: never run again)
    logger.warning(
        "stream %s: its node %s is gone before its answer and it is not run again; ended with an "
        "error (found by %s)",
        stream_id,
        lost,
        found_by,
    )
    return True
