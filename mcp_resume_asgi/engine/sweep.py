"""The sweep: calls that may run again are found when their node is gone, not only when a
client comes back for them.

A call on a route with `Policy.rerun_on_loss` is kept in the store while it runs
(`rerun.py`), and listed in one index (`keys.RERUN_INDEX`). A follower or a task poll that
finds its node dead runs it again (`Engine.rerun`); the sweep does the same for the ones
nobody follows or polls: each node, when its cluster link is up and then every
`node_timeout_s` (one timer of the engine's scheduler), reads the index and hands every call
whose node's heartbeat lapsed (a node killed, a node that drained and left it, this very
node in an earlier life on the same store) to `Engine.rerun`, whose claim lets one node of
the fleet run each loss. A call that cannot run again (its request no longer kept) is ended:
its record is marked expired, and leaves the index (one whose re-run another node claimed
is left to it).

Bounded: at most `MAX_SWEPT` calls per sweep (the oldest first), one sweep at a time per node.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from mcp_resume_asgi.engine.cluster import ALIVE, Node
from mcp_resume_asgi.engine.scheduler import Scheduler, Timer, spawn
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import Store, StreamMeta, StreamState

__all__ = ["MAX_INDEXED", "MAX_SWEPT", "PAGE", "Sweep"]

logger = logging.getLogger(__name__)

#: The most calls the index of re-runnable calls holds (past it, a call is not swept: it is
#: still run again when a client or a poll finds its node gone).
MAX_INDEXED = 100_000
#: The most calls one sweep looks at.
MAX_SWEPT = 1_000
#: How many calls one read of the index brings.
PAGE = 100


async def indexed(store: Store, stream_id: str, ttl_s: float) -> None:
    """List a re-runnable call for the sweep, for as long as its request is kept."""
    if not await store.index_add(keys.RERUN_INDEX, stream_id, time.time() + ttl_s, cap=MAX_INDEXED):
        logger.debug("stream %s: the index of re-runnable calls is full; it is not swept", stream_id)


async def unindexed(store: Store, stream_id: str) -> None:
    """The call was answered, or ended: the sweep has nothing to do with it."""
    await store.index_remove(keys.RERUN_INDEX, stream_id)


class Sweep:
    """This node's sweep of re-runnable calls whose node is gone (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        node: Node,
        scheduler: Scheduler,
        rerun: Callable[[StreamMeta], Awaitable[bool]],
    ) -> None:
        self.store = store
        self.node = node
        self.scheduler = scheduler
        self.rerun = rerun
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
        """One sweep: how many calls of a gone node it handed on (run again, or ended)."""
        node, store = self.node, self.store
        if not node.running or node.status != ALIVE:
            return 0  # (a leaving node takes nothing on)
        handed = 0
        seen = 0
        after: tuple[float, str] | None = None
        while seen < MAX_SWEPT:
            page = await store.index_page(keys.RERUN_INDEX, after=after, limit=PAGE)
            if not page:
                break
            for stream_id, _expires in page:
                seen += 1
                meta = await store.get_stream(stream_id)
                if meta is None or meta.state is not StreamState.RUNNING or meta.final_seq is not None:
                    await unindexed(store, stream_id)
                    continue
                if meta.owner == node.node_id or await node.alive(meta.owner):
                    continue
                handed += 1
                if not await self.rerun(meta) and await store.get_key(keys.rerun_request(stream_id)) is None:
                    # Not run again, and never will be (its request is not kept): ended.
                    logger.warning(
                        "stream %s: its node %s is gone and it is not run again; ended", stream_id, meta.owner
                    )
                    await store.update_stream(stream_id, state=StreamState.EXPIRED)
                    await unindexed(store, stream_id)
            after = (page[-1][1], page[-1][0])
            if len(page) < PAGE:
                break
        if handed:
            logger.info("sweep: %d call(s) of nodes that are gone handed on", handed)
        return handed
