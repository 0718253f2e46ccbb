"""How `RedisStore` gets its Redis connections, and what it needs of them.

Kept apart from the store's operations (`redis.py`) because it is a different
question - which pools, how many connections, what happens when Redis restarts,
which event loop - answered once, at construction: a store given a `url` owns two
blocking pools (commands, and the blocking calls of `wait` and `subscribe`, so
that waiters never starve commands), both sending a command once more on a fresh
connection after a restart; a store given a `client` uses it and checks it.

A `url` may name a node of a Redis Cluster: `is_cluster_node` finds out (on the store's
first use), and `open_cluster_clients` opens the two clients again as `RedisCluster`s,
each with up to that many connections per node. redis-py's cluster client refuses a
command beyond them (`MaxConnectionsError`) rather than queueing it, as a single
instance's blocking pool does: so a store's cluster client lets at most that many
commands run at once and queues the others, the same back-pressure on both.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ClusterDownError, SlotNotCoveredError
from redis.exceptions import ConnectionError as RedisConnectionError

__all__ = [
    "AnyRedis",
    "delete_prefixed",
    "is_cluster_node",
    "on_asyncio",
    "open_clients",
    "open_cluster_clients",
]

#: A client of one Redis instance or of a Redis Cluster.
AnyRedis = aioredis.Redis | RedisCluster


def on_asyncio() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError(
            "RedisStore runs on asyncio only: the redis client does not support trio"
        ) from None


#: After Redis restarted, every pooled connection is dead: a command that meets one is
#: sent once more on a fresh connection instead of failing a healthy request. Only then:
#: a command that timed out (`socket_timeout`) is not sent again, for Redis may be slow, not
#: gone, and run it late - a second `add_key` would find its own value and report it taken.
#: The timeout is the store being unavailable to the caller, whose retry is idempotent where
#: it matters (`append` skips the events already stored: `held_writes.py`, `redis_scripts.py`).
#: (redis-py's `Retry` covers timeouts too unless told otherwise.)
_RECONNECT: dict[str, Any] = {
    "retry": Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
    "retry_on_error": [RedisConnectionError],
}


def open_clients(
    url: str | None,
    client: AnyRedis | None,
    wait_client: AnyRedis | None,
    max_connections: int,
    max_waiters: int,
) -> tuple[AnyRedis, AnyRedis | None, list[AnyRedis]]:
    """The command client, the client for blocking calls (None: the command client), and
    the clients opened here (the store closes those in `aclose`)."""
    owned: list[AnyRedis] = []
    if url is not None:
        client = aioredis.Redis(
            connection_pool=aioredis.BlockingConnectionPool.from_url(
                url, max_connections=max_connections, timeout=None, **_RECONNECT
            )
        )
        owned.append(client)
        if wait_client is None:
            wait_client = aioredis.Redis(
                connection_pool=aioredis.BlockingConnectionPool.from_url(
                    url, max_connections=max_waiters, timeout=None, **_RECONNECT
                )
            )
            owned.append(wait_client)
    assert client is not None
    for c in (client, wait_client):
        if c is not None and c.get_encoder().decode_responses:
            raise ValueError("RedisStore needs a client with decode_responses=False (payloads are bytes)")
    return client, wait_client, owned


async def is_cluster_node(client: AnyRedis) -> bool:
    """Whether the Redis `client` talks to runs in cluster mode (`INFO cluster`)."""
    if isinstance(client, RedisCluster):
        return True
    info = await client.info("cluster")
    return bool(int(info.get("cluster_enabled", 0)))


class _StoreCluster(RedisCluster):
    """redis-py's cluster client, sending a command again on the errors `_RECONNECT` does
    (a lost connection; and a slot moving or the cluster down during a failover), but not
    after a timeout, which redis-py's own list (`ERRORS_ALLOW_RETRY`) includes: a script
    that timed out may still run, and running it twice is not harmless (`add_key`).

    At most `max_connections` of its commands run at once; the others wait their turn (the
    module docstring: redis-py would refuse them). One command uses one connection of one
    node, so no node's pool is ever asked for more than it has."""

    ERRORS_ALLOW_RETRY = (RedisConnectionError, ClusterDownError, SlotNotCoveredError)  # type: ignore[assignment]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._turns = asyncio.Semaphore(int(kwargs.get("max_connections", 100)))

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        async with self._turns:
            return await super().execute_command(*args, **kwargs)


def open_cluster_clients(
    url: str, max_connections: int, max_waiters: int
) -> tuple[RedisCluster, RedisCluster, list[AnyRedis]]:
    """`open_clients` for a `url` that names a node of a Redis Cluster."""
    client = _StoreCluster.from_url(url, max_connections=max_connections)
    waiter = _StoreCluster.from_url(url, max_connections=max_waiters)
    return client, waiter, [client, waiter]


async def delete_prefixed(client: AnyRedis, prefix: str) -> None:
    """Delete every key under `prefix` (`RedisStore.clear`)."""
    pattern = prefix.replace("\\", "\\\\")
    for char in "*?[]":
        pattern = pattern.replace(char, "\\" + char)
    batch: list[Any] = []
    async for key in client.scan_iter(match=pattern + "*", count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            await client.unlink(*batch)
            batch = []
    if batch:
        await client.unlink(*batch)
