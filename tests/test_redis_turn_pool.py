"""`RedisStore`'s own connections on one Redis instance (`store/redis_connections.py`): a
bounded pool whose commands past its size wait their turn, and its scripts run on that pool
with the rules the store's clients keep - loaded again when Redis forgot them, sent once more
after a lost connection (`test_redis_reply_lost.py`), never after a timeout."""

from __future__ import annotations

import anyio
import pytest
import redis.asyncio as aioredis

from mcp_resume_asgi.store import RedisStore
from mcp_resume_asgi.store.redis_connections import TurnPool, register_script
from tests.support.stores import redis_prefix, redis_url, require_redis
from tests.test_store_contract import append, events, meta

pytestmark = pytest.mark.anyio


async def test_more_concurrent_calls_than_connections_wait_their_turn() -> None:
    require_redis()
    store = RedisStore(redis_url(), prefix=redis_prefix("turns"), max_connections=2)
    try:
        async with anyio.create_task_group() as tg:
            for i in range(40):
                tg.start_soon(store.create_stream, meta(f"s{i}"), 60)
                tg.start_soon(store.set_key, f"k{i}", "v", 60)
        assert [await store.get_key(f"k{i}") for i in range(40)] == ["v"] * 40
        assert all([await store.get_stream(f"s{i}") for i in range(40)])
        pool = store._client.connection_pool  # type: ignore[union-attr]
        assert isinstance(pool, TurnPool)
        assert len(pool._available_connections) == 2, "the pool opened more connections than its size"
    finally:
        await store.clear()
        await store.aclose()


async def test_a_script_redis_forgot_is_loaded_again() -> None:
    """A Redis restarted (or its script cache flushed) answers `NOSCRIPT`: loaded, then run."""
    require_redis()
    store = RedisStore(redis_url(), prefix=redis_prefix("noscript"))
    admin = aioredis.Redis.from_url(redis_url())
    try:
        await store.create_stream(meta("s1"), ttl_s=60)
        await admin.script_flush()
        await append(store, "s1", events(1, 2))
        assert [seq for seq, _ in await store.read("s1", 0)] == [1, 2]
    finally:
        await store.clear()
        await store.aclose()
        await admin.aclose()


async def test_a_script_that_timed_out_is_not_sent_again() -> None:
    """It may still run (Redis slow, not gone): a second run is not harmless (`add_key`). The
    script keeps Redis busy a little longer than the client waits for a reply, so that a client
    sending it again on a fresh connection would find Redis free by then and run it twice."""
    from redis.exceptions import TimeoutError as RedisTimeoutError

    require_redis()
    prefix = redis_prefix("timeout")
    store = RedisStore(f"{redis_url()}?socket_timeout=0.2", prefix=prefix)
    admin = aioredis.Redis.from_url(redis_url())
    counter = f"{prefix}counter"
    slow = register_script(
        store._client,
        "redis.call('INCR', KEYS[1]) "
        "local function us() local t = redis.call('TIME') return t[1] * 1000000 + t[2] end "
        "local stop = us() + 300000 while us() < stop do end return 1",
    )
    try:
        await store.set_key("warm", "x", 60)  # a connection open
        with pytest.raises(RedisTimeoutError):
            await slow(keys=[counter])
        await anyio.sleep(1.0)  # a second run, had it been sent, would have ended
        assert await admin.get(counter) == b"1"
    finally:
        await admin.delete(counter)
        await store.clear()
        await store.aclose()
        await admin.aclose()


async def test_closing_the_store_closes_its_pools_connections() -> None:
    """Its own pools' connections are closed with it, not left to the garbage collector: the
    Redis server sees them go."""
    require_redis()
    admin = aioredis.Redis.from_url(redis_url())
    store = RedisStore(redis_url(), prefix=redis_prefix("closing"), max_connections=4)
    name = b"closing-" + redis_prefix("name").encode()
    try:
        async with anyio.create_task_group() as tg:
            for i in range(16):
                tg.start_soon(store.set_key, f"k{i}", "v", 60)
        for client in store._owned:
            pool = client.connection_pool  # type: ignore[union-attr]
            for connection in pool._available_connections:
                await connection.send_command("CLIENT", "SETNAME", name)
                assert await connection.read_response() == b"OK"
        listed = await admin.client_list()
        assert any(c.get("name") == name.decode() for c in listed)
        await store.clear()
    finally:
        await store.aclose()
    with anyio.fail_after(5):
        while any(c.get("name") == name.decode() for c in await admin.client_list()):
            await anyio.sleep(0.01)
    await admin.aclose()
