"""A Redis reply lost after the command ran: what the store's one reconnect-and-resend does.

A primary killed in a failover (or any connection dropped) after it ran a script but before
its reply reached the store looks, to the client, like a connection lost before the command
went out: redis-py raises `ConnectionError` either way, and the store's clients send the
command once more (`store/redis_connections.py`, `_RECONNECT` and `_StoreCluster`). For a
script that is not idempotent the second run must not answer differently from the first. A
proxy between the store and one Redis forwards the command, then cuts the connection on the
reply.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from mcp_resume_asgi.store import RedisStore
from tests.support.proxy import CutProxy
from tests.support.stores import redis_prefix, redis_url, require_redis

pytestmark = pytest.mark.anyio


def _proxy() -> CutProxy:
    """A proxy in front of the suite's Redis, cutting nothing until told."""
    port = urlsplit(redis_url()).port
    assert port is not None
    return CutProxy(port)


async def test_a_lost_reply_to_append_is_resent_harmlessly() -> None:
    """`append` skips the events already stored: the resend is harmless."""
    require_redis()
    from tests.test_store_contract import append, events, meta

    async with _proxy() as proxy:
        store = RedisStore(f"redis://127.0.0.1:{proxy.port}/0", prefix=redis_prefix("reply-lost"))
        try:
            await store.create_stream(meta("s1"), ttl_s=60)
            assert proxy.cut_next_reply() >= 1
            await append(store, "s1", events(1, 3))
            assert proxy.stats.cuts == 1, "the reply was not lost"
            assert [seq for seq, _ in await store.read("s1", 0)] == [1, 2, 3]
        finally:
            await store.clear()
            await store.aclose()


async def test_a_lost_reply_to_add_key_is_not_taken_for_someone_elses_key() -> None:
    """`add_key` sent again finds its own nonce beside the key: its first run was its own."""
    require_redis()
    async with _proxy() as proxy:
        store = RedisStore(f"redis://127.0.0.1:{proxy.port}/0", prefix=redis_prefix("reply-lost"))
        try:
            await store.set_key("warm", "x", 60)
            assert proxy.cut_next_reply() >= 1
            claimed = await store.add_key("claim", "1", 60)
            assert proxy.stats.cuts == 1, "the reply was not lost"
            assert claimed is None, f"add_key found {claimed!r}: its own first run"
            assert await store.add_key("claim", "2", 60) == "1"  # another call's is still taken
            assert await store.delete_key("claim", "1")
            assert await store.add_key("claim", "3", 60) is None
        finally:
            await store.clear()
            await store.aclose()


async def test_a_lost_reply_to_replace_key_is_not_taken_for_a_lost_race() -> None:
    """`replace_key` sent again finds the key holding its value under its nonce: True again
    (False would have its caller read its own write, recompute and apply its change twice)."""
    require_redis()
    async with _proxy() as proxy:
        store = RedisStore(f"redis://127.0.0.1:{proxy.port}/0", prefix=redis_prefix("reply-lost"))
        try:
            assert await store.replace_key("record", None, "v1", 60)
            assert proxy.cut_next_reply() >= 1
            assert await store.replace_key("record", "v1", "v2", 60)
            assert proxy.stats.cuts == 1, "the reply was not lost"
            assert await store.get_key("record") == "v2"
            assert not await store.replace_key("record", "v1", "v3", 60)  # a stale caller still loses
            assert not await store.replace_key("record", None, "v2", 60)  # and so does a copycat
        finally:
            await store.clear()
            await store.aclose()
