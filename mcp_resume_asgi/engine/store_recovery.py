"""The engine's one waiter for the store to come back, for the streams whose writes it holds.

A hosted stream whose write fails because the store cannot be reached keeps what
it could not write (`core/held_writes.py`) and is handed to this waiter. One task per
engine, and only while something is held: it tries the store again after a
backoff (`0.1 s` doubling up to `STORE_RETRY_S`), each try being the first held
stream's own write, and when the store answers writes every held stream, oldest
first. No stream has a timer or task of its own for this, and a store that never
fails costs nothing: the waiter exists only between a failed write and the write
that catches up.

Logged once per outage, with its cause (WARNING), then once when everything held
is written (INFO); each try that fails meanwhile at DEBUG.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

import anyio

from mcp_resume_asgi.core.held_writes import Backoff, HeldBudget, HeldWrites
from mcp_resume_asgi.engine.scheduler import spawn
from mcp_resume_asgi.store.health import STORE_RETRY_S, describe_error

__all__ = ["FIRST_RETRY_S", "HeldRecorder", "HeldStream", "StoreRecovery"]

logger = logging.getLogger(__name__)

#: The first try after a failed write; each failed try doubles the wait, up to `STORE_RETRY_S`.
FIRST_RETRY_S = 0.1


class HeldRecorder(Protocol):
    """A stream's recorder, as far as writing what it holds goes (`recording.Recorder`)."""

    held: HeldWrites | None

    async def write_held(self) -> None: ...


class HeldStream(Protocol):
    """A stream whose recorder holds writes the store failed (a `HostedStream`)."""

    @property
    def stream_id(self) -> str: ...
    @property
    def recorder(self) -> HeldRecorder: ...


class StoreRecovery:
    """Streams with writes held for the store, and the one task that writes them (see above)."""

    def __init__(self, store_outage: Callable[[BaseException], bool]) -> None:
        self.store_outage = store_outage
        """Whether an error says the store is down (the middleware is told)."""
        self.waiting: dict[str, HeldStream] = {}
        """By stream id, in the order their first write failed. The streams themselves, not
        proxies: a stream whose request is over stays here until what it holds is written."""
        self.running = False
        self.budget = HeldBudget()
        """What the held writes of all the engine's streams may take in memory, together."""

    def hold(self, hosted: HeldStream, exc: BaseException) -> None:
        """`hosted` holds writes the store failed (`exc`): write them once it answers again."""
        self.waiting[hosted.stream_id] = hosted
        if not self.running:
            self.running = True
            logger.warning(
                "the store failed a stream's write (%s): what streams send is kept in memory "
                "(within each stream's limits) and written once the store answers again",
                describe_error(exc),
            )
            spawn(self._recover)

    async def _recover(self) -> None:
        started = time.monotonic()
        backoff = Backoff(FIRST_RETRY_S, STORE_RETRY_S)
        written = tries = 0
        try:
            while self.waiting:
                await anyio.sleep(backoff.next_delay())
                tries += 1
                written += await self._write_all()
        finally:
            self.running = False
        logger.info(
            "the store answers again: wrote what %d stream(s) held, %.1f s after the first failed "
            "write (%d tries)",
            written,
            time.monotonic() - started,
            tries,
        )

    async def _write_all(self) -> int:
        """Write every held stream, oldest first; stop at the first that finds the store still down."""
        written = 0
        for stream_id, hosted in list(self.waiting.items()):
            try:
                await hosted.recorder.write_held()
            except Exception as exc:
                if self.store_outage(exc):
                    logger.debug("the store still fails (%s); trying again later", describe_error(exc))
                    return written
                logger.exception("stream %s: its held writes could not be written; dropped", stream_id)
                if hosted.recorder.held is not None:
                    hosted.recorder.held.discard()
                hosted.recorder.held = None
            else:
                written += 1
            del self.waiting[stream_id]
        return written
