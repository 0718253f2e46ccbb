"""The one thread that writes a `SQLiteStore`'s file, so the event loop never waits on the disk.

Writes are queued by the loop (`SQLiteWriter.write`, which the caller awaits, or `submit`, which
it does not) and run by a dedicated thread, which owns the SQLite connection from then on. What
has piled up while the thread was busy is committed together, in one transaction (a group
commit: a busy server pays one commit for many writes). A write that finds the thread idle, with
nothing else queued and one write in the last transaction, is committed at once; while writes
pile up, the thread lets more of them join before it commits (`GATHER_S`, like PostgreSQL's
`commit_delay`, which waits only when other transactions are active): a lone caller waiting for
its commit does not pay the gathering, and a busy server commits fewer, larger transactions.
Should a transaction fail, each write of it is tried alone, so only the writes that fail
themselves report an error. A write is reported done to its caller once its transaction
committed: on asyncio through `call_soon_threadsafe`, on trio through the run's `TrioToken`, so
the writer works under both (anyio's backends).

The thread also keeps the file bounded: now and then, after a commit (never on a timer of its
own), it runs `maintain`, a bounded sweep of expired rows (`sqlite_file.sweep`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["MAINTAIN_EVERY_S", "Op", "SQLiteWriter"]

logger = logging.getLogger(__name__)

Op = tuple[str, Sequence[Any] | Sequence[Sequence[Any]], bool]
"""One statement: `(sql, parameters, many)`; `many`: `parameters` is a list of rows (`executemany`)."""

#: At most this many queued writes go into one transaction.
MAX_BATCH = 256
#: How long the thread, woken by a write while writes pile up (more queued behind it, or more
#: than one in the last transaction), lets others queue up before it commits them together.
GATHER_S = 0.001
#: How often, at most, the thread sweeps the file after a commit.
MAINTAIN_EVERY_S = 10.0

_Done = Callable[[BaseException | None], None]
_STOP = object()


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():  # (its caller was cancelled: the write went on regardless)
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


class SQLiteWriter:
    """A thread that runs queued writes on `connection`, in order (see the module docstring).

    `maintain(connection)` is called on the thread after a commit, at most every
    `MAINTAIN_EVERY_S`; `describe(error)` turns a SQLite error into the one raised to callers."""

    def __init__(
        self,
        connection: sqlite3.Connection,
        *,
        name: str,
        maintain: Callable[[sqlite3.Connection], None],
        describe: Callable[[sqlite3.Error], Exception],
    ) -> None:
        self._connection = connection
        self._maintain = maintain
        self._describe = describe
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._maintained_at = time.monotonic()
        self._gathered = 0
        """How many writes the last transaction held."""
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def queued(self) -> int:
        """Writes queued and not yet taken by the thread (approximately)."""
        return self._queue.qsize()

    def submit(self, ops: Sequence[Op], done: Callable[[BaseException | None], None]) -> None:
        """Queue `ops` without waiting: `done(error or None)` is called on the writer's thread
        once their transaction committed or failed."""
        self._queue.put((ops, done))

    async def write(self, ops: Sequence[Op]) -> None:
        """Run `ops` in a transaction of the writer's; return once it committed (raise if not).

        Cancelling the caller does not take the write back: it is queued, and runs."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            await self._write_on_trio(ops)
            return
        future: asyncio.Future[None] = loop.create_future()
        self._queue.put((ops, lambda error: loop.call_soon_threadsafe(_settle, future, error)))
        await future

    async def _write_on_trio(self, ops: Sequence[Op]) -> None:
        import trio

        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        outcome: list[BaseException | None] = []

        def settle(error: BaseException | None) -> None:
            outcome.append(error)
            done.set()

        self._queue.put((ops, lambda error: token.run_sync_soon(settle, error)))
        await done.wait()
        if outcome[0] is not None:
            raise outcome[0]

    def close(self) -> None:
        """Run what is queued, then stop the thread and close the connection (blocks until then)."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        try:
            while True:
                first = self._queue.get()
                if first is _STOP:
                    return
                if GATHER_S and (self._gathered > 1 or not self._queue.empty()):
                    time.sleep(GATHER_S)  # (what else is on its way joins this transaction)
                batch = [first]
                stop = False
                while len(batch) < MAX_BATCH:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is _STOP:
                        stop = True
                        break
                    batch.append(item)
                self._gathered = len(batch)
                self._commit(batch)
                if stop:
                    return
                now = time.monotonic()
                if now - self._maintained_at >= MAINTAIN_EVERY_S:
                    self._maintained_at = now
                    try:
                        self._maintain(self._connection)
                    except sqlite3.Error as exc:
                        self._rollback()
                        logger.warning("the store's sweep failed (it is tried again later): %s", exc)
        finally:
            self._connection.close()

    def _commit(self, batch: list[tuple[Sequence[Op], _Done]]) -> None:
        error = self._transaction([ops for ops, _ in batch])
        if error is None or len(batch) == 1:
            for _, done in batch:
                self._report(done, error)
            return
        for ops, done in batch:  # (one failed, or the commit: find which, each alone)
            self._report(done, self._transaction([ops]))

    def _transaction(self, writes: list[Sequence[Op]]) -> Exception | None:
        connection = self._connection
        try:
            connection.execute("BEGIN IMMEDIATE")
            for ops in writes:
                for sql, parameters, many in ops:
                    if many:
                        connection.executemany(sql, parameters)
                    else:
                        connection.execute(sql, parameters)
            connection.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            return self._describe(exc)
        except Exception as exc:  # (a value SQLite cannot bind: the caller's bug, told to the caller)
            self._rollback()
            return exc
        return None

    def _rollback(self) -> None:
        if self._connection.in_transaction:
            with contextlib.suppress(sqlite3.Error):  # (SQLite rolled it back itself: a full disk)
                self._connection.execute("ROLLBACK")

    @staticmethod
    def _report(done: _Done, error: BaseException | None) -> None:
        with contextlib.suppress(RuntimeError):  # (the caller's event loop is closed: nobody to tell)
            done(error)
