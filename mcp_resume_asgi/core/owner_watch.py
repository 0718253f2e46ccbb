"""When to ask whether the owner of a stream served from the store is still alive: once per stream
and node, whoever is attached.

A stream whose app runs on another node reaches its clients here through the store
(`engine/follower.py`). If that node dies, nothing more is recorded and nobody ends the stream,
unless a node serving one of its clients asks whether the owner's heartbeat is still there and,
finding it gone, runs the request again or ends it. That question is asked at most once per
`check_s` (`node_timeout_s / 2`): asking on every wake-up would cost a store round trip each.

The schedule belongs to the stream, not to the connection serving it: two clients resuming one
stream take it over from each other every retry interval, and a client whose connections are
closed at will comes back as often; with a schedule per connection, none would stay attached
long enough to ask, and the stream would stay open for ever. An `OwnerWatch` is kept per stream
(`OwnerWatches`), shared by every connection that serves it here, so the owner's death is found
within `check_s` of its heartbeat expiring however clients come and go.

Plain state and a clock passed in: no I/O.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["MAX_WATCHED", "OwnerWatch", "OwnerWatches"]

#: The most streams whose schedule a node keeps: past that, the one looked up longest ago is
#: forgotten (a connection serving it keeps its own watch; the next one starts a new schedule).
MAX_WATCHED = 16_384


class OwnerWatch:
    """When to ask next whether one stream's owner is alive, for every connection serving it."""

    __slots__ = ("check_s", "next_check")

    def __init__(self, check_s: float, now: float) -> None:
        self.check_s = check_s
        self.next_check = now + check_s
        """When the question is due (a connection's `next_deadline` wakes it for it)."""

    def due(self, now: float) -> bool:
        """Whether to ask now (then not again, by any connection of the stream, for `check_s`)."""
        if now < self.next_check:
            return False
        self.next_check = now + self.check_s
        return True


class OwnerWatches:
    """The `OwnerWatch` of each stream served from the store on this node (bounded: `MAX_WATCHED`)."""

    __slots__ = ("_watches", "check_s", "max_watched")

    def __init__(self, check_s: float, *, max_watched: int = MAX_WATCHED) -> None:
        if check_s <= 0 or max_watched < 1:
            raise ValueError("check_s and max_watched must be positive")
        self.check_s = check_s
        self.max_watched = max_watched
        self._watches: OrderedDict[str, OwnerWatch] = OrderedDict()
        """By stream id, the one looked up longest ago first."""

    def __len__(self) -> int:
        return len(self._watches)

    def of(self, stream_id: str, now: float) -> OwnerWatch:
        """The watch of `stream_id` for a connection attaching now: the one the connections before
        it used, or a new one (its first question due `check_s` from now)."""
        watches = self._watches
        watch = watches.get(stream_id)
        if watch is not None:
            watches.move_to_end(stream_id)
            return watch
        self._forget_stale(now)
        watch = watches[stream_id] = OwnerWatch(self.check_s, now)
        return watch

    def _forget_stale(self, now: float) -> None:
        """Make room: drop, from the front, the watches no connection asked for a whole interval
        after they were due (nobody serves their stream here now), then the oldest if still full."""
        watches = self._watches
        while watches:
            oldest = next(iter(watches.values()))
            if len(watches) < self.max_watched and oldest.next_check + self.check_s > now:
                return
            watches.popitem(last=False)
