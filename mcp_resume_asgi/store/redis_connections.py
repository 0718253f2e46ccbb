"""How `RedisStore` gets its Redis connections, and what it needs of them.

Kept apart from the store's operations (`redis.py`) because it is a different
question - which pools, how many connections, what happens when Redis restarts,
which event loop - answered once, at construction: a store given a `url` owns two
blocking pools (commands, and the blocking calls of `wait` and `subscribe`, so
that waiters never starve commands), both sending a command once more on a fresh
connection after a restart; a store given a `client` uses it and checks it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

__all__ = ["delete_prefixed", "on_asyncio", "open_clients"]


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
    client: aioredis.Redis | None,
    wait_client: aioredis.Redis | None,
    max_connections: int,
    max_waiters: int,
) -> tuple[aioredis.Redis, aioredis.Redis | None, list[aioredis.Redis]]:
    """The command client, the client for blocking calls (None: the command client), and
    the clients opened here (the store closes those in `aclose`)."""
    owned: list[aioredis.Redis] = []
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
        if c is not None and c.connection_pool.connection_kwargs.get("decode_responses"):
            raise ValueError("RedisStore needs a client with decode_responses=False (payloads are bytes)")
    return client, wait_client, owned


async def delete_prefixed(client: aioredis.Redis, prefix: str) -> None:
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
