"""Where `RedisStore` keeps each key: one Redis instance, or the slots of a Redis Cluster.

On one instance every key is `<prefix><name>` exactly as `redis_scripts.py` lays them out,
one namespace with one set of global accounting keys (`g:`) - nothing here changes a name.

A Redis Cluster runs a script only if every key it touches is in one hash slot, while the
store's scripts touch one stream's keys together with the global accounting that bounds
the whole store (bytes, streams, sessions, keys) and, to keep that bound, other streams'
keys (trimming the least recently active, evicting a finished one). So on a cluster the
store is split into `partitions`, each a complete store of its own under the prefix
`<prefix>{<tag>}`: a hash tag, so all of a partition's keys - its streams, its `g:` keys,
its session sets - share one slot and every script touches one slot. A stream, session or
key belongs to the partition its id hashes to (CRC-32, the same on every node); a task's
record goes with its stream (`keys.placed_by`). Partition i's tag is chosen to fall in the
i-th of `partitions` equal ranges of slots, so partitions spread evenly over primaries
that hold contiguous ranges (what `redis-cli --cluster create` makes).

The trade-off, for the global bounds: each partition keeps 1/`partitions` of every bound
(`share`), so the whole store never holds more than the bound - the bound stays honest -
but one partition can be full (refusing a new stream, trimming the oldest events of its
own streams) while others have room, and the least recently active stream trimmed first is
the least recently active of its partition, not of the store. With the default 16
partitions and bounds in the thousands the difference is a few per cent; for exact bounds
give `partitions=1` (one slot: correct, but it does not spread over the primaries).
`partitions` is part of the layout, like the prefix: every node of a deployment must use
the same.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from mcp_resume_asgi.store import keys as store_keys

__all__ = ["DEFAULT_PARTITIONS", "RedisLayout"]

#: How many partitions a store on a Redis Cluster has unless told.
DEFAULT_PARTITIONS = 16


def _tag(index: int, partitions: int) -> str:
    """A hash tag whose slot is in the `index`-th of `partitions` equal ranges of slots."""
    low = index * REDIS_CLUSTER_HASH_SLOTS // partitions
    high = (index + 1) * REDIS_CLUSTER_HASH_SLOTS // partitions
    attempt = 0
    while True:
        tag = f"{index}.{attempt}"
        if low <= key_slot(tag.encode()) < high:
            return tag
        attempt += 1


class RedisLayout:
    """The partition prefix of each stream, session and key (see the module docstring)."""

    def __init__(self, prefix: str, *, cluster: bool, partitions: int) -> None:
        if partitions <= 0:
            raise ValueError("partitions must be positive")
        self.prefix = prefix
        self.cluster = cluster
        self.partitions = partitions if cluster else 1
        self.prefixes: Sequence[str] = (
            [f"{prefix}{{{_tag(i, self.partitions)}}}" for i in range(self.partitions)]
            if cluster
            else [prefix]
        )

    def _of(self, name: str) -> str:
        if self.partitions == 1:
            return self.prefixes[0]
        digest = zlib.crc32(name.encode("utf-8", "surrogatepass"))
        return self.prefixes[digest % self.partitions]

    def of_stream(self, stream_id: str) -> str:
        return self._of(stream_id)

    def of_session(self, session_id: str) -> str:
        return self._of(session_id)

    def of_key(self, key: str) -> str:
        return self._of(store_keys.placed_by(key))

    def share(self, bound: int) -> int:
        """A partition's part of a bound of the whole store (`check` made it at least 1)."""
        return bound // self.partitions

    def check(self, **bounds: int) -> None:
        """Refuse bounds a partition's share of which would be 0 (a store that holds nothing)
        - or, rounded up to 1, more than the bound in all."""
        for name, bound in bounds.items():
            if bound < self.partitions:
                raise ValueError(
                    f"{name}={bound} is below partitions={self.partitions}: on a Redis Cluster each "
                    "partition keeps its share of every bound (give fewer partitions)"
                )

    @staticmethod
    def stream_keys(part: str, stream_id: str) -> list[str]:
        """The key a stream's script declares: its record, which routes the script to its
        partition's slot. The other keys it touches (the stream's events and notification, its
        session's set, the partition's accounting, the streams it trims or evicts:
        `redis_scripts.py`'s layout) share the partition's hash tag, so the same slot; one key
        declared keeps what each call encodes and sends to the least."""
        return [f"{part}s:{stream_id}:m"]
