"""`MemoryStore`'s bounded, self-expiring indexes (`Store.index_add` and the rest).

An index is a dict member -> expires_at (unix time). Expired members are dropped
lazily, when their index is next used (`earliest` says whether any can have
expired, so a use that finds none costs nothing), and an index whose members all
expired is dropped by a sweep keyed on its latest expiry, so an index nobody
touches again does not outlive its members: the memory twin of the Redis index
key whose TTL follows its latest member.

Every operation runs without an `await` between its check and its change, so on
one event loop it is atomic: concurrent adds never take an index past its cap.
The total number of members over all indexes is bounded too (`max_members`):
an add that would pass it is refused like one over its index's cap.
"""

from __future__ import annotations

import bisect
import heapq
import math
import time

from mcp_resume_asgi.store.index_bounds import check_index_args, page_limit

__all__ = ["MemoryIndexes"]


class _Index:
    __slots__ = ("earliest", "latest", "members")

    def __init__(self) -> None:
        self.members: dict[str, float] = {}
        self.earliest = math.inf
        """No member expires before this (it may be lower than the true minimum)."""
        self.latest = -math.inf
        """When the last member expires: the index is gone then, if not before."""


class MemoryIndexes:
    """The index operations of `MemoryStore` (a mixin: it calls `_init_indexes`)."""

    _indexes: dict[str, _Index]
    _index_expiry: list[tuple[float, str]]
    _index_members: int
    _index_room_at: float
    max_index_members: int

    def _init_indexes(self, max_members: int) -> None:
        if max_members <= 0:
            raise ValueError("MemoryStore bounds must be positive")
        self._indexes = {}
        self._index_expiry = []  # heap of (latest expiry, index name); stale rows are skipped
        self._index_members = 0
        self._index_room_at = 0.0  # at the global bound, no member expires before this
        self.max_index_members = max_members

    # -- expiry ------------------------------------------------------------------------
    def _sweep_indexes(self, now: float) -> None:
        heap = self._index_expiry
        while heap and heap[0][0] <= now:
            _, name = heapq.heappop(heap)
            index = self._indexes.get(name)
            if index is not None and index.latest <= now:
                self._drop_index(name, index)

    def _drop_index(self, name: str, index: _Index) -> None:
        self._index_members -= len(index.members)
        del self._indexes[name]

    def _live_index(self, name: str, now: float) -> _Index | None:
        """The index with its expired members dropped (None: it holds none now)."""
        index = self._indexes.get(name)
        if index is None:
            return None
        if index.earliest <= now:
            expired = [member for member, at in index.members.items() if at <= now]
            for member in expired:
                del index.members[member]
            self._index_members -= len(expired)
            if not index.members:
                self._drop_index(name, index)
                return None
            index.earliest = min(index.members.values())
        return index

    def _note_latest(self, name: str, index: _Index) -> None:
        """Recompute when the index's last member expires; schedule its sweep if later."""
        latest = max(index.members.values())
        if latest > index.latest:
            heapq.heappush(self._index_expiry, (latest, name))
            if len(self._index_expiry) > 2 * len(self._indexes) + 1024:  # drop stale heap rows
                self._index_expiry = [(i.latest, n) for n, i in self._indexes.items()]
                heapq.heapify(self._index_expiry)
        index.latest = latest

    def _make_room(self, now: float) -> bool:
        """At the global bound: drop every expired member everywhere; True if that made room.

        A scan that finds none notes when the first member expires, and until then the
        bound refuses without scanning again (a flood of adds costs no scan each)."""
        if now < self._index_room_at:
            return False
        for name in list(self._indexes):
            self._live_index(name, now)
        if self._index_members < self.max_index_members:
            return True
        self._index_room_at = min((index.earliest for index in self._indexes.values()), default=0.0)
        return False

    def restore_member(self, index: str, member: str, expires_at: float) -> None:
        """Keep an index member read back from a file (`SQLiteStore`), within the global bound."""
        found = self._indexes.get(index)
        if found is None:
            if self._index_members >= self.max_index_members:
                return
            found = self._indexes[index] = _Index()
        if member not in found.members:
            if self._index_members >= self.max_index_members:
                return
            self._index_members += 1
        found.members[member] = expires_at
        found.earliest = min(found.earliest, expires_at)
        if expires_at > found.latest:
            self._note_latest(index, found)

    # -- operations --------------------------------------------------------------------
    async def index_add(self, index: str, member: str, expires_at: float, *, cap: int) -> bool:
        check_index_args(index, member, expires_at=expires_at, cap=cap)
        now = time.time()
        self._sweep_indexes(now)
        found = self._live_index(index, now)
        if expires_at <= now:  # expired already: it is not in the index, whatever it was
            if found is not None and found.members.pop(member, None) is not None:
                self._index_members -= 1
                if not found.members:
                    self._drop_index(index, found)
            return True
        if found is None or member not in found.members:
            if found is not None and len(found.members) >= cap:
                return False
            if self._index_members >= self.max_index_members and not self._make_room(now):
                return False
            if found is None:
                found = self._indexes[index] = _Index()
            self._index_members += 1
        previous = found.members.get(member)
        found.members[member] = expires_at
        found.earliest = min(found.earliest, expires_at)
        if expires_at > found.latest or (previous is not None and previous >= found.latest):
            self._note_latest(index, found)
        return True

    async def index_remove(self, index: str, member: str) -> None:
        check_index_args(index, member)
        found = self._indexes.get(index)
        if found is None:
            return
        at = found.members.pop(member, None)
        if at is None:
            return
        self._index_members -= 1
        if not found.members:
            self._drop_index(index, found)
        elif at >= found.latest:
            found.latest = max(found.members.values())

    async def index_page(
        self, index: str, *, after: tuple[float, str] | None = None, limit: int = 100
    ) -> list[tuple[str, float]]:
        check_index_args(index, after=after)
        limit = page_limit(limit)
        found = self._live_index(index, time.time())
        if found is None:
            return []
        ordered = sorted((at, member) for member, at in found.members.items())
        start = 0 if after is None else bisect.bisect_right(ordered, (float(after[0]), after[1]))
        return [(member, at) for at, member in ordered[start : start + limit]]

    async def index_count(self, index: str) -> int:
        check_index_args(index)
        found = self._live_index(index, time.time())
        return 0 if found is None else len(found.members)
