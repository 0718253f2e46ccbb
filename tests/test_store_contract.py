"""The `Store` contract, one suite over every implementation (`MemoryStore`, `SQLiteStore`, `RedisStore`).

The Redis variant runs against a real server, the suite's own (`tests/support/stores.py`;
env `REDIS_URL` points it elsewhere). Without one the Redis cases are skipped, except under `CI=true`, where
they fail instead. Each test uses a key prefix of its own and deletes it afterwards.
Where a test says "peer" it talks to the same store through a second instance (for
Redis: other connections, as another node would).
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from mcp_resume_asgi.core.orphans import after_loss
from mcp_resume_asgi.store import (
    FencedError,
    GapError,
    Listing,
    MemoryStore,
    SessionInfo,
    Store,
    StoreFullError,
    StreamKind,
    StreamMeta,
    StreamState,
)
from tests.support.stores import redis_prefix, redis_url, require_redis
from tests.support.timing import scaled

pytestmark = pytest.mark.anyio

Factory = Callable[..., Awaitable[Store]]


class ColdMemoryStore(MemoryStore):
    """A `MemoryStore` that keeps every finished, quiet stream cold (`memory_stream.freeze`)
    before each call it answers, instead of `COLD_AFTER_S` later: every answer about such a
    stream comes from its cold form."""

    def __getattribute__(self, name: str) -> Any:
        if not name.startswith("_"):
            object.__getattribute__(self, "_cool")(math.inf)
        return object.__getattribute__(self, name)


@pytest.fixture(params=["memory", "memory-cold", "sqlite", "sqlite-cold", "redis", "cluster"])
async def make(request: pytest.FixtureRequest) -> AsyncIterator[Factory]:
    """`await make(**bounds)`: a fresh, empty store of the parametrised kind.

    `await make(peer=store)`: a second handle on the same store (another node's view).

    "cluster": a `RedisStore` on the session's Redis Cluster (`redis_cluster_url`), found out
    from its URL, in its default partitions - or in one when a test sets a bound: the
    contract's bounds are of the whole store, which several partitions keep only in shares
    (`redis_layout.py`; `tests/test_redis_cluster_store.py` tests those).

    "sqlite": a `SQLiteStore` on a file of its own in the test's `tmp_path`; its peer is the
    same store (one process per file).

    "-cold": its finished streams kept cold at once (`ColdMemoryStore`).
    """
    kind, _, cold = request.param.partition("-")
    url = ""
    if kind == "redis":
        require_redis()
        url = redis_url()
    elif kind == "cluster":
        url = request.getfixturevalue("redis_cluster_url")
    prefix = redis_prefix("test-store")
    opened: list[Any] = []

    async def factory(peer: Store | None = None, **bounds: Any) -> Store:
        if kind == "memory":
            return peer if peer is not None else (ColdMemoryStore if cold else MemoryStore)(**bounds)
        if kind == "sqlite":
            if peer is not None:
                return peer
            from mcp_resume_asgi.store.sqlite import SQLiteStore

            tmp_path = request.getfixturevalue("tmp_path")
            opened.append(SQLiteStore(tmp_path / f"store-{len(opened)}.db", **bounds))
            if cold:
                opened[-1]._memory.__class__ = ColdMemoryStore
            return opened[-1]
        from mcp_resume_asgi.store import RedisStore

        if peer is not None:
            assert isinstance(peer, RedisStore)
            bounds = {
                "max_bytes": peer.max_bytes,
                "max_streams": peer.max_streams,
                "max_sessions": peer.max_sessions,
                "max_keys": peer.max_keys,
                "partitions": peer.partitions,
            }
        if kind == "cluster" and bounds:
            bounds.setdefault("partitions", 1)
        store = RedisStore(url, prefix=prefix, **bounds)
        opened.append(store)
        return store

    try:
        yield factory
    finally:
        with anyio.CancelScope(shield=True):
            if opened and kind != "sqlite":
                await opened[0].clear()
            for store in opened:
                await store.aclose()


@pytest.fixture
async def store(make: Factory) -> Store:
    return await make()


def meta(stream_id: str = "s1", session_id: str | None = "sess", **fields: Any) -> StreamMeta:
    return StreamMeta(
        stream_id=stream_id,
        kind=StreamKind.REQUEST,
        session_id=session_id,
        principal="alice",
        protocol_version="2025-11-25",
        path="/mcp",
        **fields,
    )


def events(first: int, last: int, size: int = 10) -> list[tuple[int, bytes]]:
    return [(seq, f"{seq:0{size}d}".encode()[-size:]) for seq in range(first, last + 1)]


BIG = 1 << 30  # a cap that never binds


async def append(store: Store, stream_id: str, batch: list[tuple[int, bytes]], **caps: int) -> None:
    await store.append(
        stream_id, batch, max_events=caps.get("max_events", BIG), max_bytes=caps.get("max_bytes", BIG)
    )


# ----------------------------------------------------------------------------- streams
async def test_create_get_round_trips_every_field(store: Store) -> None:
    original = meta(
        request_id="req-1",
        method="tools/call",
        final_seq=None,
        pending_inputs=[["elicit-1", 3], [7, 4]],
        issued_inputs=["elicit-1", 7],
        last_contact=1700000000.25,
        owner="node-a",
        route=2,
    )
    await store.create_stream(original, ttl_s=60)
    got = await store.get_stream("s1")
    assert got is not None
    for name in StreamMeta.__dataclass_fields__:
        if name != "version":
            assert getattr(got, name) == getattr(original, name), name
    assert got.kind is StreamKind.REQUEST and got.state is StreamState.RUNNING
    assert got.version == 0
    assert await store.get_stream("missing") is None
    assert (await store.usage()).streams == 1


async def test_int_and_null_request_ids_and_no_session(store: Store) -> None:
    await store.create_stream(meta("a", session_id=None, request_id=7), ttl_s=60)
    await store.create_stream(meta("b", request_id=None), ttl_s=60)
    a, b = await store.get_stream("a"), await store.get_stream("b")
    assert a is not None and a.request_id == 7 and a.session_id is None
    assert b is not None and b.request_id is None


async def test_update_applies_changes_bumps_version_and_rejects_unknown_fields(store: Store) -> None:
    await store.create_stream(meta(), ttl_s=60)
    updated = await store.update_stream(
        "s1",
        state=StreamState.COMPLETED,
        final_seq=5,
        pending_inputs=[["q", 1]],
        attached=True,
        returning=True,
    )
    assert updated is not None
    assert updated.state is StreamState.COMPLETED and updated.final_seq == 5
    assert updated.pending_inputs == [["q", 1]] and updated.attached is True
    assert updated.version == 1
    assert await store.get_stream("s1") == updated
    assert await store.update_stream("missing", turn=1) is None
    assert await store.update_stream("missing", turn=1, returning=True) is None
    with pytest.raises(AttributeError):
        await store.update_stream("s1", no_such_field=1)
    with pytest.raises(ValueError):
        await store.update_stream("s1", version=42)


async def test_update_returns_the_record_only_when_asked(store: Store) -> None:
    await store.create_stream(meta(), ttl_s=60)
    assert await store.update_stream("s1", turn=1) is None
    assert await store.update_stream("s1", ttl_s=30, turn=2) is None
    got = await store.get_stream("s1")
    assert got is not None and got.turn == 2 and got.version == 2
    asked = await store.update_stream("s1", turn=3, returning=True)
    assert asked is not None and asked.turn == 3 and asked.version == 3


async def test_update_stream_if_is_a_compare_and_set(store: Store) -> None:
    await store.create_stream(meta(), ttl_s=60)
    applied, after = await store.update_stream_if("s1", {"turn": 0, "state": StreamState.RUNNING}, turn=1)
    assert applied and after is not None and after.turn == 1
    applied, current = await store.update_stream_if("s1", {"turn": 0}, turn=5)
    assert not applied and current is not None and current.turn == 1
    assert (await store.get_stream("s1")).turn == 1  # type: ignore[union-attr]
    assert await store.update_stream_if("missing", {"turn": 0}, turn=1) == (False, None)
    await store.update_stream("s1", pending_inputs=[["a", 1], [2, 3]])
    applied, _ = await store.update_stream_if("s1", {"pending_inputs": [["a", 1], [2, 3]]}, pending_inputs=[])
    assert applied


async def test_detached_notes_where_its_connection_stopped_unless_a_newer_one_took_over(store: Store) -> None:
    """`detached`: `update_stream_if` on `attach_gen` (a store's own is as that one)."""
    await store.create_stream(meta(), ttl_s=60)
    taken = await store.attach("s1", 5.0)
    assert taken is not None and taken.attached and taken.attach_gen == 1
    version = taken.version
    await store.detached("s1", 2, last_contact=7.0, delivered_seq=3)  # (another generation's: nothing)
    kept = await store.get_stream("s1")
    assert kept is not None and kept.attached and kept.last_contact == 5.0 and kept.version == version
    await store.detached("s1", 1, last_contact=7.0, delivered_seq=3)
    left = await store.get_stream("s1")
    assert left is not None and not left.attached and left.last_contact == 7.0 and left.delivered_seq == 3
    assert left.version == version + 1
    await store.detached("missing", 1, last_contact=7.0, delivered_seq=3)


@pytest.mark.slow
async def test_update_stream_if_serialises_concurrent_read_modify_writes(make: Factory) -> None:
    first = await make()
    await first.create_stream(meta(), ttl_s=60)
    handles = [first, await make(peer=first), await make(peer=first)]

    async def increment(store: Store) -> None:
        while True:
            current = await store.get_stream("s1")
            assert current is not None
            applied, _ = await store.update_stream_if("s1", {"turn": current.turn}, turn=current.turn + 1)
            if applied:
                return

    async with anyio.create_task_group() as tg:
        for i in range(30):
            tg.start_soon(increment, handles[i % len(handles)])
    assert (await first.get_stream("s1")).turn == 30  # type: ignore[union-attr]


@pytest.mark.slow
async def test_ttl_expiry_and_update_extends_it(store: Store) -> None:
    short = scaled(0.3)  # "kept" is updated before then, even on a loaded machine
    await store.create_stream(meta("short"), ttl_s=short)
    await store.create_stream(meta("kept"), ttl_s=short)
    await append(store, "short", events(1, 3))
    await append(store, "kept", events(1, 3))
    assert await store.update_stream("kept", ttl_s=30, turn=1, returning=True) is not None
    await anyio.sleep(short + 0.15)
    assert await store.get_stream("short") is None
    assert await store.read("short", 0) == []
    assert await store.update_stream("short", turn=1, returning=True) is None
    assert await store.attach("short", time.time()) is None
    with anyio.fail_after(scaled(1)):
        await store.wait("short", 0, within_s=5)  # a stream that is gone does not block
    kept = await store.get_stream("kept")
    assert kept is not None and kept.turn == 1
    assert [seq for seq, _ in await store.read("kept", 0)] == [1, 2, 3]
    usage = await store.usage()
    assert usage.streams == 1 and usage.bytes == 30  # the expired stream's bytes are no longer counted


async def test_delete_stream(store: Store) -> None:
    await store.create_stream(meta(), ttl_s=60)
    await append(store, "s1", events(1, 4))
    await store.delete_stream("s1")
    await store.delete_stream("s1")  # idempotent
    await store.delete_stream("never-existed")
    assert await store.get_stream("s1") is None
    assert await store.read("s1", 0) == []
    assert await store.usage() == type(await store.usage())(streams=0, bytes=0)


async def test_recreating_a_stream_id_starts_afresh(store: Store) -> None:
    await store.create_stream(meta(), ttl_s=60)
    await append(store, "s1", events(1, 4))
    await store.delete_stream("s1")
    await store.create_stream(meta(), ttl_s=60)
    fresh = await store.get_stream("s1")
    assert fresh is not None and fresh.last_seq == 0 and fresh.version == 0
    assert await store.read("s1", 0) == []
    await append(store, "s1", events(1, 2))
    assert [seq for seq, _ in await store.read("s1", 0)] == [1, 2]


# ----------------------------------------------------------------------------- one call for an answer
def composed(store: Store) -> Store:
    """`store`, answering `open_with` and `append_final` with `Store`'s defaults (the calls they
    stand for), as a store that does not implement them does: the defaults are checked on
    each kind of store."""
    kind = type(store)
    defaults = {"__slots__": (), "open_with": Store.open_with, "append_final": Store.append_final}
    store.__class__ = type(f"Composed{kind.__name__}", (kind,), defaults)
    return store


@pytest.fixture(params=["native", "composed"])
async def answering(request: pytest.FixtureRequest, make: Factory) -> Store:
    """A store of each kind, as it is and using the defaults of the `Store` ABC."""
    store = await make()
    return composed(store) if request.param == "composed" else store


async def test_open_with_is_create_append_and_complete_in_one(answering: Store) -> None:
    store = answering
    original = meta("one", request_id=7, method="tools/call", owner="node-a", attached=True, attach_gen=1)
    kept = original.copy()
    batch = events(1, 3)
    await store.open_with(original, 60, batch, max_events=BIG, max_bytes=BIG, final_seq=3, retain_s=30)
    await store.create_stream(meta("three", request_id=7, method="tools/call", owner="node-a"), ttl_s=60)
    await append(store, "three", batch)
    await store.update_stream(
        "three", ttl_s=30, final_seq=3, state=StreamState.COMPLETED, attached=True, attach_gen=1
    )
    one, three = await store.get_stream("one"), await store.get_stream("three")
    assert one is not None and three is not None
    for name in StreamMeta.__dataclass_fields__:
        if name not in ("version", "stream_id"):
            assert getattr(one, name) == getattr(three, name), name
    assert (one.state, one.final_seq, one.last_seq, one.first_seq) == (StreamState.COMPLETED, 3, 3, 1)
    assert one.version > 0
    assert await store.read("one", 0) == batch == await store.read("three", 0)
    assert (await store.read_key_and_stream("k", "one")).final == batch[2][1]
    assert (await store.usage()).bytes == 2 * sum(len(payload) for _, payload in batch)
    assert await store.delete_session("sess") == ["one", "three"]
    assert kept.request_id == 7 and kept.stream_id == "one"


async def test_open_with_a_running_answer_caps_and_an_empty_start(answering: Store) -> None:
    store = answering
    await store.open_with(meta("s1"), 60, events(1, 5), max_events=2, max_bytes=BIG)
    got = await store.get_stream("s1")
    assert got is not None and got.state is StreamState.RUNNING and got.final_seq is None
    assert (got.first_seq, got.last_seq) == (4, 5)
    with pytest.raises(GapError):
        await store.read("s1", 0)
    assert await store.read("s1", 3) == events(4, 5)
    await append(store, "s1", events(6, 6))
    assert [seq for seq, _ in await store.read("s1", 3)] == [4, 5, 6]
    await store.open_with(meta("s2"), 60, [], max_events=BIG, max_bytes=BIG)
    empty = await store.get_stream("s2")
    assert empty is not None and (empty.last_seq, empty.state) == (0, StreamState.RUNNING)
    assert await store.read("s2", 0) == []


async def test_open_with_starts_a_stream_id_afresh(answering: Store) -> None:
    store = answering
    await store.create_stream(meta(), ttl_s=60)
    await append(store, "s1", events(1, 4))
    await store.open_with(meta(), 60, events(1, 1), max_events=BIG, max_bytes=BIG, final_seq=1)
    got = await store.get_stream("s1")
    assert got is not None and (got.last_seq, got.final_seq, got.state) == (1, 1, StreamState.COMPLETED)
    assert await store.read("s1", 0) == events(1, 1)
    assert (await store.usage()) == type(await store.usage())(streams=1, bytes=10)


async def test_open_with_is_refused_when_every_stream_runs(make: Factory) -> None:
    store = await make(max_streams=2)
    await store.create_stream(meta("a"), ttl_s=60)
    await store.open_with(meta("b"), 60, events(1, 1), max_events=BIG, max_bytes=BIG)
    with pytest.raises(StoreFullError):
        await store.open_with(meta("c"), 60, events(1, 1), max_events=BIG, max_bytes=BIG, final_seq=1)
    assert await store.get_stream("c") is None
    await store.update_stream("a", state=StreamState.COMPLETED)
    await store.open_with(meta("c"), 60, events(1, 1), max_events=BIG, max_bytes=BIG, final_seq=1)
    assert await store.get_stream("a") is None and await store.get_stream("c") is not None


@pytest.mark.slow
async def test_open_with_keeps_a_completed_stream_for_retain_s(answering: Store) -> None:
    store = answering
    short = scaled(0.3)
    await store.open_with(
        meta("done"), 60, events(1, 1), max_events=BIG, max_bytes=BIG, final_seq=1, retain_s=short
    )
    await store.open_with(meta("running"), 60, events(1, 1), max_events=BIG, max_bytes=BIG, retain_s=short)
    await anyio.sleep(short + 0.15)
    assert await store.get_stream("done") is None and await store.read("done", 0) == []
    assert await store.get_stream("running") is not None  # (retain_s is for a completed stream)


async def test_append_final_appends_and_completes_in_one(answering: Store) -> None:
    store = answering
    await store.create_stream(meta(), ttl_s=60)
    await append(store, "s1", events(1, 2))
    before = await store.get_stream("s1")
    assert before is not None
    seen = before.version

    async def answer() -> None:
        await anyio.sleep(0.05)
        assert await store.append_final(
            "s1", events(3, 4), max_events=BIG, max_bytes=BIG, final_seq=4, retain_s=30
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(answer)
        with anyio.fail_after(scaled(2)):
            await store.wait("s1", 2, within_s=10, version=seen)  # woken by it
    got = await store.get_stream("s1")
    assert got is not None and (got.last_seq, got.final_seq, got.state) == (4, 4, StreamState.COMPLETED)
    assert got.version > seen
    assert await store.read("s1", 0) == events(1, 4)
    assert (await store.read_key_and_stream("k", "s1")).final == events(4, 4)[0][1]
    # A retry after it landed changes nothing; another payload under its seq is refused.
    assert await store.append_final("s1", events(3, 4), max_events=BIG, max_bytes=BIG, final_seq=4)
    assert await store.read("s1", 0) == events(1, 4)
    assert (await store.usage()).bytes == 40
    with pytest.raises(ValueError):
        await store.append_final("s1", [(4, b"another")], max_events=BIG, max_bytes=BIG, final_seq=4)


async def test_a_write_for_a_node_that_no_longer_owns_the_stream_is_fenced(answering: Store) -> None:
    """`append` and `append_final` with `owner` write only while the record is that node's: a
    node taken for lost (another one runs its request now) writes nothing beside the other's."""
    store = answering
    await store.create_stream(meta(owner="node-a"), ttl_s=60)
    await store.append("s1", events(1, 1), max_events=BIG, max_bytes=BIG, owner="node-a")
    await store.update_stream("s1", owner="node-b")
    with pytest.raises(FencedError) as fenced:
        await store.append("s1", events(2, 2), max_events=BIG, max_bytes=BIG, owner="node-a")
    assert fenced.value.owner == "node-b" and fenced.value.stream_id == "s1"
    with pytest.raises(FencedError):
        await store.append_final(
            "s1", events(2, 3), max_events=BIG, max_bytes=BIG, final_seq=3, owner="node-a"
        )
    got = await store.get_stream("s1")
    assert got is not None and (got.last_seq, got.final_seq, got.state) == (1, None, StreamState.RUNNING)
    assert await store.read("s1", 0) == events(1, 1)
    # The owner's writes, and unfenced ones, go on.
    await store.append("s1", events(2, 2), max_events=BIG, max_bytes=BIG, owner="node-b")
    assert await store.append_final(
        "s1", events(3, 3), max_events=BIG, max_bytes=BIG, final_seq=3, owner="node-b"
    )
    assert await store.read("s1", 0) == events(1, 3)


async def test_append_final_to_a_missing_stream_writes_nothing(answering: Store) -> None:
    store = answering
    assert not await store.append_final("gone", events(1, 2), max_events=BIG, max_bytes=BIG, final_seq=2)
    assert await store.get_stream("gone") is None and await store.read("gone", 0) == []
    assert (await store.usage()).bytes == 0


async def test_append_final_caps_the_stream(answering: Store) -> None:
    store = answering
    await store.create_stream(meta(), ttl_s=60)
    await append(store, "s1", events(1, 3))
    assert await store.append_final("s1", events(4, 5), max_events=2, max_bytes=BIG, final_seq=5, retain_s=30)
    got = await store.get_stream("s1")
    assert got is not None and (got.first_seq, got.last_seq, got.final_seq) == (4, 5, 5)
    assert await store.read("s1", 3) == events(4, 5)


async def test_seqs_may_skip_far_ahead(answering: Store) -> None:
    """A stream taken from a lost node goes on far past its last event (`core.orphans.after_loss`):
    a read after any position in between gets what follows; the final answer there is the
    stream's; caps drop the events before it as any others."""
    store = answering
    far = after_loss(2)
    await store.create_stream(meta(), ttl_s=60)
    await append(store, "s1", events(1, 2))
    assert await store.append_final("s1", [(far, b"answer")], max_events=BIG, max_bytes=BIG, final_seq=far)
    got = await store.get_stream("s1")
    assert got is not None and (got.first_seq, got.last_seq, got.final_seq) == (1, far, far)
    assert await store.read("s1", 0) == [*events(1, 2), (far, b"answer")]
    for after in (2, 3, far - 1):
        assert await store.read("s1", after) == [(far, b"answer")], after
    assert await store.read("s1", far) == []
    assert (await store.read_key_and_stream("k", "s1")).final == b"answer"
    assert await store.append_final("s1", [(far, b"answer")], max_events=BIG, max_bytes=BIG, final_seq=far)
    assert await store.read("s1", 1) == [*events(2, 2), (far, b"answer")], "a retry changes nothing"
    # Capped: the events before it go; a read after the last of them or within the gap is whole.
    await store.create_stream(meta("s2"), ttl_s=60)
    await append(store, "s2", events(1, 2))
    await store.append("s2", [(far, b"next")], max_events=1, max_bytes=BIG)
    capped = await store.get_stream("s2")
    assert capped is not None and (capped.first_seq, capped.last_seq) == (3, far)
    assert await store.read("s2", 2) == await store.read("s2", far - 1) == [(far, b"next")]
    with pytest.raises(GapError):
        await store.read("s2", 1)


async def test_open_with_lists_and_append_final_unlists_in_the_same_call(answering: Store) -> None:
    """`open_with`'s `listing` adds a stream opened running to an index as `index_add` does (cap
    included: a full index leaves it out, the stream opened all the same); one opened completed
    is not listed. `append_final`'s `unlist` takes it out, also when the stream is gone, and not
    when the write is fenced (nothing is written then). ("running", the index of running
    requests, is kept by partition on a cluster; "capped" is an index as any other.)"""
    store = answering
    until = time.time() + 60
    listing = Listing("running", until, 1000)
    opened = await store.open_with(
        meta("a", owner="node-a"), 60, events(1, 1), max_events=BIG, max_bytes=BIG, listing=listing
    )
    assert opened is True
    assert await store.open_with(meta("b"), 60, [], max_events=BIG, max_bytes=BIG, listing=listing)
    answered = meta("c")
    assert not await store.open_with(
        answered, 60, events(1, 1), max_events=BIG, max_bytes=BIG, final_seq=1, listing=listing
    )
    assert not await store.open_with(meta("e"), 60, [], max_events=BIG, max_bytes=BIG)
    page = await store.index_page("running")
    assert [member for member, _ in page] == ["a", "b"]
    assert all(at == pytest.approx(until, abs=1e-3) for _, at in page)
    assert await store.index_count("running") == 2
    assert await store.index_add("capped", "x", until, cap=1)
    capped = Listing("capped", until, 1)
    assert not await store.open_with(
        meta("d"), 60, events(1, 1), max_events=BIG, max_bytes=BIG, listing=capped
    )
    assert await store.get_stream("d") is not None, "a full index does not keep the stream from opening"
    assert [member for member, _ in await store.index_page("capped")] == ["x"]

    await store.update_stream("a", owner="node-b")
    with pytest.raises(FencedError):
        await store.append_final(
            "a", events(2, 2), max_events=BIG, max_bytes=BIG, final_seq=2, owner="node-a", unlist="running"
        )
    assert [member for member, _ in await store.index_page("running")] == ["a", "b"]
    assert await store.append_final(
        "a", events(2, 2), max_events=BIG, max_bytes=BIG, final_seq=2, owner="node-b", unlist="running"
    )
    got = await store.get_stream("a")
    assert got is not None and (got.final_seq, got.state) == (2, StreamState.COMPLETED)
    assert [member for member, _ in await store.index_page("running")] == ["b"]
    await store.delete_stream("b")
    assert not await store.append_final(
        "b", events(1, 1), max_events=BIG, max_bytes=BIG, final_seq=1, unlist="running"
    )
    assert await store.index_count("running") == 0
    assert await store.append_final(
        "d", events(2, 2), max_events=BIG, max_bytes=BIG, final_seq=2, unlist="capped"
    )
    assert await store.index_page("capped") == [("x", pytest.approx(until, abs=1e-3))]


# ----------------------------------------------------------------------------- events
async def test_append_then_read_in_order_with_limits(store: Store) -> None:
    await store.create_stream(meta(), ttl_s=60)
    assert await store.read("s1", 0) == []
    await append(store, "s1", [(1, b"one")])
    await append(store, "s1", [(2, b"two"), (3, b"three"), (4, b""), (5, b"\x00\xffbin\n")])
    assert await store.read("s1", 0) == [
        (1, b"one"),
        (2, b"two"),
        (3, b"three"),
        (4, b""),
        (5, b"\x00\xffbin\n"),
    ]
    assert await store.read("s1", 2) == [(3, b"three"), (4, b""), (5, b"\x00\xffbin\n")]
    assert await store.read("s1", 0, limit=2) == [(1, b"one"), (2, b"two")]
    assert await store.read("s1", 3, limit=1) == [(4, b"")]
    assert await store.read("s1", 5) == []
    assert await store.read("missing", 0) == []
    got = await store.get_stream("s1")
    assert got is not None and got.last_seq == 5 and got.first_seq == 1
    assert (await store.usage()).bytes == len(b"onetwothree\x00\xffbin\n")


async def test_read_with_meta_is_read_then_the_metadata_after_it(store: Store) -> None:
    await store.create_stream(meta(pending_inputs=[[7, 2]]), ttl_s=60)
    assert await store.read_with_meta("s1", 0) == ([], await store.get_stream("s1"))
    await append(store, "s1", [(1, b"one"), (2, b"two"), (3, b"three")])
    await store.update_stream("s1", final_seq=3)
    got, got_meta = await store.read_with_meta("s1", 1, limit=1)
    assert got == [(2, b"two")]
    assert got_meta is not None and got_meta == await store.get_stream("s1")
    assert (got_meta.last_seq, got_meta.final_seq, got_meta.pending_inputs) == (3, 3, [[7, 2]])
    assert await store.read_with_meta("missing", 0) == ([], None)
    await append(store, "s1", events(4, 9), max_events=3)
    with pytest.raises(GapError):
        await store.read_with_meta("s1", 2)


async def test_appending_to_a_missing_stream_is_ignored(store: Store) -> None:
    await append(store, "missing", events(1, 3))
    assert await store.read("missing", 0) == []
    assert (await store.usage()).bytes == 0


async def test_an_append_retried_after_it_landed_changes_nothing(store: Store) -> None:
    """A write whose reply was lost (Redis stalled past the client's timeout, then ran it) is
    sent again: what it recorded is not recorded twice, and the rest of a batch is."""
    await store.create_stream(meta(), ttl_s=60)
    batch = events(1, 3)
    await append(store, "s1", batch)
    before = await store.get_stream("s1")
    assert before is not None
    await append(store, "s1", batch)  # the same write again
    after = await store.get_stream("s1")
    assert after is not None and (after.last_seq, after.version) == (3, before.version), "nothing changed"
    await append(store, "s1", events(2, 5))  # a batch that landed in part
    assert await store.read("s1", 0) == events(1, 5)
    assert (await store.usage()).bytes == sum(len(p) for _, p in events(1, 5)), "each event counted once"
    with pytest.raises(ValueError):
        await append(store, "s1", [(4, b"another event"), (6, b"six")])  # a seq reused: a bug, refused
    assert await store.read("s1", 0) == events(1, 5)
    await append(store, "s1", events(6, 9), max_events=2)  # events 8 and 9 kept
    await append(store, "s1", events(5, 10), max_events=2)  # (trimmed ones cannot be checked)
    assert await store.read("s1", 8) == events(9, 10)


async def test_event_cap_drops_oldest_and_read_into_the_gap_raises(store: Store) -> None:
    await store.create_stream(meta(), ttl_s=60)
    for seq in range(1, 11):
        await append(store, "s1", events(seq, seq), max_events=3)
    got = await store.get_stream("s1")
    assert got is not None and got.first_seq == 8 and got.last_seq == 10
    assert [seq for seq, _ in await store.read("s1", 7)] == [8, 9, 10]
    for after in (0, 5, 6):
        with pytest.raises(GapError) as info:
            await store.read("s1", after)
        assert (info.value.stream_id, info.value.after_seq, info.value.first_seq) == ("s1", after, 8)
    assert (await store.usage()).bytes == 30
    # A batch larger than the cap keeps only its newest events.
    await append(store, "s1", events(11, 20), max_events=3)
    assert [seq for seq, _ in await store.read("s1", 17)] == [18, 19, 20]


async def test_byte_cap_drops_oldest_and_advances_first_seq(store: Store) -> None:
    await store.create_stream(meta(), ttl_s=60)
    await append(store, "s1", events(1, 5, size=10), max_bytes=25)
    got = await store.get_stream("s1")
    assert got is not None and got.first_seq == 4
    assert [seq for seq, _ in await store.read("s1", 3)] == [4, 5]
    with pytest.raises(GapError):
        await store.read("s1", 2)
    # An event larger than the cap on its own is dropped too: first_seq passes last_seq.
    await append(store, "s1", [(6, b"x" * 40)], max_bytes=25)
    got = await store.get_stream("s1")
    assert got is not None and got.first_seq == 7 and got.last_seq == 6
    assert await store.read("s1", 6) == []
    with pytest.raises(GapError):
        await store.read("s1", 5)
    assert (await store.usage()).bytes == 0


async def test_global_budget_trims_least_recently_active_streams_first(make: Factory) -> None:
    store = await make(max_bytes=1000)
    for name in ("old", "mid", "new"):
        await store.create_stream(meta(name), ttl_s=60)
    await append(store, "old", events(1, 4, size=100))
    await append(store, "mid", events(1, 4, size=100))
    assert (await store.usage()).bytes == 800
    await append(store, "new", events(1, 4, size=100))  # 1200 > 1000: 200 bytes must go
    usage = await store.usage()
    assert 0 < usage.bytes <= 1000
    old = await store.get_stream("old")
    assert old is not None and old.first_seq == 3
    with pytest.raises(GapError):
        await store.read("old", 0)
    assert [seq for seq, _ in await store.read("mid", 0)] == [1, 2, 3, 4]
    assert [seq for seq, _ in await store.read("new", 0)] == [1, 2, 3, 4]
    # One stream alone over the budget trims itself.
    await store.delete_stream("old")
    await store.delete_stream("mid")
    await append(store, "new", events(5, 20, size=100))
    usage = await store.usage()
    assert usage.bytes == 1000
    new = await store.get_stream("new")
    assert new is not None and new.first_seq == 11 and new.last_seq == 20


async def test_global_budget_is_shared_between_handles(make: Factory) -> None:
    store = await make(max_bytes=500)
    peer = await make(peer=store)
    await store.create_stream(meta("a"), ttl_s=60)
    await peer.create_stream(meta("b"), ttl_s=60)
    await append(store, "a", events(1, 4, size=100))
    await append(peer, "b", events(1, 4, size=100))
    assert 0 < (await store.usage()).bytes <= 500
    assert (await peer.usage()).bytes == (await store.usage()).bytes
    with pytest.raises(GapError):
        await peer.read("a", 0)


async def test_max_streams_drops_finished_streams_then_refuses(make: Factory) -> None:
    store = await make(max_streams=3)
    for name in ("a", "b", "c"):
        await store.create_stream(meta(name), ttl_s=60)
    await store.update_stream("b", state=StreamState.COMPLETED)
    await store.create_stream(meta("d"), ttl_s=60)  # room made by dropping the finished "b"
    assert await store.get_stream("b") is None
    assert {await store.get_stream(x) is not None for x in ("a", "c", "d")} == {True}
    with pytest.raises(StoreFullError):
        await store.create_stream(meta("e"), ttl_s=60)
    assert (await store.usage()).streams == 3


# ----------------------------------------------------------------------------- wait
WOKEN_WITHIN_S = scaled(5)
"""A `wait` woken by a change returns within this (at once, on a quiet machine); its own
deadline in `_wakes` is four times longer, so a wait that was not woken cannot pass."""


async def _wakes(store: Store, stream_id: str, action: Callable[[], Awaitable[Any]], **kw: Any) -> float:
    """Seconds a `wait` took when `action` ran 50 ms after it started."""
    got = await store.get_stream(stream_id)
    after = got.last_seq if got is not None else 0

    async def later() -> None:
        await anyio.sleep(0.05)
        await action()

    start = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(later)
        await store.wait(stream_id, after, within_s=4 * WOKEN_WITHIN_S, **kw)
        elapsed = time.monotonic() - start
    return elapsed


async def test_wait_wakes_on_append_from_another_handle(make: Factory) -> None:
    store = await make()
    peer = await make(peer=store)
    await store.create_stream(meta(), ttl_s=60)
    elapsed = await _wakes(store, "s1", lambda: append(peer, "s1", events(1, 1)))
    assert elapsed < WOKEN_WITHIN_S


async def test_wait_wakes_on_metadata_changes(make: Factory) -> None:
    store = await make()
    peer = await make(peer=store)
    await store.create_stream(meta(), ttl_s=60)
    assert await _wakes(store, "s1", lambda: peer.update_stream("s1", delivered_seq=0)) < WOKEN_WITHIN_S
    assert await _wakes(store, "s1", lambda: peer.attach("s1", time.time())) < WOKEN_WITHIN_S
    assert await _wakes(store, "s1", lambda: peer.update_stream_if("s1", {}, turn=3)) < WOKEN_WITHIN_S
    assert await _wakes(store, "s1", lambda: peer.delete_stream("s1")) < WOKEN_WITHIN_S


async def test_wait_wakes_when_the_global_budget_trims_the_stream(make: Factory) -> None:
    store = await make(max_bytes=300)
    await store.create_stream(meta("victim"), ttl_s=60)
    await store.create_stream(meta("other"), ttl_s=60)
    await append(store, "victim", events(1, 3, size=100))
    elapsed = await _wakes(store, "victim", lambda: append(store, "other", events(1, 2, size=100)))
    assert elapsed < WOKEN_WITHIN_S
    assert (await store.get_stream("victim")).first_seq > 1  # type: ignore[union-attr]


async def test_wait_times_out(store: Store) -> None:
    await store.create_stream(meta(), ttl_s=60)
    start = time.monotonic()
    await store.wait("s1", 0, within_s=0.2)
    assert 0.15 <= time.monotonic() - start < 0.2 + scaled(1.3)


async def test_wait_returns_at_once_when_there_is_something_to_see(store: Store) -> None:
    await store.create_stream(meta(), ttl_s=60)
    await append(store, "s1", events(1, 2))
    seen = await store.get_stream("s1")
    assert seen is not None
    seen_version = seen.version  # get_stream may return a live record: keep the number
    with anyio.fail_after(scaled(1)):
        await store.wait("s1", 1, within_s=10)  # an event after 1 exists
        await store.wait("missing", 0, within_s=10)  # no such stream
        await store.update_stream("s1", turn=1)  # a change the waiter has not seen yet
        await store.wait("s1", 2, within_s=10, version=seen_version)
    current = await store.get_stream("s1")
    assert current is not None and current.version > seen_version
    start = time.monotonic()
    await store.wait("s1", 2, within_s=0.1, version=current.version)  # nothing new: times out
    assert time.monotonic() - start >= 0.08


async def test_wait_is_cancellable_and_the_store_still_works(store: Store) -> None:
    await store.create_stream(meta(), ttl_s=60)
    start = time.monotonic()
    with anyio.move_on_after(0.1):
        await store.wait("s1", 0, within_s=30)
    assert time.monotonic() - start < scaled(1)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await store.wait("s1", 0, within_s=30)
    await append(store, "s1", events(1, 1))
    assert [seq for seq, _ in await store.read("s1", 0)] == [1]
    assert await _wakes(store, "s1", lambda: append(store, "s1", events(2, 2))) < WOKEN_WITHIN_S


# ----------------------------------------------------------------------------- attach
async def test_attach_bumps_the_generation_atomically_under_concurrency(make: Factory) -> None:
    store = await make()
    await store.create_stream(meta(), ttl_s=60)
    handles = [store, await make(peer=store), await make(peer=store)]
    generations: list[int] = []

    async def attach(i: int) -> None:
        got = await handles[i % len(handles)].attach("s1", 1000.0 + i)
        assert got is not None and got.attached
        generations.append(got.attach_gen)

    async with anyio.create_task_group() as tg:
        for i in range(30):
            tg.start_soon(attach, i)
    assert sorted(generations) == list(range(1, 31))
    final = await store.get_stream("s1")
    assert final is not None and final.attach_gen == 30 and final.attached
    assert 1000.0 <= final.last_contact < 1030.0
    assert await store.attach("missing", 1.0) is None


# ----------------------------------------------------------------------------- sessions
async def test_sessions_put_get_delete_returns_their_streams(store: Store) -> None:
    info = SessionInfo(session_id="sess", protocol_version="2025-11-25", principal="alice")
    await store.put_session(info, ttl_s=60)
    assert await store.get_session("sess") == info
    assert await store.get_session("other") is None
    await store.create_stream(meta("a"), ttl_s=60)
    await store.create_stream(meta("b"), ttl_s=60)
    await store.create_stream(meta("gone"), ttl_s=60)
    await store.create_stream(meta("foreign", session_id="other"), ttl_s=60)
    await store.create_stream(meta("none", session_id=None), ttl_s=60)
    await store.delete_stream("gone")
    assert await store.delete_session("sess") == ["a", "b"]
    assert await store.get_session("sess") is None
    assert await store.delete_session("sess") == []
    assert await store.delete_session("other") == ["foreign"]


async def test_sessions_expire(store: Store) -> None:
    await store.put_session(SessionInfo("short", "2025-06-18"), ttl_s=0.1)
    await store.put_session(SessionInfo("long", "2025-06-18"), ttl_s=60)
    await anyio.sleep(0.25)
    assert await store.get_session("short") is None
    assert await store.get_session("long") is not None


async def test_session_count_is_bounded(make: Factory) -> None:
    store = await make(max_sessions=5)
    for i in range(12):
        await store.put_session(SessionInfo(f"s{i}", "2025-11-25"), ttl_s=60 + i)
    kept = [i for i in range(12) if await store.get_session(f"s{i}") is not None]
    assert len(kept) <= 5 and 11 in kept


# ----------------------------------------------------------------------------- keys
async def test_keys_set_get_delete_and_ttl(store: Store) -> None:
    await store.set_key("k", "v1", ttl_s=60)
    assert await store.get_key("k") == "v1"
    await store.set_key("k", "v2", ttl_s=60)
    assert await store.get_key("k") == "v2"
    assert await store.delete_key("k") is True
    assert await store.get_key("k") is None
    assert await store.delete_key("k") is False
    await store.set_key("short", "x", ttl_s=0.1)
    await anyio.sleep(0.25)
    assert await store.get_key("short") is None


async def test_add_key_only_if_absent_and_conditional_delete(make: Factory) -> None:
    store = await make()
    peer = await make(peer=store)
    results = []

    async def race(i: int) -> None:
        results.append(await (store if i % 2 else peer).add_key("once", f"v{i}", ttl_s=60))

    async with anyio.create_task_group() as tg:
        for i in range(10):
            tg.start_soon(race, i)
    winners = [r for r in results if r is None]
    assert len(winners) == 1
    value = await store.get_key("once")
    assert value is not None and all(r == value for r in results if r is not None)
    assert await store.delete_key("once", "not-it") is False
    assert await store.get_key("once") == value
    assert await peer.delete_key("once", value) is True
    assert await store.add_key("once", "again", ttl_s=60) is None


async def test_replace_key_is_a_compare_and_set(make: Factory) -> None:
    store = await make()
    peer = await make(peer=store)
    assert await store.replace_key("cas", "nothing", "v1", ttl_s=60) is False, "absent is not 'nothing'"
    assert await store.get_key("cas") is None
    assert await store.replace_key("cas", None, "v1", ttl_s=60) is True, "None: only if absent"
    assert await peer.replace_key("cas", None, "v2", ttl_s=60) is False
    assert await peer.get_key("cas") == "v1"
    assert await peer.replace_key("cas", "v0", "v2", ttl_s=60) is False
    assert await peer.replace_key("cas", "v1", "v2", ttl_s=60) is True
    assert await store.get_key("cas") == "v2"
    assert await store.replace_key("cas", "v1", "v3", ttl_s=60) is False, "a stale expectation"
    assert await store.get_key("cas") == "v2"
    # The TTL is the write's.
    assert await store.replace_key("cas", "v2", "short", ttl_s=0.1) is True
    await anyio.sleep(0.25)
    assert await store.get_key("cas") is None
    assert await store.replace_key("cas", "short", "late", ttl_s=60) is False, "expired is absent"


@pytest.mark.slow
async def test_replace_key_serialises_concurrent_read_modify_writes(make: Factory) -> None:
    """40 increments from two handles, each a read then a compare-and-set retried on conflict:
    none is lost (with `set_key` most would be)."""
    store = await make()
    peer = await make(peer=store)
    conflicts = 0

    async def increment(handle: Store) -> None:
        nonlocal conflicts
        while True:
            current = await handle.get_key("counter")
            await anyio.lowlevel.checkpoint()  # let the others read the same value
            value = str(int(current or "0") + 1)
            if await handle.replace_key("counter", current, value, ttl_s=60):
                return
            conflicts += 1

    async with anyio.create_task_group() as tg:
        for i in range(40):
            tg.start_soon(increment, store if i % 2 else peer)
    assert await store.get_key("counter") == "40"
    assert conflicts > 0, "the writers did race"


async def test_replace_key_keeps_the_key_count_bounded(make: Factory) -> None:
    store = await make(max_keys=5)
    for i in range(12):
        assert await store.replace_key(f"r{i}", None, str(i), ttl_s=60 + i) is True
    kept = [i for i in range(12) if await store.get_key(f"r{i}") is not None]
    assert len(kept) <= 5 and 11 in kept


async def test_read_key_and_stream_is_the_three_reads_in_one(store: Store) -> None:
    nothing = await store.read_key_and_stream("k", "s1")
    assert (nothing.value, nothing.meta, nothing.final) == (None, None, None)
    await store.set_key("k", "v", ttl_s=60)
    await store.create_stream(meta("s1"), ttl_s=60)
    running = await store.read_key_and_stream("k", "s1")
    assert running.value == "v" and running.final is None
    assert running.meta is not None and running.meta.stream_id == "s1" and running.meta.final_seq is None
    batch = events(1, 5)
    await append(store, "s1", batch, max_events=2)  # events 4 and 5 kept
    await store.update_stream("s1", final_seq=5)
    done = await store.read_key_and_stream("k", "s1")
    assert done.final == batch[4][1]
    assert done.meta is not None and done.meta == await store.get_stream("s1")
    await store.update_stream("s1", final_seq=3)  # recorded, then evicted
    lost = await store.read_key_and_stream("k", "s1")
    assert lost.final is None and lost.meta is not None and lost.meta.final_seq == 3
    await store.delete_stream("s1")
    gone = await store.read_key_and_stream("k", "s1")
    assert (gone.value, gone.meta, gone.final) == ("v", None, None)


async def test_read_key_and_stream_is_one_moments_read(store: Store) -> None:
    """What it read stays what it read: the answer recorded after it does not show in its
    metadata without the answer itself (which would read as an answer lost)."""
    await store.create_stream(meta("s1"), ttl_s=60)
    running = await store.read_key_and_stream("k", "s1")
    await append(store, "s1", events(1, 2))
    await store.update_stream("s1", final_seq=2, state=StreamState.COMPLETED)
    assert running.meta is not None and running.final is None
    assert (running.meta.final_seq, running.meta.last_seq, running.meta.state) == (
        None,
        0,
        StreamState.RUNNING,
    )


async def test_key_count_is_bounded(make: Factory) -> None:
    store = await make(max_keys=5)
    for i in range(12):
        await store.set_key(f"k{i}", str(i), ttl_s=60 + i)
    kept = [i for i in range(12) if await store.get_key(f"k{i}") is not None]
    assert len(kept) <= 5 and 11 in kept


# ----------------------------------------------------------------------------- between nodes
async def test_publish_reaches_subscribers_in_order(make: Factory) -> None:
    store = await make()
    peer = await make(peer=store)
    assert await store.publish("node-a", b"nobody") == 0
    async with peer.subscribe("node-a") as messages:
        assert await store.publish("node-a", b"one") == 1
        assert await store.publish("node-a", b"two") == 1
        assert await store.publish("node-b", b"elsewhere") == 0
        got = []
        with anyio.fail_after(scaled(2)):
            async for message in messages:
                got.append(message)
                if len(got) == 2:
                    break
        assert got == [b"one", b"two"]
    assert await store.publish("node-a", b"after") == 0


async def test_subscribe_is_cancellable(store: Store) -> None:
    with anyio.move_on_after(0.1):
        async with store.subscribe("quiet") as messages:
            async for _ in messages:
                pytest.fail("nothing was published")
    # Released: Redis drops a closed subscriber's connection on its own time (a cluster's shard
    # too), so the count reaches 0 soon after, not necessarily at the next command.
    with anyio.fail_after(10):
        while await store.publish("quiet", b"x") != 0:
            await anyio.sleep(0.01)


# ----------------------------------------------------------------------------- differential
@pytest.mark.parametrize("seed", range(3))
async def test_redis_matches_memory_on_random_workloads(make: Factory, seed: int) -> None:
    """Random appends, caps, budget trims, deletes and reads: every answer as MemoryStore's."""
    import random

    store = await make(max_bytes=3000)
    reference = MemoryStore(max_bytes=3000)
    trimmed_by_budget = 0
    rng = random.Random(seed)
    next_seq: dict[str, int] = {}
    for step in range(300):
        action = rng.random()
        stream_id = f"s{rng.randrange(6)}"
        if stream_id not in next_seq:
            for s in (store, reference):
                await s.create_stream(meta(stream_id), ttl_s=60)
            next_seq[stream_id] = 1
        elif action < 0.55:
            first = next_seq[stream_id]
            batch = [(first + i, bytes([65 + i]) * rng.randrange(0, 200)) for i in range(rng.randrange(1, 6))]
            next_seq[stream_id] = first + len(batch)
            caps = {"max_events": rng.choice([3, 8, BIG]), "max_bytes": rng.choice([150, 600, BIG])}
            for s in (store, reference):
                await append(s, stream_id, batch, **caps)
        elif action < 0.95:
            after = rng.randrange(0, next_seq[stream_id])
            limit = rng.choice([1, 3, 1000])
            outcomes: list[object] = []
            for s in (store, reference):
                try:
                    outcomes.append(await s.read(stream_id, after, limit))
                except GapError as gap:
                    outcomes.append(("gap", gap.first_seq))
            assert outcomes[0] == outcomes[1], (step, stream_id, after)
        else:
            for s in (store, reference):
                await s.delete_stream(stream_id)
            del next_seq[stream_id]
        if step % 20 == 0:
            usage = await store.usage()
            assert usage == await reference.usage(), step
            trimmed_by_budget += usage.bytes > 2500
            for stream_id in next_seq:
                a, b = await store.get_stream(stream_id), await reference.get_stream(stream_id)
                assert a is not None and b is not None
                assert (a.first_seq, a.last_seq) == (b.first_seq, b.last_seq), (step, stream_id)
    assert trimmed_by_budget, "the workload never came near the global budget"


def test_stream_meta_copy_covers_every_field() -> None:
    """`StreamMeta.copy` is written out by hand for speed: it must not forget a field."""
    import dataclasses

    from mcp_resume_asgi.store.base import StreamKind, StreamMeta, StreamState

    values: dict[str, Any] = {}
    for number, item in enumerate(dataclasses.fields(StreamMeta)):
        values[item.name] = f"value-{number}"
    values.update(
        kind=StreamKind.STANDALONE, state=StreamState.EXPIRED, pending_inputs=[[1, 2]], issued_inputs=[3]
    )
    meta = StreamMeta(**values)
    copied = meta.copy()
    assert dataclasses.asdict(copied) == dataclasses.asdict(meta)
    assert copied.pending_inputs is not meta.pending_inputs
    assert copied.issued_inputs is not meta.issued_inputs
