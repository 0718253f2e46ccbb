"""`StoreMark`: whether the store may have lost REST calls, told by a mark the face keeps in it.

A REST call is named by its client, so - unlike a task id, which says when its TTL ends and
whose it is - nothing a GET brings says that the call existed: once the store restarted
empty (no persistence) or evicted its records, a call's id reads like one never used. So the
face keeps one mark in the store (`keys.rest_store_mark`: a random id, set if absent, with a
TTL of years) and each node remembers the id it read last. A node that then finds another id
there, or none (it writes a new one), knows the store lost what it held, and writes into the
mark when it found that out, for every node to read.

For one call TTL after that, a GET of a call the store does not hold, of a tool the app
has, answers the call `failed`, saying the store lost it (what a task's creator is told of a
task the store lost) instead of 404: the store cannot tell a call it lost from one never
made, and a client that made it must not be told it never existed. A PUT of it runs the
tool again, as a PUT of a new call does. A store that never lost anything costs one `add_key` per PUT and per
GET that finds no call.

The mark is read back from the store, so it is bounded and checked (an unreadable one is
replaced); it decides only which of two answers a missing call gets, never who runs what.
"""

from __future__ import annotations

import json
import math
import secrets

from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import Store

__all__ = ["CALL_LOST", "MARK_TTL_S", "StoreMark"]

#: Why a call the store may have lost is `failed`.
CALL_LOST = "the store lost the call before its TTL (it restarted without persistence, or evicted it)"
#: How long the mark is kept: it must outlive every call (it is written again if it goes).
MARK_TTL_S = 10 * 365 * 86400.0
#: How far ahead of this node's clock another node's may be.
MAX_SKEW_S = 60.0
#: Longest mark read back.
MAX_MARK_CHARS = 200


class StoreMark:
    """One node's reading of the store's mark (see the module docstring)."""

    __slots__ = ("_seen", "store")

    def __init__(self, store: Store) -> None:
        self.store = store
        self._seen: str | None = None
        """The mark's id this node read last (None: none yet, since this process started)."""

    async def lost_at(self, now: float) -> float | None:
        """When the store was found to have lost what it held (Unix time), or None if it has
        not, as far as the mark and this node know; the mark is written if it is missing."""
        made = _encode(secrets.token_hex(8), now if self._seen is not None else None)
        raw = await self.store.add_key(keys.rest_store_mark(), made, MARK_TTL_S)
        mark = _decode(made if raw is None else raw, now)
        if mark is None:  # unreadable: it says nothing; ours replaces it
            await self.store.set_key(keys.rest_store_mark(), made, MARK_TTL_S)
            raw, mark = made, _decode(made, now)
            assert mark is not None
        mark_id, lost = mark
        if self._seen is not None and mark_id != self._seen and lost is None:
            lost = now  # another mark than the one read before: the store lost it meanwhile
            await self.store.replace_key(keys.rest_store_mark(), raw, _encode(mark_id, lost), MARK_TTL_S)
        self._seen = mark_id
        return lost


def _encode(mark_id: str, lost_at: float | None) -> str:
    return json.dumps({"id": mark_id, "lost_at": lost_at}, separators=(",", ":"))


def _decode(raw: str, now: float) -> tuple[str, float | None] | None:
    """The mark's id and loss time, or None when it is not one (a loss time ahead of this
    node's clock by more than `MAX_SKEW_S` is none)."""
    if len(raw) > MAX_MARK_CHARS:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    mark_id, lost = value.get("id"), value.get("lost_at")
    if not isinstance(mark_id, str) or not mark_id:
        return None
    if (
        isinstance(lost, bool)
        or not isinstance(lost, int | float)
        or not math.isfinite(lost)
        or lost > now + MAX_SKEW_S
    ):
        lost = None
    return mark_id, float(lost) if lost is not None else None
