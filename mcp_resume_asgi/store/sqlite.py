"""`SQLiteStore`: the `Store` contract on one SQLite file, so one process survives its own restart.

The store is a `MemoryStore` whose every change is also written to a file. Reads are served
from memory (the process that holds the file's lock is the only one that writes it, so memory
and file agree). What changes in one round of the event loop (streams' records and new events,
sessions, keys...) is handed, at the round's end, to the writer thread (`sqlite_writer.py`),
which commits whatever is queued in one transaction: the event loop never waits on the disk,
and a busy server commits many writes at once. While the writer commits one hand-over, what
changes meanwhile waits in memory and is handed over, together, as soon as that commit is done:
a stream changed several times meanwhile (created, then finished a few rounds later) is encoded
and written once, and a busy loop spends its time serving, not encoding rows a later change
replaces. (Past `HAND_OVER_AT` rows waiting, they are handed over at once regardless.) A change of how a stream's client is connected alone (`PASSING`) is written with
the stream's next change. At startup the store reads the file back (`sqlite_file.load`): the
streams, their events, the sessions, keys and index members of the process's earlier life,
within the memory store's bounds, which therefore bound the file too.

When a write returns: by default at once (the writer commits it a millisecond or two later on
an idle machine; on a busy one, with the commit after the one in progress); with `wait_for_commit=True`, once committed (then in the file, and a failed
write raises at its own call), at the cost of a thread round trip per write. What a committed
write survives, and what a power loss can take: `sqlite_file.py`.

A write that fails (the disk full, or the file at `max_file_bytes`) is logged once, and the
writes after it wait for their commit until one succeeds, raising `SQLiteStoreError` meanwhile:
the middleware takes that as a store outage (`is_unavailable_error`) and serves without the
store, as on a Redis outage. Memory keeps the change the file lacks; the stream's rows are
written whole with its next change.

A restarted process is a new node (`durable`): what the earlier life left running has an owner
no longer alive (its heartbeat key is dropped when the file is opened), so its streams, tasks
and REST calls are found, and ended or re-run, as another node's would be (`engine/cluster.py`).
Stream URLs and event ids are signed with a secret kept in the file when none is configured
(`own_secret`), so those minted before the restart still verify.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio

from mcp_resume_asgi.store import sqlite_file
from mcp_resume_asgi.store.base import (
    KeyAndStream,
    Listing,
    SessionInfo,
    Store,
    StoreUsage,
    StreamMeta,
)
from mcp_resume_asgi.store.bounds import check_bounds
from mcp_resume_asgi.store.memory import MemoryStore
from mcp_resume_asgi.store.memory_stream import StreamEntry
from mcp_resume_asgi.store.sqlite_file import SQLiteStoreError
from mcp_resume_asgi.store.sqlite_writer import Op, SQLiteWriter

__all__ = ["SQLiteStore"]

logger = logging.getLogger(__name__)

#: The fields of a stream's record that say how its client is connected now: a change of them
#: alone is not written for itself, but with the stream's next change (after a restart no
#: connection is attached, whatever the file says).
PASSING = frozenset({"attached", "attach_gen", "last_contact", "delivered_seq"})
#: Rows waiting in memory past which they are handed to the writer at once (not at the end of
#: the loop's round, nor after the commit in progress).
HAND_OVER_AT = 512
#: Writes queued for the writer beyond which a write waits for its commit (the writer is behind).
MAX_QUEUED = 1024
_ALL = 1 << 62
"""Events to copy from an entry: all of them."""

_UPSERT_STREAM = (
    "INSERT INTO streams (id, meta, expires_at, touched) VALUES (?, ?, ?, ?) ON CONFLICT (id) DO UPDATE"
    " SET meta = excluded.meta, expires_at = excluded.expires_at, touched = excluded.touched"
)
_UPSERT_EVENT = "INSERT OR REPLACE INTO events (stream, seq, payload) VALUES (?, ?, ?)"
_DELETE_EVENTS = "DELETE FROM events WHERE stream = ?"
_TRIM_EVENTS = "DELETE FROM events WHERE stream = ? AND seq < ?"
_DELETE_STREAM = "DELETE FROM streams WHERE id = ?"
_UPSERT_SESSION = "INSERT OR REPLACE INTO sessions (id, info, expires_at) VALUES (?, ?, ?)"
_DELETE_SESSION = "DELETE FROM sessions WHERE id = ?"
_UPSERT_KEY = "INSERT OR REPLACE INTO keys (key, value, expires_at) VALUES (?, ?, ?)"
_DELETE_KEY = "DELETE FROM keys WHERE key = ?"
_UPSERT_MEMBER = "INSERT OR REPLACE INTO members (idx, member, expires_at) VALUES (?, ?, ?)"
_DELETE_MEMBER = "DELETE FROM members WHERE idx = ? AND member = ?"


_OPEN: weakref.WeakSet[SQLiteStore] = weakref.WeakSet()
"""The stores not closed yet, closed when the interpreter exits (`_close_all`)."""


@atexit.register
def _close_all() -> None:
    """At exit, commit what each open store has queued: its writer is a daemon thread, which
    the interpreter would otherwise stop wherever it is (a graceful shutdown would lose the
    writes of the writer's last round)."""
    for store in list(_OPEN):
        store.close()


def _describe(path: str) -> Any:
    def describe(error: sqlite3.Error) -> Exception:
        return SQLiteStoreError(f"the store file {path} could not be written: {error}")

    return describe


class SQLiteStore(Store):
    """`Store` on one SQLite file, for one process (see the module docstring).

    `path`: the file (created if absent; `<path>.lock` and `<path>-wal` beside it). The bounds
    are `MemoryStore`'s, and bound the file as they bound memory; `max_file_bytes`, when given,
    bounds the file itself (a write that would pass it fails as on a full disk).
    `wait_for_commit`: each write returns once committed, not once noted for the writer.

    Opening the file reads it back, takes its lock and starts the writer thread: build the store
    once per process, at startup; a second process is refused (`SQLiteStoreLockedError`).
    `aclose` (or `close`) lets the file go.
    """

    durable = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_bytes: int = 256 * 1024 * 1024,
        max_streams: int = 100_000,
        max_sessions: int = 100_000,
        max_keys: int = 100_000,
        max_index_members: int = 1_000_000,
        max_file_bytes: int | None = None,
        wait_for_commit: bool = False,
    ) -> None:
        if max_file_bytes is not None:
            check_bounds("SQLiteStore", max_file_bytes=max_file_bytes)
        self.path = os.fspath(path)
        if not self.path or self.path == ":memory:" or self.path.startswith("file:"):
            raise ValueError("SQLiteStore needs the path of a file (for memory only, use MemoryStore)")
        self.max_bytes = max_bytes
        self.max_streams = max_streams
        self.max_sessions = max_sessions
        self.max_keys = max_keys
        self.max_index_members = max_index_members
        self._memory = MemoryStore(
            max_bytes=max_bytes,
            max_streams=max_streams,
            max_sessions=max_sessions,
            max_keys=max_keys,
            max_index_members=max_index_members,
        )
        changed: set[str] = set()
        self._changed = changed
        """Streams changed in memory since their rows were last handed to the writer."""

        class JournaledEntry(StreamEntry):
            """A stream entry that notes each change of its stream, for the file."""

            __slots__ = ()

            def wake(self) -> None:
                StreamEntry.wake(self)
                changed.add(self.meta.stream_id)

            @staticmethod
            def forgotten(stream_id: str) -> None:
                changed.add(stream_id)

        self._memory.entry_type = JournaledEntry
        self._lock_fd = sqlite_file.lock(self.path)
        try:
            connection = sqlite_file.connect(self.path, max_file_bytes=max_file_bytes)
            try:
                self._secret = sqlite_file.secret(connection)
                self._saved = sqlite_file.load(connection, self._memory)
                touched = connection.execute("SELECT coalesce(max(touched), 0) FROM streams").fetchone()[0]
            except BaseException:
                connection.close()
                raise
        except BaseException:
            sqlite_file.unlock(self._lock_fd)
            raise
        self._changed.clear()
        """(What loading changed is in the file already.)"""
        self._touched = int(touched)
        """Counts stream writes, across lives: the file's streams are read back in this order."""
        self._closed = False
        self.wait_for_commit = wait_for_commit
        self.write_behind = wait_for_commit  # (a write that waits for the disk: the app goes on meanwhile)
        self._ops: list[Op] = []
        """Rows other than the streams' noted since the last hand-over, in order."""
        self._handing_over = False
        """A hand-over is scheduled for the end of the loop's round."""
        self._committing = False
        """A hand-over is with the writer, not committed yet (the next one waits for it)."""
        self._waiting = False
        """A hand-over waits for that commit (`_hand_over` runs once it is done)."""
        self._baton = threading.Lock()
        """Guards `_committing` and `_waiting`, which the writer's thread clears and reads."""
        self._call_soon: Callable[[Callable[[], None]], object] | None = None
        """Runs a function on the event loop's thread, from any thread (the last loop that wrote)."""
        self._rewrite: set[str] = set()
        """Streams to write whole with their next change, their events in the file deleted first."""
        self._unsaved: list[str] = []
        """Streams whose last write failed: written whole with their next change."""
        self._failed: BaseException | None = None
        """The last write failed (the next ones wait for their commit until one succeeds)."""
        self._writer = SQLiteWriter(
            connection,
            name=f"SQLiteStore {self.path}",
            maintain=self._maintain,
            describe=_describe(self.path),
        )
        self._closing = threading.Lock()
        _OPEN.add(self)

    def is_unavailable_error(self, exc: BaseException) -> bool:
        return isinstance(exc, SQLiteStoreError)

    def own_secret(self) -> bytes:
        return self._secret

    # -- the file ----------------------------------------------------------------------
    def _maintain(self, connection: sqlite3.Connection) -> None:
        sqlite_file.sweep(
            connection,
            max_sessions=self.max_sessions,
            max_keys=self.max_keys,
            max_members=self.max_index_members,
        )

    def _stream_rows(self) -> list[Op]:
        """The rows of every stream changed since its last write, and forget they changed."""
        ops: list[Op] = []
        saved, rewrite = self._saved, self._rewrite
        while self._unsaved:
            stream_id = self._unsaved.pop()
            saved.pop(stream_id, None)
            rewrite.add(stream_id)
        changed = self._changed
        if not changed:
            return ops
        mono, wall = time.monotonic(), time.time()
        held = self._memory.held
        records: list[tuple[str, str, float, int]] = []
        events: list[tuple[str, int, bytes]] = []
        for stream_id in changed:
            entry = held(stream_id)
            if entry is None:
                ops.append((_DELETE_EVENTS, (stream_id,), False))
                ops.append((_DELETE_STREAM, (stream_id,), False))
                saved.pop(stream_id, None)
                continue
            meta = entry.meta
            self._touched += 1
            records.append(
                (stream_id, sqlite_file.encode_meta(meta), entry.expires_at - mono + wall, self._touched)
            )
            was = saved.get(stream_id)
            if was is None:  # (new to the file, or to be written whole: `_rewrite`)
                if stream_id in rewrite:
                    rewrite.discard(stream_id)
                    ops.append((_DELETE_EVENTS, (stream_id,), False))
                first = 0
            else:
                if meta.first_seq > was[1]:
                    ops.append((_TRIM_EVENTS, (stream_id, meta.first_seq), False))
                first = entry.after(was[0])
            if first < entry.count():
                events.extend((stream_id, seq, p) for seq, p in entry.events(first, _ALL))
            saved[stream_id] = (meta.last_seq, meta.first_seq)
        # (Each stream's deletions above come before its rows below; one statement for all the
        # records, one for all the events.)
        if records:
            ops.append((_UPSERT_STREAM, records, True))
        if events:
            ops.append((_UPSERT_EVENT, events, True))
        changed.clear()
        return ops

    async def _write(self, *ops: Op) -> None:
        """Note `ops` and the changed streams for the writer. Without `wait_for_commit` (and while
        writes succeed) they are handed over at the end of the event loop's round, with whatever
        else changed in it, and this returns at once; else this hands them over now and waits
        for their commit."""
        if ops:
            self._ops.extend(ops)
        if not (self._changed or self._ops):
            return
        if self._closed:
            raise SQLiteStoreError(f"the store file {self.path} is closed")
        if self.wait_for_commit or self._failed is not None or self._writer.queued >= MAX_QUEUED:
            rows = self._take()
            try:
                await self._writer.write(rows)
            except SQLiteStoreError as exc:
                self._written(rows, exc)
                raise
            self._written(rows, None)
        elif len(self._ops) + len(self._changed) >= HAND_OVER_AT:
            self._hand_over()  # (a caller that does not let the loop go round: do not pile up)
        elif not self._handing_over:
            self._handing_over = True
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # (trio)
                import trio

                run_sync_soon = trio.lowlevel.current_trio_token().run_sync_soon
                run_sync_soon(self._hand_over)
                self._call_soon = run_sync_soon
            else:
                loop.call_soon(self._hand_over)
                self._call_soon = loop.call_soon_threadsafe

    def _take(self) -> list[Op]:
        """The rows of what changed since the last hand-over, and forget they changed."""
        rows = self._stream_rows()
        if self._ops:
            rows.extend(self._ops)
            self._ops = []
        return rows

    def _hand_over(self) -> None:
        """(At the end of a round of the event loop, or once the writer committed the last
        hand-over.) Queue what changed since for the writer; while it commits the last one, wait
        for that commit instead (unless `HAND_OVER_AT` rows are waiting)."""
        self._handing_over = False  # (a hand-over still scheduled finds nothing, or what came since)
        if self._closed:
            return
        with self._baton:
            if self._committing and len(self._ops) + len(self._changed) < HAND_OVER_AT:
                self._waiting = True
                return
            self._committing = True
        rows = self._take()
        if rows:
            self._writer.submit(rows, lambda error: self._handed_over(rows, error))
        else:
            with self._baton:
                self._committing = False

    def _handed_over(self, rows: list[Op], error: BaseException | None) -> None:
        """(On the writer's thread.) A hand-over committed, or failed: hand over what waited."""
        self._written(rows, error)
        with self._baton:
            self._committing = False
            waiting, self._waiting = self._waiting, False
        if waiting and self._call_soon is not None:
            with contextlib.suppress(RuntimeError):  # (the loop is closed: `close` writes what is left)
                self._call_soon(self._hand_over)

    def _written(self, rows: list[Op], error: BaseException | None) -> None:
        """A write committed, or failed (on the writer's thread when it was not waited for)."""
        if error is None:
            if self._failed is not None:
                self._failed = None
                logger.warning("the store file %s is written again", self.path)
            return
        first, self._failed = self._failed is None, error
        if first:
            logger.error("%s", error)  # ("the store file ... could not be written: <cause>")
        # Each stream of it is written whole with its next change (memory keeps what the file
        # lacks meanwhile); not at once with others' writes, which it would fail too. (Noted
        # here, on whichever thread; forgotten by `_stream_rows`, on the loop's.)
        for sql, parameters, _ in rows:
            if sql == _UPSERT_STREAM:
                self._unsaved.extend(str(record[0]) for record in parameters)

    # -- streams -----------------------------------------------------------------------
    def _made(self, stream_id: str) -> None:
        """A stream was created: one made again under an id the file holds is written whole."""
        if self._saved.pop(stream_id, None) is not None:
            self._rewrite.add(stream_id)
        self._changed.add(stream_id)

    async def create_stream(self, meta: StreamMeta, ttl_s: float) -> None:
        await self._memory.create_stream(meta, ttl_s)
        self._made(meta.stream_id)
        await self._write()

    async def open_with(
        self,
        meta: StreamMeta,
        ttl_s: float,
        events: Sequence[tuple[int, bytes]],
        *,
        max_events: int,
        max_bytes: int,
        final_seq: int | None = None,
        retain_s: float | None = None,
        listing: Listing | None = None,
    ) -> bool:
        stream_id = meta.stream_id
        await self._memory.open_with(
            meta,
            ttl_s,
            events,
            max_events=max_events,
            max_bytes=max_bytes,
            final_seq=final_seq,
            retain_s=retain_s,
        )
        self._made(stream_id)
        await self._write()
        return await self._list_by_call(stream_id, listing, final_seq)

    async def append_final(
        self,
        stream_id: str,
        events: Sequence[tuple[int, bytes]],
        *,
        max_events: int,
        max_bytes: int,
        final_seq: int,
        retain_s: float | None = None,
        owner: str | None = None,
        unlist: str | None = None,
    ) -> bool:
        done = await self._memory.append_final(
            stream_id,
            events,
            max_events=max_events,
            max_bytes=max_bytes,
            final_seq=final_seq,
            retain_s=retain_s,
            owner=owner,
        )
        await self._write()
        if unlist is not None:
            await self.index_remove(unlist, stream_id)
        return done

    async def get_stream(self, stream_id: str) -> StreamMeta | None:
        return await self._memory.get_stream(stream_id)

    async def update_stream(
        self, stream_id: str, ttl_s: float | None = None, *, returning: bool = False, **changes: Any
    ) -> StreamMeta | None:
        unsaved = stream_id in self._changed
        meta = await self._memory.update_stream(stream_id, ttl_s, returning=returning, **changes)
        if ttl_s is None and changes.keys() <= PASSING:
            self._passing(stream_id, unsaved)
            return meta
        if meta is not None:
            meta = meta.copy()  # (as it is after this change: others may change it while it is written)
        await self._write()
        return meta

    async def update_stream_if(
        self,
        stream_id: str,
        expect: Mapping[str, Any],
        ttl_s: float | None = None,
        **changes: Any,
    ) -> tuple[bool, StreamMeta | None]:
        applied, meta = await self._memory.update_stream_if(stream_id, expect, ttl_s, **changes)
        if meta is not None:
            meta = meta.copy()
        await self._write()
        return applied, meta

    async def detached(self, stream_id: str, gen: int, *, last_contact: float, delivered_seq: int) -> None:
        unsaved = stream_id in self._changed
        await self._memory.detached(stream_id, gen, last_contact=last_contact, delivered_seq=delivered_seq)
        self._passing(stream_id, unsaved)

    async def attach(self, stream_id: str, now: float) -> StreamMeta | None:
        unsaved = stream_id in self._changed
        meta = await self._memory.attach(stream_id, now)
        self._passing(stream_id, unsaved)
        return meta

    def _passing(self, stream_id: str, unsaved: bool) -> None:
        """The stream's connection changed (`PASSING`), nothing else: not written for itself, but
        with the stream's next change (no connection outlives the process: the file says none)."""
        if not unsaved:
            self._changed.discard(stream_id)

    async def delete_stream(self, stream_id: str) -> None:
        await self._memory.delete_stream(stream_id)
        self._changed.add(stream_id)
        await self._write()

    async def append(
        self,
        stream_id: str,
        events: Sequence[tuple[int, bytes]],
        *,
        max_events: int,
        max_bytes: int,
        owner: str | None = None,
    ) -> None:
        await self._memory.append(stream_id, events, max_events=max_events, max_bytes=max_bytes, owner=owner)
        await self._write()

    async def read(self, stream_id: str, after_seq: int, limit: int = 1000) -> list[tuple[int, bytes]]:
        return await self._memory.read(stream_id, after_seq, limit)

    async def read_with_meta(
        self, stream_id: str, after_seq: int, limit: int = 1000
    ) -> tuple[list[tuple[int, bytes]], StreamMeta | None]:
        return await self._memory.read_with_meta(stream_id, after_seq, limit)

    async def read_key_and_stream(self, key: str, stream_id: str) -> KeyAndStream:
        return await self._memory.read_key_and_stream(key, stream_id)

    async def wait(
        self, stream_id: str, after_seq: int, within_s: float, *, version: int | None = None
    ) -> None:
        await self._memory.wait(stream_id, after_seq, within_s, version=version)

    async def usage(self) -> StoreUsage:
        return await self._memory.usage()

    # -- sessions and keys -------------------------------------------------------------
    async def put_session(self, info: SessionInfo, ttl_s: float) -> None:
        await self._memory.put_session(info, ttl_s)
        await self._write(
            (_UPSERT_SESSION, (info.session_id, sqlite_file.encode_session(info), time.time() + ttl_s), False)
        )

    async def get_session(self, session_id: str) -> SessionInfo | None:
        return await self._memory.get_session(session_id)

    async def delete_session(self, session_id: str) -> list[str]:
        streams = await self._memory.delete_session(session_id)
        await self._write((_DELETE_SESSION, (session_id,), False))
        return streams

    async def set_key(self, key: str, value: str, ttl_s: float) -> None:
        await self._memory.set_key(key, value, ttl_s)
        await self._write((_UPSERT_KEY, (key, value, time.time() + ttl_s), False))

    async def get_key(self, key: str) -> str | None:
        return await self._memory.get_key(key)

    async def delete_key(self, key: str, value: str | None = None) -> bool:
        deleted = await self._memory.delete_key(key, value)
        if deleted:
            await self._write((_DELETE_KEY, (key,), False))
        return deleted

    async def add_key(self, key: str, value: str, ttl_s: float) -> str | None:
        found = await self._memory.add_key(key, value, ttl_s)
        if found is None:
            await self._write((_UPSERT_KEY, (key, value, time.time() + ttl_s), False))
        return found

    async def replace_key(self, key: str, expected: str | None, value: str, ttl_s: float) -> bool:
        replaced = await self._memory.replace_key(key, expected, value, ttl_s)
        if replaced:
            await self._write((_UPSERT_KEY, (key, value, time.time() + ttl_s), False))
        return replaced

    # -- one process: messages between its tasks ---------------------------------------
    async def publish(self, channel: str, message: bytes) -> int:
        return await self._memory.publish(channel, message)

    def subscribe(self, channel: str) -> AbstractAsyncContextManager[AsyncIterator[bytes]]:
        return self._memory.subscribe(channel)

    # -- indexes -----------------------------------------------------------------------
    async def index_add(self, index: str, member: str, expires_at: float, *, cap: int) -> bool:
        added = await self._memory.index_add(index, member, expires_at, cap=cap)
        if added:
            if expires_at <= time.time():
                await self._write((_DELETE_MEMBER, (index, member), False))
            else:
                await self._write((_UPSERT_MEMBER, (index, member, expires_at), False))
        return added

    async def index_remove(self, index: str, member: str) -> None:
        await self._memory.index_remove(index, member)
        await self._write((_DELETE_MEMBER, (index, member), False))

    async def index_page(
        self, index: str, *, after: tuple[float, str] | None = None, limit: int = 100
    ) -> list[tuple[str, float]]:
        return await self._memory.index_page(index, after=after, limit=limit)

    async def index_count(self, index: str) -> int:
        return await self._memory.index_count(index)

    # -- closing -----------------------------------------------------------------------
    async def flush(self) -> None:
        """Hand what is pending to the writer and wait until it, and all queued before it, is
        committed (raises `SQLiteStoreError` if that write fails)."""
        if self._closed:
            return
        rows = self._take()
        try:
            await self._writer.write(rows)  # (the writer's queue is in order: all before it too)
        except SQLiteStoreError as exc:
            self._written(rows, exc)
            raise
        self._written(rows, None)

    async def aclose(self) -> None:
        """Write what is pending, stop the writer, let the file and its lock go."""
        if self._closed:
            return
        rows = self._take()
        if rows:
            with contextlib.suppress(SQLiteStoreError):
                await self._writer.write(rows)
        await anyio.to_thread.run_sync(self.close)

    def close(self) -> None:
        """`aclose` from outside the event loop (at exit: what the last round of the loop changed
        is handed to the writer here, which commits it before it stops)."""
        with self._closing:
            if self._closed:
                return
            self._closed = True
            rows = self._take()
            if rows:
                self._writer.submit(rows, lambda error: None)
            self._writer.close()
            sqlite_file.unlock(self._lock_fd)
