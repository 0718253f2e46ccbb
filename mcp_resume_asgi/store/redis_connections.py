"""How `RedisStore` gets its Redis connections, and what it needs of them.

Kept apart from the store's operations (`redis.py`) because it is a different
question - which pools, how many connections, what happens when Redis restarts,
which event loop - answered once, at construction: a store given a `url` owns two
bounded pools (`TurnPool`: commands, and the blocking calls of `wait` and `subscribe`,
so that waiters never starve commands), both sending a command once more on a fresh
connection after a restart; a store given a `client` uses it and checks it.

The store's scripts, its every write, run on its own pool by `_PooledScript`: one
`EVALSHA` per write, a few per request, each costing this process about a third less than
through redis-py's `Redis.execute_command` (`register_script`).

A `url` may name a node of a Redis Cluster: `is_cluster_node` finds out (on the store's
first use), and `open_cluster_clients` opens the two clients again as `RedisCluster`s,
each with up to that many connections per node. redis-py's cluster client refuses a
command beyond them (`MaxConnectionsError`) rather than queueing it, as a single
instance's pool does: so a store's cluster client lets at most that many
commands run at once and queues the others, the same back-pressure on both.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ClusterDownError, NoScriptError, SlotNotCoveredError
from redis.exceptions import ConnectionError as RedisConnectionError

__all__ = [
    "AnyRedis",
    "Script",
    "TurnPool",
    "delete_prefixed",
    "is_cluster_node",
    "on_asyncio",
    "open_clients",
    "open_cluster_clients",
    "register_script",
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


class TurnPool(aioredis.ConnectionPool):
    """redis-py's connection pool, lending at most `max_connections` at once: a command past
    them waits its turn, as in redis-py's `BlockingConnectionPool` without a timeout, but the
    turn is one asyncio semaphore instead of that pool's condition (a lock taken twice and a
    timeout scope made per command), and a connection is lent and taken back without redis-py's
    per-command pool metrics. A turn has no timeout: a command waits as long as the ones ahead
    of it take, each bounded by the url's `socket_timeout` when it sets one."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._turns = asyncio.Semaphore(self.max_connections)

    async def get_connection(self, command_name: Any = None, *keys: Any, **options: Any) -> Any:
        await self._turns.acquire()
        try:
            async with self._lock:  # a maintenance notification may rewrite the pool meanwhile
                connection = self.get_available_connection()  # type: ignore[no-untyped-call]
        except BaseException:
            self._turns.release()
            raise
        try:
            await self.ensure_connection(connection)
        except BaseException:
            await self.release(connection)
            raise
        return connection

    async def ensure_connection(self, connection: Any) -> None:
        """A connection open with nothing unread is ready as it is; any other is checked and
        opened again by redis-py's own (its `connect` costs a retry loop even when open)."""
        with contextlib.suppress(RedisConnectionError, OSError):
            # (`can_read_destructive` before redis-py 8)
            unread = getattr(connection, "can_read", None) or connection.can_read_destructive
            if connection.is_connected and not await unread():
                return
        await super().ensure_connection(connection)

    async def release(self, connection: Any) -> None:
        try:
            async with self._lock:
                self._in_use_connections.remove(connection)
                if getattr(connection, "should_reconnect", bool)():  # (redis-py >= 7)
                    await connection.disconnect()
                self._available_connections.append(connection)
        finally:
            self._turns.release()

    async def run(self, packed: bytes) -> Any:
        """Send one command, `packed` (`pack`), on a connection of the pool and read its reply."""
        connection = await self.get_connection()
        try:
            try:
                await connection.send_packed_command(packed)
                return await connection.read_response()
            except RedisConnectionError:
                await connection.disconnect()
                await connection.send_packed_command(packed)
                return await connection.read_response()
        finally:
            await self.release(connection)


def pack(head: bytes, count: int, args: Iterable[Any]) -> bytes:
    """A command in Redis's protocol: `head`, its first arguments packed already, `count` in
    all, then `args` - text, bytes or whole numbers, what the store's scripts take (redis-py's
    own packer, for any type, costs about twice as much for a script's two dozen arguments)."""
    out = [b"*%d\r\n" % count, head]
    for arg in args:
        kind = type(arg)  # the exact types first: `isinstance` chains cost more per argument
        if kind is str:
            arg = arg.encode()
        elif kind is int:
            arg = b"%d" % arg
        elif kind is not bytes:
            if isinstance(arg, str):
                arg = str.encode(arg)
            elif isinstance(arg, int) and not isinstance(arg, bool):
                arg = b"%d" % arg
            elif not isinstance(arg, bytes):
                raise TypeError(f"a script takes text, bytes or integers, not {kind.__name__}")
        out.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(out)


class Script(Protocol):
    """A Lua script registered with a client: `await script(keys=..., args=...)` runs it."""

    async def __call__(self, keys: Sequence[Any] | None = None, args: Sequence[Any] | None = None) -> Any: ...


class _PooledScript:
    """A script run on a connection of the store's own `TurnPool`: `EVALSHA` (and `SCRIPT LOAD`
    once when Redis does not know it), sent once more on a fresh connection after a connection
    error, never after a timeout (`_RECONNECT`'s rule). It is what redis-py's
    `Redis.execute_command` does for one command, less what a script's call does not need there
    (its retry object and closures, its per-command metrics, the response callbacks): the
    stream scripts run several times per request."""

    def __init__(self, pool: TurnPool, script: str) -> None:
        self._pool = pool
        self._script = script
        sha = hashlib.sha1(script.encode()).hexdigest().encode()
        self._head = b"$7\r\nEVALSHA\r\n$%d\r\n%s\r\n" % (len(sha), sha)

    async def __call__(self, keys: Sequence[Any] | None = None, args: Sequence[Any] | None = None) -> Any:
        keys = keys or ()
        args = args or ()
        command = pack(self._head, 3 + len(keys) + len(args), (len(keys), *keys, *args))
        try:
            return await self._pool.run(command)
        except NoScriptError:  # a Redis restarted, or flushed: its script cache is empty
            await self._pool.run(pack(b"$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n", 3, (self._script,)))
            return await self._pool.run(command)


def register_script(client: AnyRedis, script: str) -> Script:
    """`script` registered with `client`: on a pool of the store's own (`TurnPool`) run by
    `_PooledScript`, else by redis-py's own (a client the caller gave, a cluster)."""
    if isinstance(client, aioredis.Redis) and isinstance(client.connection_pool, TurnPool):
        return _PooledScript(client.connection_pool, script)
    return client.register_script(script)


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
        client = _owning(TurnPool.from_url(url, max_connections=max_connections, **_RECONNECT))
        owned.append(client)
        if wait_client is None:
            wait_client = _owning(TurnPool.from_url(url, max_connections=max_waiters, **_RECONNECT))
            owned.append(wait_client)
    assert client is not None
    for c in (client, wait_client):
        if c is not None and c.get_encoder().decode_responses:
            raise ValueError("RedisStore needs a client with decode_responses=False (payloads are bytes)")
    return client, wait_client, owned


def _owning(pool: TurnPool) -> aioredis.Redis:
    """A client on `pool` that closes the pool's connections when it is closed (a client given
    a pool leaves them open by default: they would wait for the garbage collector)."""
    client = aioredis.Redis(connection_pool=pool)
    client.auto_close_connection_pool = True
    return client


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
