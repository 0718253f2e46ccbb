"""The default store: one process, bounded, with expiry.

Bounded three ways, because a resumable stream is memory a disconnected client
makes us hold: per stream (events and bytes, set by the stream's policy), across
all streams (`max_bytes`, the oldest events of the least recently active streams
go first), and in the number of streams (`max_streams`; finished streams are
dropped first, and when every stream is still running `StoreFullError` tells the
engine to refuse new work instead of growing).
"""

from __future__ import annotations

import contextlib
import heapq
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from cachetools import TLRUCache

from mcp_resume_asgi.store.base import (
    FencedError,
    GapError,
    Listing,
    SessionInfo,
    Store,
    StoreFullError,
    StoreUsage,
    StreamMeta,
    StreamState,
)
from mcp_resume_asgi.store.bounds import check_bounds
from mcp_resume_asgi.store.memory_cold import ColdStreams
from mcp_resume_asgi.store.memory_index import MemoryIndexes
from mcp_resume_asgi.store.memory_stream import NO_INPUTS, cold_head, cold_session_id
from mcp_resume_asgi.store.memory_stream import StreamEntry as _Entry

__all__ = ["MemoryStore"]

#: Messages a slow subscriber may have queued before newer ones are dropped for it.
SUBSCRIBER_BUFFER = 1024
#: How long a finished stream stays an entry before it is kept cold (`memory_stream.freeze`):
#: what follows an answer (its delivery noted, a resume soon after) finds it as it is.
COLD_AFTER_S = 1.0


def _ttu(_key: str, value: tuple[Any, float], _now: float) -> float:
    return value[1]


def _fence(entry: _Entry, stream_id: str, owner: str | None) -> None:
    """`Store.append`'s fence: raise unless the record is `owner`'s (None: anyone's)."""
    if owner is not None and entry.meta.owner != owner:
        raise FencedError(stream_id, entry.meta.owner)


