"""One stream as `MemoryStore` keeps it: its record and its events, with no object per event.

A store holds every stream still in its resume window, and the garbage collector walks
whatever it holds, again and again. A deque of `(seq, payload)` tuples is a tracked tuple
per event; here a stream's retained payloads lie back to back in one `bytearray`, and their
seqs and end offsets, packed, in another (`bytearray` is not tracked by the collector; an
`array` is), so a stream is the same few objects however many events it keeps: its entry,
its `StreamMeta` and the meta's two lists.

Events leave from the front: a `bytearray` drops its head in place (CPython moves its
start, no copy), so eviction is amortised O(1) per event.

A finished stream that nobody waits on is kept cold (`freeze`): its record and events packed
into one `bytes` (a fixed head the store reads without unpacking the rest: when it expires, its
place in the order streams went cold, its payload bytes; then the rest, `marshal`led). Bytes
are no container: a dict of them is not even tracked by the collector. A busy server keeps tens
of thousands of finished streams for their retention window; kept as objects, every full
collection would walk two objects and some thirty references each, several times the
application's own heap, and kept as tuples, still a reference each from a dict it walks. `thaw`
makes the entry again when one is used.
"""

from __future__ import annotations

import marshal
import struct
from bisect import bisect_right
from collections.abc import Sequence
from typing import Any

import anyio

from mcp_resume_asgi.store.base import StreamMeta, StreamState, record_fields, record_from_fields

__all__ = ["NO_INPUTS", "ColdStream", "StreamEntry", "cold_head", "cold_session_id", "freeze", "thaw"]

#: What a record's `pending_inputs` and `issued_inputs` hold while they are empty (most records,
#: all their lives): one list shared by all, never changed in place (`MemoryStore._update`
#: replaces a list).
NO_INPUTS: list[Any] = []

#: One event in `StreamEntry.index`: its seq and the end offset of its payload (native ints,
#: as `memoryview.cast("q")` reads them).
_RECORD = struct.Struct("qq")
_SIZE = _RECORD.size


class StreamEntry:
    """A stream's record, its retained events and its waiters (see the module docstring).

    Retained event `i` (0: the oldest) is record `i` of `index`, `(seq, end)`; its payload is
    `buf[start - origin : end - origin]`, `start` being the previous record's `end` (`origin`
    for the oldest). Offsets count every byte appended to the stream, so dropping the oldest
    event moves `origin` and touches nothing else."""

    __slots__ = ("buf", "expires_at", "index", "meta", "notify", "origin")

    def __init__(self, meta: StreamMeta, expires_at: float) -> None:
        self.meta = meta
        self.expires_at = expires_at
        self.notify: anyio.Event | None = None
        self.buf = bytearray()
        self.index = bytearray()
        self.origin = 0

    @property
    def nbytes(self) -> int:
        """Payload bytes retained (not kept apart: the payloads lie back to back in `buf`)."""
        return len(self.buf)

    @staticmethod
    def forgotten(stream_id: str) -> None:
        """A cold stream (`freeze`), which has no entry to wake, left the store: nothing to do
        here; an entry type that notes every change elsewhere notes this one too."""

    def wake(self) -> None:
        """The stream changed: bump its version, wake whoever waits on it."""
        self.meta.version += 1
        if self.notify is not None:
            self.notify.set()
            self.notify = None

    # ------------------------------------------------------------------ events
    def count(self) -> int:
        """How many events are retained."""
        return len(self.index) // _SIZE

    def add(self, seq: int, payload: bytes) -> None:
        """Keep an event after the others (its seq is larger than theirs)."""
        self.extend(((seq, payload),))

    def extend(self, events: Sequence[tuple[int, bytes]]) -> int:
        """Keep events after the others (seqs increasing, larger than theirs): a batch at once.
        Returns the payload bytes added."""
        buf = self.buf
        start = end = self.origin + len(buf)  # (the newest event's end: the payloads lie back to back)
        if len(events) == 1:  # (the usual: the event the app just sent)
            seq, payload = events[0]
            self.index += _RECORD.pack(seq, end + len(payload))
            buf += payload
            return len(payload)
        index = self.index
        pack = _RECORD.pack
        for seq, payload in events:
            end += len(payload)
            index += pack(seq, end)
            buf += payload
        return end - start

    def drop_oldest(self) -> tuple[int, int]:
        """Forget the oldest retained event; its `(seq, size)`."""
        seq, end = _RECORD.unpack_from(self.index, 0)
        size = end - self.origin
        del self.index[:_SIZE]
        del self.buf[:size]
        self.origin = end
        return seq, size

    def seq_at(self, i: int) -> int:
        seq: int = _RECORD.unpack_from(self.index, i * _SIZE)[0]
        return seq

    def newest_seq(self) -> int:
        return self.seq_at(self.count() - 1)

    def after(self, seq: int) -> int:
        """The index of the oldest retained event whose seq is larger than `seq`."""
        n = self.count()
        if n == 0:
            return 0
        oldest = self.seq_at(0)
        if oldest > seq:
            return 0
        guess = seq + 1 - oldest  # seqs are dense, unless the recorder skipped some
        if guess < n and self.seq_at(guess) == seq + 1 and self.seq_at(guess - 1) == seq:
            return guess
        with memoryview(self.index).cast("q") as records, records[0::2] as seqs:
            return bisect_right(seqs, seq)

    def _span(self, i: int) -> tuple[int, int]:
        """Where event `i`'s payload lies in `buf`."""
        origin = self.origin
        start = _RECORD.unpack_from(self.index, (i - 1) * _SIZE)[1] if i else origin
        return start - origin, _RECORD.unpack_from(self.index, i * _SIZE)[1] - origin

    def holds(self, i: int, payload: bytes) -> bool:
        """Whether event `i` carries `payload` (compared in place, no copy)."""
        start, end = self._span(i)
        if end - start != len(payload):
            return False
        with memoryview(self.buf) as view:
            return view[start:end] == payload

    def events(self, first: int, limit: int) -> list[tuple[int, bytes]]:
        """Up to `limit` retained events from index `first` on, as `(seq, payload)`."""
        stop = min(self.count(), first + limit)
        out: list[tuple[int, bytes]] = []
        if first >= stop:
            return out
        origin = self.origin
        offset = self._span(first)[0]
        with memoryview(self.index) as records, memoryview(self.buf) as payloads:
            for seq, end in _RECORD.iter_unpack(records[first * _SIZE : stop * _SIZE]):
                end -= origin
                out.append((seq, payloads[offset:end].tobytes()))
                offset = end
        return out


