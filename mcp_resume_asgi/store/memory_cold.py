"""The finished streams `MemoryStore` keeps cold, and the order they expire in, out of the
garbage collector's sight.

A busy server keeps every finished stream for its retention window: tens of thousands. Each
is one `bytes` (`memory_stream.freeze`), kept by stream id in a dict of bytes, which the
collector does not track. When they expire is kept the same way: streams go cold in the order
they finished, and with one retention time for all they expire in that order too, so their ids
wait in a dict by the place they went cold (ints to strings: not tracked either), read from
the front. One whose expiry comes before that of a stream that went cold before it (another
retention time) waits in a small heap instead. A heap of `(when, id)` tuples for all of them,
and a dict of tuples, are containers the collector walks in every full collection: a reference
per stream each time, as many as the application's own heap holds.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from mcp_resume_asgi.store.memory_stream import ColdStream, StreamEntry, cold_head, freeze, thaw

__all__ = ["ColdStreams"]


class ColdStreams:
    """Cold streams by id, in the order they went cold, and when each expires."""

    __slots__ = ("_by_id", "_early", "_head", "_latest", "_next", "_order", "next_due")

    def __init__(self) -> None:
        self._by_id: dict[str, ColdStream] = {}
        self._order: dict[int, str] = {}
        """Ids by their place in the order streams went cold (from `_head` to `_next`); a place
        whose stream left, or went cold again since (its bytes name another place), is passed over."""
        self._head = 0
        self._next = 0
        self._latest = float("-inf")
        """The latest expiry among those waiting in `_order`."""
        self._early: list[tuple[float, str]] = []
        """Streams that expire before one that went cold before them: a heap, nearly always empty."""
        self.next_due = float("inf")
        """No cold stream expires before this (one may expire later: `due` tells)."""

    def __len__(self) -> int:
        return len(self._by_id)

    def __contains__(self, stream_id: str) -> bool:
        return stream_id in self._by_id

    def __iter__(self) -> Iterator[str]:
        """Their ids, those that went cold first first."""
        return iter(self._by_id)

    def expires_at(self, stream_id: str) -> float | None:
        """When the cold stream expires (None: it is not cold)."""
        cold = self._by_id.get(stream_id)
        return None if cold is None else cold_head(cold)[0]

    def keep(self, stream_id: str, entry: StreamEntry) -> bool:
        """Keep `entry` cold, if it may be (`freeze`)."""
        order = self._next
        cold = freeze(entry, order)
        if cold is None:
            return False
        self._next = order + 1
        self._by_id[stream_id] = cold
        expires_at = entry.expires_at
        if expires_at >= self._latest:
            self._order[order] = stream_id
            self._latest = expires_at
        else:
            heapq.heappush(self._early, (expires_at, stream_id))
        if expires_at < self.next_due:
            self.next_due = expires_at
        return True

    def take(self, stream_id: str, entry_type: type[StreamEntry]) -> StreamEntry | None:
        """The stream's entry, made again from its cold form, which is let go (None: not cold)."""
        cold = self._by_id.pop(stream_id, None)
        return None if cold is None else thaw(cold, entry_type)

    def copy(self, stream_id: str, entry_type: type[StreamEntry]) -> StreamEntry | None:
        """The stream's entry made from its cold form, which stays (None: not cold)."""
        cold = self._by_id.get(stream_id)
        return None if cold is None else thaw(cold, entry_type)

    def replace(self, stream_id: str, entry: StreamEntry) -> None:
        """Keep the cold stream as `entry` now is (its events trimmed), in its place."""
        cold = self._by_id[stream_id]
        self._by_id[stream_id] = freeze(entry, cold_head(cold)[1]) or cold

    def forget(self, stream_id: str) -> ColdStream | None:
        """Let go of the cold stream; what it was (None: it was not cold)."""
        return self._by_id.pop(stream_id, None)

    def due(self, now: float) -> list[str]:
        """The cold streams expired by `now` (still kept: the caller drops them; one that went
        cold twice may be named twice)."""
        if now < self.next_due:
            return []
        due = []
        by_id, order = self._by_id, self._order
        head, stop = self._head, self._next
        next_due = float("inf")
        while head < stop:
            stream_id = order.get(head)
            if stream_id is not None:
                cold = by_id.get(stream_id)
                if cold is not None:
                    expires_at, place, _ = cold_head(cold)
                    if place == head:
                        if expires_at > now:
                            next_due = expires_at
                            break
                        due.append(stream_id)
                del order[head]
            head += 1
        self._head = head
        if head == stop:
            self._latest = float("-inf")
        early = self._early
        while early and early[0][0] <= now:
            expires_at, stream_id = heapq.heappop(early)
            cold = by_id.get(stream_id)
            if cold is not None and cold_head(cold)[0] == expires_at:
                due.append(stream_id)
        if early and early[0][0] < next_due:
            next_due = early[0][0]
        self.next_due = next_due
        return due
