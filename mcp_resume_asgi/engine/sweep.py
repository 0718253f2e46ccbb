"""The sweep: what a node that is gone left running is found, though nobody follows or polls it.

Every request whose record opens without its answer is listed, while its app runs, in one index of
the store (`keys.RUNNING_INDEX`): by the call of the store that opens its record (`listing`,
`Store.open_with`), or by one of its own (`indexed`), and taken out by the call that records its
answer (`Store.append_final`'s `unlist`), or by one of its own once its app's end is recorded
(`unindexed`): a store that pays a round trip per call pays none for the index, and a request
answered in the call that opens its record is never listed. A follower or a task poll that finds a
stream's node dead runs it again (`Engine.rerun`) or ends it (`orphans.end_orphan`); the sweep does
the same for the ones nobody follows or polls - a task nobody polls, a REST call nobody GETs, a
stream whose client never comes back: each node, when its cluster link is up and then every
`node_timeout_s` (one timer of the engine's scheduler), reads the index and hands every stream
whose node's heartbeat lapsed (a node killed, a node that drained and left it, this very node in an
earlier life on the same store) to `Engine.rerun` if its route allows it (`Policy.rerun_on_loss`),
else ends it cleanly: the request's answer is recorded as an error, which its clients, `tasks/get`
(`failed`) and the REST face (`failed`) read. Either way once fleet-wide: a re-run is claimed, and
both take the record from the dead owner with one compare-and-set, which a second sweeper, a
follower or a poll that read the record before it fails (`orphans.py`). What the sweep reads is the
stream's record, as every finder reads it: the index only says where to look, and a member forged
into it names a stream whose record decides (a re-run's request is sealed, `rerun.py`).

Bounded: at most `MAX_SWEPT` streams per sweep (the oldest first), one sweep at a time per node;
the index holds at most `MAX_INDEXED` streams (past it a stream is not swept: it is still run
again or ended when a client or a poll finds its node gone).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from mcp_resume_asgi.core.orphans import Orphan, judge
from mcp_resume_asgi.engine.cluster import ALIVE, Node
from mcp_resume_asgi.engine.scheduler import Scheduler, Timer, spawn
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import Listing, Store, StreamMeta

__all__ = ["MAX_INDEXED", "MAX_SWEPT", "PAGE", "Sweep"]

logger = logging.getLogger(__name__)

#: The most streams the index of running requests holds (past it, a stream is not swept: it is
#: still run again or ended when a client or a poll finds its node gone).
MAX_INDEXED = 100_000
#: The most streams one sweep looks at.
MAX_SWEPT = 1_000
#: How many streams one read of the index brings.
PAGE = 100


def listing(ttl_s: float) -> Listing:
    """A running request's entry in the index, for as long as its running record is kept
    (`ttl_s`): what the call of the store that opens its record lists it with (`Store.open_with`)."""
    return Listing(keys.RUNNING_INDEX, time.time() + ttl_s, MAX_INDEXED)


def listed(stream_id: str, added: bool) -> bool:
    """`added`, as the store said of a `listing`; False is logged (once per stream): the index is
    full, and the stream is not swept (it is still ended or run again when a client or a poll
    finds its node gone)."""
    if not added:
        logger.warning("stream %s: the index of running requests is full; it is not swept", stream_id)
    return added


async def indexed(store: Store, stream_id: str, ttl_s: float) -> bool:
    """List a running request's stream for the sweep by a call of its own (a record opened
    without `Store.open_with`), for as long as its running record is kept (`ttl_s`). False: the
    index is full (`listed`), or the store did not answer (its outage is logged where it is
    found: `store.health`); it is not swept, and is still ended or run again when a client or a
    poll finds its node gone. The index is a backstop: a failure to write it never fails the
    request."""
    entry = listing(ttl_s)
    try:
        added = await store.index_add(entry.index, stream_id, entry.expires_at, cap=entry.cap)
    except Exception as exc:
        logger.debug("stream %s: not listed for the sweep (%s)", stream_id, exc)
        return False
    return listed(stream_id, added)


async def unindexed(store: Store, stream_id: str) -> None:
    """The request's end is recorded (answered, or ended): the sweep has nothing to do with it.
    A store that does not answer leaves it listed: the sweep drops a listed stream whose record
    is over or gone, and the entry expires with the running record's time to live."""
    try:
        await store.index_remove(keys.RUNNING_INDEX, stream_id)
    except Exception as exc:
        logger.debug("stream %s: left in the sweep's index (%s)", stream_id, exc)


class Sweep:
    """This node's sweep of the streams whose node is gone (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        node: Node,
        scheduler: Scheduler,
        rerun: Callable[[StreamMeta], Awaitable[bool]],
        end: Callable[[StreamMeta, str], Awaitable[bool]],
    ) -> None:
        """`rerun`: `Engine.rerun` (True: the call goes on); `end`: `Engine.end_orphan` (ends it
        once fleet-wide; its second argument says who found it)."""
        self.store = store
        self.node = node
        self.scheduler = scheduler
        self.rerun = rerun
        self.end = end
        self.timer = Timer(self._due)
        self._sweeping = False

    def start(self) -> None:
        """Sweep now, and every `node_timeout_s` from then on (until `stop`)."""
        if self.timer.callback is None:
            self.timer = Timer(self._due)
        self.scheduler.arm(self.timer, time.monotonic())

    def stop(self) -> None:
        self.timer.cancel()

    def _due(self, now: float) -> float | None:
        if not self._sweeping:
            self._sweeping = True
            spawn(self._sweep_once)
        return now + self.node.timeout_s

    async def _sweep_once(self) -> None:
        try:
            await self.sweep()
        except Exception as exc:
            logger.warning(
                "sweep: the store did not answer (%s); next sweep in %ss", exc, self.node.timeout_s
            )
        finally:
            self._sweeping = False

    async def sweep(self) -> int:
        """One sweep: how many streams of a gone node it handed on (run again, or ended)."""
        node, store = self.node, self.store
        if not node.running or node.status != ALIVE:
            return 0  # (a leaving node takes nothing on)
        handed = 0
        seen = 0
        after: tuple[float, str] | None = None
        while seen < MAX_SWEPT:
            page = await store.index_page(keys.RUNNING_INDEX, after=after, limit=PAGE)
            if not page:
                break
            for stream_id, _expires in page:
                seen += 1
                meta = await store.get_stream(stream_id)
                verdict = judge(meta, node.node_id)
                if verdict is Orphan.OVER:
                    await unindexed(store, stream_id)
                    continue
                assert meta is not None
                if verdict is Orphan.OURS or await node.alive(meta.owner):
                    continue
                handed += 1
                if await self.rerun(meta):
                    continue  # (run again, here or by the node that claimed it: still running)
                if not await self.end(meta, "the sweep"):
                    await unindexed(store, stream_id)  # (its record is gone)
            after = (page[-1][1], page[-1][0])
            if len(page) < PAGE:
                break
        if handed:
            logger.info("sweep: %d stream(s) of nodes that are gone handed on", handed)
        return handed
