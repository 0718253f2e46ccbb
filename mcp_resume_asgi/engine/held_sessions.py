"""The sessions a node knows it holds, trusted without asking the store while its heartbeat holds.

Every request of a session on a node asks the store which node holds the session (its owner key,
a round trip on Redis). Another node writes that key only when it takes the session over, and it
does so only when this node's heartbeat says this node no longer serves its sessions: the key is
gone (it lapsed, or the node left) or says `leaving`. So once the store said "this node", the
answer stays true for as long as this node's heartbeat has said `alive` without a break since:
the node keeps such sessions here and skips the read for them.

What keeps that sound, with times on this node's monotonic clock:

* a heartbeat written with a TTL of `timeout_s`, whose write began at `started`, keeps the key
  until at least `started + timeout_s` (Redis starts the TTL when the write arrives, later);
* a heartbeat whose write ended after the previous one's guarantee ran out may have left a gap in
  which another node took a session over: everything kept here is forgotten then (`beat`), and
  so is anything read from the store across that gap (`epoch` changes: `keep` refuses it);
* nothing is trusted once the guarantee ran out (`holds` asks the clock), nor while the node is
  not `alive` (its owner treats a leaving node's sessions as others' to take: the caller checks).

A session deleted here is forgotten (`forget`); one kept here that ended elsewhere costs nothing
wrong: the app answers its requests as it would have (404). Plain objects, no I/O.
"""

from __future__ import annotations

__all__ = ["MAX_HELD_SESSIONS", "HeldSessions"]

#: The most sessions one node keeps as held (the oldest goes first past it: read again).
MAX_HELD_SESSIONS = 100_000


class HeldSessions:
    """The sessions the store said this node holds, since its heartbeat last held without a break."""

    __slots__ = ("_held", "epoch", "max_held", "timeout_s", "until")

    def __init__(self, timeout_s: float, max_held: int = MAX_HELD_SESSIONS) -> None:
        self.timeout_s = timeout_s
        self.max_held = max(1, max_held)
        self.until = float("-inf")
        """Until when (monotonic) the heartbeat key is known to be in the store."""
        self.epoch = 0
        """Changes whenever the heartbeat may have had a gap: what was read before is not kept."""
        self._held: dict[str, None] = {}

    def beat(self, started: float, ended: float) -> None:
        """A heartbeat write began at `started` and was acknowledged at `ended`."""
        if ended >= self.until:  # (it may have arrived after the last one lapsed)
            self.lapsed()
        self.until = started + self.timeout_s

    def lapsed(self) -> None:
        """The heartbeat may have lapsed (it failed, or the node stopped): trust nothing kept."""
        self.epoch += 1
        self._held.clear()
        self.until = float("-inf")

    def holds(self, session_id: str, now: float) -> bool:
        """Whether the store said this node holds the session, and the heartbeat held since."""
        return now < self.until and session_id in self._held

    def keep(self, session_id: str, epoch: int) -> None:
        """The store said this node holds the session, read after `epoch` was seen."""
        if epoch != self.epoch:
            return
        held = self._held
        held.pop(session_id, None)
        while len(held) >= self.max_held:
            del held[next(iter(held))]
        held[session_id] = None

    def forget(self, session_id: str) -> None:
        self._held.pop(session_id, None)