class MemoryStore(MemoryIndexes, Store):
    """`Store` in this process's memory (see the module docstring for its bounds).

    `max_index_members` bounds the members of all indexes together (`memory_index.py`).
    """

    entry_type: type[_Entry] = _Entry
    """What keeps each stream (`memory_stream.StreamEntry`); a store that keeps a copy of every
    change elsewhere (`SQLiteStore`) gives one whose `wake` also notes the stream changed."""

    def __init__(
        self,
        *,
        max_bytes: int = 256 * 1024 * 1024,
        max_streams: int = 100_000,
        max_sessions: int = 100_000,
        max_keys: int = 100_000,
        max_index_members: int = 1_000_000,
    ) -> None:
        check_bounds(
            "MemoryStore",
            max_bytes=max_bytes,
            max_streams=max_streams,
            max_sessions=max_sessions,
            max_keys=max_keys,
            max_index_members=max_index_members,
        )
        self._init_indexes(max_index_members)
        self.max_bytes = max_bytes
        self.max_streams = max_streams
        # Least recently active first: a plain dict keeps its order (an OrderedDict costs ~48 B
        # more per stream, and the store holds every stream in its resume window).
        self._streams: dict[str, _Entry] = {}
        self._cold = ColdStreams()
        """Finished streams kept cold, in the order they went cold (all less recently active than
        the entries of `_streams`, save one read since: see `_warm`), with when each expires."""
        self._finished: deque[tuple[float, str]] = deque()
        """Streams that finished, each with when it may go cold, in that order."""
        self._expiry: list[tuple[float, str]] = []
        """When the entries of `_streams` expire: a heap, rid of its stale rows now and then (a cold
        stream's expiry is its own: `ColdStreams.due`)."""
        self._total_bytes = 0
        self._sessions: TLRUCache[str, tuple[SessionInfo, float]] = TLRUCache(
            maxsize=max_sessions, ttu=_ttu, timer=time.monotonic
        )
        self._session_streams: dict[str, dict[str, None]] = {}
        """Each session's streams, as dicts of ids: a set is a container the collector always
        tracks; a dict of strings, once a full collection has seen it, is not."""
        self._keys: TLRUCache[str, tuple[str, float]] = TLRUCache(
            maxsize=max_keys, ttu=_ttu, timer=time.monotonic
        )
        self._channels: dict[str, set[MemoryObjectSendStream[bytes]]] = {}

    # -- introspection (tests, metrics) --------------------------------------------------
    @property
    def total_bytes(self) -> int:
        return self._total_bytes

    @property
    def stream_count(self) -> int:
        return len(self._streams) + len(self._cold)

    async def usage(self) -> StoreUsage:
        self._sweep(time.monotonic())
        return StoreUsage(streams=self.stream_count, bytes=self._total_bytes)

    # -- expiry ------------------------------------------------------------------------
    def _sweep(self, now: float) -> None:
        while self._expiry and self._expiry[0][0] <= now:
            _, stream_id = heapq.heappop(self._expiry)
            if self._expires_at(stream_id) <= now:
                self._drop(stream_id)
        for stream_id in self._cold.due(now):
            self._drop(stream_id)

    def _expires_at(self, stream_id: str) -> float:
        """When the stream expires (infinity: the store does not hold it)."""
        entry = self._streams.get(stream_id)
        if entry is not None:
            return entry.expires_at
        expires_at = self._cold.expires_at(stream_id)
        return float("inf") if expires_at is None else expires_at

    def _expire_at(self, stream_id: str, entry: _Entry) -> None:
        """Note when the entry expires (`entry.expires_at`) in the heap."""
        expiry = self._expiry
        heapq.heappush(expiry, (entry.expires_at, stream_id))
        if len(expiry) > 4 * len(self._streams) + 1024:  # drop stale heap rows (and cold streams')
            self._expiry = [(e.expires_at, sid) for sid, e in self._streams.items()]
            heapq.heapify(self._expiry)

    def _set_expiry(self, stream_id: str, entry: _Entry, ttl_s: float) -> None:
        entry.expires_at = time.monotonic() + ttl_s
        self._expire_at(stream_id, entry)

    def _drop(self, stream_id: str) -> None:
        entry = self._streams.pop(stream_id, None)
        if entry is not None:
            self._total_bytes -= len(entry.buf)
            self._unlist(stream_id, entry.meta.session_id)
            entry.wake()
            return
        cold = self._cold.forget(stream_id)
        if cold is not None:  # (no waiter to wake: it went cold without one)
            self._total_bytes -= cold_head(cold)[2]
            self._unlist(stream_id, cold_session_id(cold))
            self.entry_type.forgotten(stream_id)

    def _unlist(self, stream_id: str, session_id: str | None) -> None:
        """Take a dropped stream out of its session's."""
        if session_id is not None and session_id in self._session_streams:
            streams = self._session_streams[session_id]
            streams.pop(stream_id, None)
            if not streams:
                del self._session_streams[session_id]

    # -- finished streams kept cold ----------------------------------------------------
    def _cool(self, now: float) -> None:
        """Keep cold the streams that finished `COLD_AFTER_S` ago and are quiet (one pass over
        those due, run when a stream is created: no timer of its own)."""
        finished, streams, cold = self._finished, self._streams, self._cold
        while finished and finished[0][0] <= now:
            stream_id = finished.popleft()[1]
            entry = streams.get(stream_id)
            if entry is not None and cold.keep(stream_id, entry):
                del streams[stream_id]

    def _warm(self, stream_id: str) -> _Entry | None:
        """The stream's entry, made again from its cold form if it has one (then it counts as
        just active, and goes cold again `COLD_AFTER_S` later if it stays quiet)."""
        entry = self._streams.get(stream_id)
        if entry is not None:
            return entry
        entry = self._cold.take(stream_id, self.entry_type)
        if entry is None:
            return None
        self._streams[stream_id] = entry
        self._expire_at(stream_id, entry)  # (the heap may have let its row go)
        self._finished.append((time.monotonic() + COLD_AFTER_S, stream_id))
        return entry

    # -- streams -----------------------------------------------------------------------
    async def create_stream(self, meta: StreamMeta, ttl_s: float) -> None:
        self._create(meta.copy(), ttl_s)

    def _create(self, meta: StreamMeta, ttl_s: float) -> _Entry:
        """Keep `meta` (the store's own from now on) as a new stream's record."""
        now = time.monotonic()
        if (self._expiry and self._expiry[0][0] <= now) or self._cold.next_due <= now:
            self._sweep(now)  # (`_sweep`'s tests first: once per stream)
        if self._finished and self._finished[0][0] <= now:  # (`_cool`'s, likewise)
            self._cool(now)
        stream_id = meta.stream_id
        if stream_id in self._streams or stream_id in self._cold:
            self._drop(stream_id)  # (a stream created again: its waiters see the old one gone)
        if self.stream_count >= self.max_streams:
            if self._cold:  # (finished, and less recently active than any entry)
                self._drop(next(iter(self._cold)))
            else:
                for other, kept in list(self._streams.items()):
                    if kept.meta.state is not StreamState.RUNNING:
                        self._drop(other)
                        break
                else:
                    raise StoreFullError(f"{self.max_streams} streams are running")
        meta.version = 0
        if not meta.pending_inputs:
            meta.pending_inputs = NO_INPUTS
        if not meta.issued_inputs:
            meta.issued_inputs = NO_INPUTS
        entry = self.entry_type(meta, now + ttl_s)
        self._streams[stream_id] = entry
        self._expire_at(stream_id, entry)
        if meta.session_id is not None:
            streams = self._session_streams.get(meta.session_id)
            if streams is None:  # (not `setdefault`: no dict made for a session that has one)
                streams = self._session_streams[meta.session_id] = {}
            streams[stream_id] = None
        return entry

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
        if final_seq is not None and retain_s is not None:
            # Created completed (a request answered at once): kept for `retain_s` from the start,
            # one expiry entry instead of a second one `_complete` would add at once.
            entry = self._create(meta, retain_s)
            if events:
                self._add(entry, meta.stream_id, events, max_events, max_bytes)
            self._complete(entry, meta.stream_id, final_seq, None)
        else:
            entry = self._create(meta, ttl_s)
            if events:
                self._add(entry, meta.stream_id, events, max_events, max_bytes)
            if final_seq is not None:
                self._complete(entry, meta.stream_id, final_seq, retain_s)
        entry.wake()
        return await self._list_by_call(meta.stream_id, listing, final_seq)

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
        entry = self._entry(stream_id)
        if entry is not None:
            if owner is not None:  # (`_fence`'s test first: a node's own call, once per event)
                _fence(entry, stream_id, owner)
            self._add(entry, stream_id, events, max_events, max_bytes)
            self._complete(entry, stream_id, final_seq, retain_s)
            entry.wake()
        if unlist is not None:
            await self.index_remove(unlist, stream_id)
        return entry is not None

    def _complete(self, entry: _Entry, stream_id: str, final_seq: int, retain_s: float | None) -> None:
        meta = entry.meta
        meta.final_seq = final_seq
        meta.state = StreamState.COMPLETED
        if retain_s is not None:
            self._set_expiry(stream_id, entry, retain_s)
        self._finished.append((time.monotonic() + COLD_AFTER_S, stream_id))

    def _entry(self, stream_id: str) -> _Entry | None:
        entry = self._streams.get(stream_id)
        if entry is None:
            expires_at = self._cold.expires_at(stream_id)
            if expires_at is None:
                return None
            if expires_at <= time.monotonic():
                self._drop(stream_id)
                return None
            return self._warm(stream_id)
        if entry.expires_at <= time.monotonic():
            self._drop(stream_id)
            return None
        return entry

    async def get_stream(self, stream_id: str) -> StreamMeta | None:
        entry = self._entry(stream_id)
        if entry is None:
            return None
        # The record itself, not a copy: this is on every hot path, and callers treat
        # metadata as read-only (changes go through `update_stream`).
        return entry.meta

    async def update_stream(
        self, stream_id: str, ttl_s: float | None = None, *, returning: bool = False, **changes: Any
    ) -> StreamMeta | None:
        entry = self._entry(stream_id)
        if entry is None:
            return None
        self._update(entry, stream_id, ttl_s, changes)
        return entry.meta if returning else None

    def _update(self, entry: _Entry, stream_id: str, ttl_s: float | None, changes: Mapping[str, Any]) -> None:
        meta = entry.meta
        for name, value in changes.items():
            if name == "version":
                raise ValueError("StreamMeta.version is kept by the store")
            setattr(meta, name, (list(value) or NO_INPUTS) if isinstance(value, list) else value)
        if ttl_s is not None:
            self._set_expiry(stream_id, entry, ttl_s)
        entry.wake()

    async def update_stream_if(
        self,
        stream_id: str,
        expect: Mapping[str, Any],
        ttl_s: float | None = None,
        **changes: Any,
    ) -> tuple[bool, StreamMeta | None]:
        # No await between the check and the change: atomic on the event loop.
        entry = self._entry(stream_id)
        if entry is None:
            return False, None
        meta = entry.meta
        for name, value in expect.items():  # (a loop, not `any` of a generator: once per request)
            if getattr(meta, name) != value:
                return False, meta
        self._update(entry, stream_id, ttl_s, changes)
        return True, entry.meta

    def detached(
        self, stream_id: str, gen: int, *, last_contact: float, delivered_seq: int
    ) -> Awaitable[Any]:
        if type(self).update_stream_if is not MemoryStore.update_stream_if:
            # A subclass's own compare-and-set (a test's fault, or count) is what it is asked.
            return super().detached(stream_id, gen, last_contact=last_contact, delivered_seq=delivered_seq)
        return self._detached(stream_id, gen, last_contact, delivered_seq)

    async def _detached(self, stream_id: str, gen: int, last_contact: float, delivered_seq: int) -> None:
        """`update_stream_if`'s work for `detached`, without its two dicts and its loops."""
        entry = self._entry(stream_id)
        if entry is not None and entry.meta.attach_gen == gen:
            meta = entry.meta
            meta.attached = False
            meta.last_contact = last_contact
            meta.delivered_seq = delivered_seq
            entry.wake()

    async def attach(self, stream_id: str, now: float) -> StreamMeta | None:
        entry = self._entry(stream_id)
        if entry is None:
            return None
        entry.meta.attach_gen += 1
        entry.meta.attached = True
        entry.meta.last_contact = now
        entry.wake()
        return entry.meta

    async def delete_stream(self, stream_id: str) -> None:
        self._drop(stream_id)

    async def append(
        self,
        stream_id: str,
        events: Sequence[tuple[int, bytes]],
        *,
        max_events: int,
        max_bytes: int,
        owner: str | None = None,
    ) -> None:
        entry = self._streams.get(stream_id)
        if entry is None:
            entry = self._warm(stream_id)
        if entry is not None and owner is not None:  # (`_fence`'s test first: once per event)
            _fence(entry, stream_id, owner)
        if entry is not None and self._add(entry, stream_id, events, max_events, max_bytes):
            entry.wake()

    def _add(
        self,
        entry: _Entry,
        stream_id: str,
        events: Sequence[tuple[int, bytes]],
        max_events: int,
        max_bytes: int,
    ) -> bool:
        """`append`'s work, without waking waiters; whether any event was added."""
        if not events:
            return False
        meta = entry.meta
        if events[0][0] <= meta.last_seq:
            events = self._not_recorded(entry, events)  # a retried write: what landed is not added again
            if not events:
                return False
        self._total_bytes += entry.extend(events)
        meta.last_seq = events[-1][0]
        if entry.count() > max_events or len(entry.buf) > max_bytes:  # (asked once per append)
            while entry.count() and (entry.count() > max_events or len(entry.buf) > max_bytes):
                seq, size = entry.drop_oldest()
                self._total_bytes -= size
                meta.first_seq = seq + 1
        streams = self._streams
        if next(reversed(streams)) != stream_id:  # (the most recently active already: as it is)
            streams[stream_id] = streams.pop(stream_id)  # now the most recently active
        if self._total_bytes > self.max_bytes:
            self._enforce_budget(stream_id)
        return True

    @staticmethod
    def _not_recorded(entry: _Entry, events: Sequence[tuple[int, bytes]]) -> Sequence[tuple[int, bytes]]:
        """`events` without those the stream holds already (each checked against what is stored
        under its seq; one trimmed since cannot be, and is taken as written)."""
        skip = 0
        for seq, payload in events:
            if seq > entry.meta.last_seq:
                break
            index = entry.after(seq - 1)
            if index < entry.count() and entry.seq_at(index) == seq and not entry.holds(index, payload):
                raise ValueError(f"event {seq} is recorded already, with another payload")
            skip += 1
        return events[skip:]

    def _enforce_budget(self, current: str) -> None:
        cold = self._cold
        for stream_id in list(cold):  # (the least recently active)
            if self._total_bytes <= self.max_bytes:
                return
            entry = cold.copy(stream_id, self.entry_type)
            assert entry is not None
            self._trim_to_budget(entry)
            entry.wake()
            cold.replace(stream_id, entry)
        for stream_id, entry in list(self._streams.items()):
            if self._total_bytes <= self.max_bytes:
                return
            if stream_id == current and len(self._streams) > 1:
                continue
            self._trim_to_budget(entry)
            entry.wake()
        if self._total_bytes > self.max_bytes:  # only the current stream is left to trim
            self._trim_to_budget(self._streams[current])

    def _trim_to_budget(self, entry: _Entry) -> None:
        while entry.count() and self._total_bytes > self.max_bytes:
            seq, size = entry.drop_oldest()
            self._total_bytes -= size
            entry.meta.first_seq = seq + 1

    async def read(self, stream_id: str, after_seq: int, limit: int = 1000) -> list[tuple[int, bytes]]:
        entry = self._entry(stream_id)
        if entry is None:
            return []
        if after_seq + 1 < entry.meta.first_seq:
            raise GapError(stream_id, after_seq, entry.meta.first_seq)
        if not entry.count() or entry.newest_seq() <= after_seq:
            return []
        return entry.events(entry.after(after_seq), limit)

    async def wait(
        self, stream_id: str, after_seq: int, within_s: float, *, version: int | None = None
    ) -> None:
        entry = self._entry(stream_id)
        if entry is None or entry.meta.last_seq > after_seq:
            return
        if version is not None and entry.meta.version != version:
            return
        if entry.notify is None:
            entry.notify = anyio.Event()
        notify = entry.notify
        with anyio.move_on_after(within_s):
            await notify.wait()

    # -- what a durable store keeps in memory (`SQLiteStore`) ----------------------------
    def held(self, stream_id: str) -> _Entry | None:
        """The stream's entry as kept now, expired or not (its events and record, to copy; a
        cold stream's made for the caller, which is not to change it)."""
        entry = self._streams.get(stream_id)
        if entry is None:
            return self._cold.copy(stream_id, self.entry_type)
        return entry

    def restore_stream(self, meta: StreamMeta, ttl_s: float, events: Sequence[tuple[int, bytes]]) -> None:
        """Keep a stream read back from a file: `meta` as it was recorded (the store's own from
        now on; its `first_seq` and `last_seq` kept), with its retained `events`, for `ttl_s` more."""
        last_seq = meta.last_seq
        meta.last_seq = min((seq for seq, _ in events[:1]), default=last_seq + 1) - 1
        entry = self._create(meta, ttl_s)
        if events:
            self._add(entry, meta.stream_id, events, len(events), self.max_bytes)
        meta.last_seq = max(meta.last_seq, last_seq)
        if meta.state is not StreamState.RUNNING:
            self._finished.append((time.monotonic() + COLD_AFTER_S, meta.stream_id))

    def restore_session(self, info: SessionInfo, ttl_s: float) -> None:
        """Keep a session read back from a file, for `ttl_s` more."""
        self._sessions[info.session_id] = (info, time.monotonic() + ttl_s)

    def restore_key(self, key: str, value: str, ttl_s: float) -> None:
        """Keep a key read back from a file, for `ttl_s` more."""
        self._keys[key] = (value, time.monotonic() + ttl_s)

    # -- sessions and keys -------------------------------------------------------------
    async def put_session(self, info: SessionInfo, ttl_s: float) -> None:
        self._sessions[info.session_id] = (info, time.monotonic() + ttl_s)

    async def get_session(self, session_id: str) -> SessionInfo | None:
        item = self._sessions.get(session_id)
        return None if item is None else item[0]

    async def delete_session(self, session_id: str) -> list[str]:
        self._sessions.pop(session_id, None)
        return sorted(self._session_streams.pop(session_id, ()))

    async def set_key(self, key: str, value: str, ttl_s: float) -> None:
        self._keys[key] = (value, time.monotonic() + ttl_s)

    async def get_key(self, key: str) -> str | None:
        item = self._keys.get(key)
        return None if item is None else item[0]

    async def delete_key(self, key: str, value: str | None = None) -> bool:
        if value is not None:
            item = self._keys.get(key)
            if item is None or item[0] != value:
                return False
        return self._keys.pop(key, None) is not None

    async def add_key(self, key: str, value: str, ttl_s: float) -> str | None:
        item = self._keys.get(key)
        if item is not None:
            return item[0]
        self._keys[key] = (value, time.monotonic() + ttl_s)
        return None

    async def replace_key(self, key: str, expected: str | None, value: str, ttl_s: float) -> bool:
        # No await between the check and the write: atomic on the event loop.
        item = self._keys.get(key)
        if (None if item is None else item[0]) != expected:
            return False
        self._keys[key] = (value, time.monotonic() + ttl_s)
        return True

    # -- between nodes (one process: between tasks) ---------------------------------------
    async def publish(self, channel: str, message: bytes) -> int:
        delivered = 0
        for send in list(self._channels.get(channel, ())):
            try:
                send.send_nowait(message)
            except anyio.WouldBlock:
                continue  # a subscriber this far behind loses messages, as a Redis one would
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                continue
            delivered += 1
        return delivered

    @contextlib.asynccontextmanager
    async def subscribe(self, channel: str) -> AsyncIterator[AsyncIterator[bytes]]:
        send, receive = anyio.create_memory_object_stream[bytes](SUBSCRIBER_BUFFER)
        subscribers = self._channels.setdefault(channel, set())
        subscribers.add(send)
        try:
            with receive:
                yield receive
        finally:
            subscribers.discard(send)
            if not subscribers and self._channels.get(channel) is subscribers:
                del self._channels[channel]
            send.close()