ColdStream = bytes
"""A finished stream kept cold: `freeze`'s bytes (see the module docstring)."""

#: A `ColdStream`'s head: when it expires, its place in the order streams went cold (`order`),
#: and its retained payload bytes.
_COLD_HEAD = struct.Struct("<dqq")
#: Where `freeze`'s marshalled record (`buf, index, origin, version`, then the record's fields:
#: `record_fields`) keeps the session id.
_RECORD_AT, _SESSION_ID = 4, 2


def cold_head(cold: ColdStream) -> tuple[float, int, int]:
    """A cold stream's `(expires_at, order, payload bytes)`, read without unpacking the rest."""
    head: tuple[float, int, int] = _COLD_HEAD.unpack_from(cold)
    return head


def cold_session_id(cold: ColdStream) -> str | None:
    """The session a cold stream belongs to."""
    session_id: str | None = marshal.loads(memoryview(cold)[_COLD_HEAD.size :])[_RECORD_AT][_SESSION_ID]
    return session_id


def freeze(entry: StreamEntry, order: int) -> ColdStream | None:
    """`entry` as a `ColdStream` (`order`: its place in the order streams went cold), or None
    while it may not be kept cold: its stream runs, a waiter holds its entry, or its record lists
    server requests (rare: kept as it is)."""
    meta = entry.meta
    if (
        meta.state is StreamState.RUNNING
        or entry.notify is not None
        or meta.pending_inputs
        or meta.issued_inputs
    ):
        return None
    fields = (entry.buf, entry.index, entry.origin, meta.version, record_fields(meta))
    return _COLD_HEAD.pack(entry.expires_at, order, len(entry.buf)) + marshal.dumps(fields)


def thaw(cold: ColdStream, entry_type: type[StreamEntry] = StreamEntry) -> StreamEntry:
    """The entry `freeze` made `cold` from, as it was."""
    expires_at = _COLD_HEAD.unpack_from(cold)[0]
    buf, index, origin, version, fields = marshal.loads(memoryview(cold)[_COLD_HEAD.size :])
    meta = record_from_fields(fields)
    meta.pending_inputs = meta.issued_inputs = NO_INPUTS  # (empty, as `freeze` asks: the shared list)
    meta.version = version
    entry = entry_type(meta, expires_at)
    entry.buf = bytearray(buf)
    entry.index = bytearray(index)
    entry.origin = origin
    return entry
