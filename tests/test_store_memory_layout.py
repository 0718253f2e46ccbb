"""`MemoryStore` keeps no Python object per event (`store/memory_stream.py`), and its layout
answers as a plain list of `(seq, payload)` would: appends, caps, retries, reads, gaps.

The contract itself is `tests/test_store_contract.py`; this checks what it cannot see.
"""

from __future__ import annotations

import gc
import random

import anyio
import pytest

from mcp_resume_asgi.store import GapError, MemoryStore, StreamKind, StreamMeta
from mcp_resume_asgi.store.memory_stream import StreamEntry

pytestmark = pytest.mark.anyio

BIG = 1 << 30


def meta(stream_id: str = "s1") -> StreamMeta:
    return StreamMeta(stream_id, StreamKind.REQUEST, "sess", None, "2025-11-25", "/mcp")


async def test_events_add_no_object_the_collector_tracks() -> None:
    store = MemoryStore()
    await store.create_stream(meta(), ttl_s=60)
    await store.append("s1", [(1, b"first")], max_events=BIG, max_bytes=BIG)
    gc.collect()
    gc.disable()
    try:
        before = len(gc.get_objects())
        for seq in range(2, 5002):
            await store.append("s1", [(seq, b"event %d" % seq)], max_events=BIG, max_bytes=BIG)
        grown = len(gc.get_objects()) - before
    finally:
        gc.enable()
    assert grown < 20, grown  # a deque of (seq, payload) tuples: 5,000
    assert len(await store.read("s1", 0, limit=10_000)) == 5001


async def test_a_read_leaves_the_stream_free_to_grow() -> None:
    """(Reads look at the buffers through memoryviews: none may outlive the read, or the next
    append could not resize them.)"""
    store = MemoryStore()
    await store.create_stream(meta(), ttl_s=60)
    for seq in range(1, 50):
        await store.append("s1", [(seq, b"e%d" % seq)], max_events=20, max_bytes=BIG)
        assert await store.read("s1", seq - 1) == [(seq, b"e%d" % seq)]
        await store.read("s1", max(seq - 20, 0), limit=3)


async def test_a_stream_is_a_few_tracked_objects() -> None:
    store = MemoryStore()
    await store.create_stream(meta(), ttl_s=60)
    await store.append("s1", [(seq, b"x" * seq) for seq in range(1, 100)], max_events=BIG, max_bytes=BIG)
    entry = store._streams["s1"]
    tracked = [item for item in gc.get_referents(entry) if gc.is_tracked(item) and item is not StreamEntry]
    assert tracked == [entry.meta], tracked  # (and its waiters' event, while one waits)


class Reference:
    """A stream's events as a list of `(seq, payload)`, the obvious way."""

    def __init__(self) -> None:
        self.events: list[tuple[int, bytes]] = []
        self.first_seq = 1
        self.last_seq = 0

    def append(self, batch: list[tuple[int, bytes]], max_events: int, max_bytes: int) -> None:
        for seq, payload in batch:
            if seq <= self.last_seq:
                continue
            self.events.append((seq, payload))
            self.last_seq = seq
        while self.events and (
            len(self.events) > max_events or sum(len(p) for _, p in self.events) > max_bytes
        ):
            seq, _ = self.events.pop(0)
            self.first_seq = seq + 1

    def read(self, after: int, limit: int) -> list[tuple[int, bytes]] | tuple[str, int]:
        if after + 1 < self.first_seq:
            return ("gap", self.first_seq)
        return [e for e in self.events if e[0] > after][:limit]


@pytest.mark.parametrize("seed", range(6))
async def test_the_layout_answers_as_a_list_would(seed: int) -> None:
    """Random batches (seqs dense, or skipping some as held writes that were dropped do),
    retries of what landed, caps, and reads from every position."""
    rng = random.Random(seed)
    store = MemoryStore()
    await store.create_stream(meta(), ttl_s=60)
    reference = Reference()
    seq = 0
    for step in range(400):
        if rng.random() < 0.15 and reference.last_seq:
            start = max(1, reference.last_seq - rng.randrange(3))
            batch = [(s, b"%d:" % s + b"x" * (s % 7)) for s in range(start, reference.last_seq + 2)]
            seq = reference.last_seq + 1
        else:
            batch = []
            for _ in range(rng.randrange(1, 5)):
                seq += 1 + (rng.random() < 0.1) * rng.randrange(1, 4)
                batch.append((seq, b"%d:" % seq + b"x" * (seq % 7)))
        max_events = rng.choice([2, 5, 50, BIG])
        max_bytes = rng.choice([30, 200, BIG])
        await store.append("s1", batch, max_events=max_events, max_bytes=max_bytes)
        reference.append(batch, max_events, max_bytes)
        got_meta = await store.get_stream("s1")
        assert got_meta is not None
        assert (got_meta.first_seq, got_meta.last_seq) == (reference.first_seq, reference.last_seq), step
        usage = await store.usage()
        assert usage.bytes == sum(len(p) for _, p in reference.events), step
        for after in range(max(0, reference.first_seq - 2), reference.last_seq + 2):
            limit = rng.choice([1, 2, 1000])
            try:
                got: object = await store.read("s1", after, limit)
            except GapError as gap:
                got = ("gap", gap.first_seq)
            assert got == reference.read(after, limit), (step, after, limit)


async def test_a_retry_is_checked_against_the_payload_kept_after_compaction() -> None:
    store = MemoryStore()
    await store.create_stream(meta(), ttl_s=60)
    for seq in range(1, 200):  # past the point where the dropped head is compacted away
        await store.append("s1", [(seq, b"p%d" % seq)], max_events=10, max_bytes=BIG)
    entry = store._streams["s1"]
    assert entry.count() == 10 and len(entry.index) == 10 * 16
    await store.append("s1", [(198, b"p198"), (199, b"p199")], max_events=10, max_bytes=BIG)
    with pytest.raises(ValueError):
        await store.append("s1", [(195, b"other")], max_events=10, max_bytes=BIG)
    await store.append(
        "s1", [(150, b"trimmed: taken as written"), (200, b"p200")], max_events=10, max_bytes=BIG
    )
    assert await store.read("s1", 197) == [(198, b"p198"), (199, b"p199"), (200, b"p200")]


def test_an_entry_drops_its_oldest_in_place() -> None:
    entry = StreamEntry(meta(), 0.0)
    for seq in range(1, 101):
        entry.add(seq, bytes([seq]) * seq)
    total = sum(range(1, 101))
    assert entry.nbytes == total and entry.count() == 100
    for seq in range(1, 91):
        assert entry.drop_oldest() == (seq, seq)
    assert entry.count() == 10 and entry.seq_at(0) == 91 and entry.newest_seq() == 100
    assert len(entry.buf) == sum(range(91, 101)) == entry.nbytes
    assert entry.events(entry.after(95), 2) == [(96, bytes([96]) * 96), (97, bytes([97]) * 97)]
    for _ in range(10):
        entry.drop_oldest()
    assert entry.count() == 0 and entry.nbytes == 0 and len(entry.buf) == 0
    entry.add(101, b"again")
    assert entry.events(entry.after(100), 10) == [(101, b"again")]


def test_stream_meta_keeps_its_rarely_set_fields_apart_yet_is_the_same_dataclass() -> None:
    import dataclasses

    from mcp_resume_asgi.store.base import _META_DEFAULTS

    plain = StreamMeta("a", StreamKind.REQUEST, None, None, "2025-11-25", "/mcp")
    other = StreamMeta("b", StreamKind.REQUEST, None, None, "2025-11-25", "/mcp", route=-1, turn=0)
    assert plain._rare is _META_DEFAULTS and other._rare is _META_DEFAULTS  # shared while at defaults
    assert not hasattr(plain, "__dict__")
    names = [f.name for f in dataclasses.fields(StreamMeta)]
    assert names[10] == "first_seq" and names[-1] == "trace" and len(names) == 24
    assert StreamMeta.__match_args__ == tuple(names)
    plain.turn = 0  # (a default written: still shared)
    assert plain._rare is _META_DEFAULTS
    plain.turn = 2
    assert (
        plain._rare is not _META_DEFAULTS and plain.turn == 2 and other.turn == 0 and _META_DEFAULTS.turn == 0
    )
    assert plain.copy() == plain and plain.copy()._rare is not plain._rare
    assert dataclasses.replace(plain, trace="t").trace == "t" and plain.trace is None
    assert plain != dataclasses.replace(plain, first_seq=3)
    assert "turn=2" in repr(plain) and dataclasses.asdict(plain)["turn"] == 2
    made = StreamMeta(**{name: getattr(plain, name) for name in names})
    assert made == plain and made.pending_inputs is plain.pending_inputs


# ----------------------------------------------------------------------------- kept cold
async def _finished(store: MemoryStore, stream_id: str, events: int = 3) -> None:
    await store.open_with(
        meta(stream_id),
        60,
        [(seq, b"%s:%d" % (stream_id.encode(), seq)) for seq in range(1, events + 1)],
        max_events=BIG,
        max_bytes=BIG,
        final_seq=events,
        retain_s=60,
    )


async def test_a_finished_stream_goes_cold_untracked_and_reads_back_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import dataclasses

    from mcp_resume_asgi.store import memory

    monkeypatch.setattr(memory, "COLD_AFTER_S", 0.0)
    store = MemoryStore()
    await _finished(store, "done")
    await store.update_stream("done", delivered_seq=3, attach_gen=2)
    entry = store._streams["done"]
    entry.meta.trace = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"  # (a rarely set field too)
    before = dataclasses.asdict(entry.meta)
    await store.create_stream(meta("next"), ttl_s=60)  # (what runs the cooling)
    assert "done" not in store._streams and "done" in store._cold
    gc.collect()
    assert not gc.is_tracked(store._cold._by_id) and not gc.is_tracked(store._session_streams["sess"])
    assert store.stream_count == 2 and (await store.usage()).bytes == len(b"done:1") * 3
    assert await store.read("done", 1) == [(2, b"done:2"), (3, b"done:3")]  # made an entry again
    got = await store.get_stream("done")
    assert got is not None and dataclasses.asdict(got) == before
    assert await store.delete_session("sess") == ["done", "next"]


async def test_a_running_waited_on_or_asking_stream_stays_an_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    from mcp_resume_asgi.store import memory

    monkeypatch.setattr(memory, "COLD_AFTER_S", 0.0)
    store = MemoryStore()
    await store.create_stream(meta("running"), ttl_s=60)
    await _finished(store, "asking")
    await store.update_stream("asking", pending_inputs=["input-1"])
    await _finished(store, "waited")
    async with anyio.create_task_group() as tg:
        tg.start_soon(store.wait, "waited", 3, 5.0)
        await anyio.wait_all_tasks_blocked()
        await store.create_stream(meta("other"), ttl_s=60)
        assert set(store._streams) == {"running", "asking", "waited", "other"} and not store._cold
        await store.append("waited", [(4, b"late")], max_events=BIG, max_bytes=BIG)
    got = await store.get_stream("asking")
    assert got is not None and got.pending_inputs == ["input-1"]


async def test_cold_streams_leave_first_and_are_trimmed_first(monkeypatch: pytest.MonkeyPatch) -> None:
    from mcp_resume_asgi.store import memory

    monkeypatch.setattr(memory, "COLD_AFTER_S", 0.0)
    store = MemoryStore(max_streams=3, max_bytes=100)
    await _finished(store, "old", events=4)  # 4 x 5 bytes
    await store.create_stream(meta("live"), ttl_s=60)
    assert list(store._cold) == ["old"]
    await store.append("live", [(1, b"x" * 90)], max_events=BIG, max_bytes=BIG)  # over the budget
    assert (await store.usage()).bytes <= 100
    kept = await store.get_stream("old")
    assert kept is not None and kept.first_seq > 1  # its oldest events went first
    await _finished(store, "old2")
    await store.create_stream(meta("a"), ttl_s=60)  # cools old2: old and old2 cold, "live" and "a"
    await store.create_stream(meta("b"), ttl_s=60)  # full: a finished stream leaves
    assert store.stream_count == 3 and await store.get_stream("live") is not None


async def test_a_cold_stream_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    from mcp_resume_asgi.store import memory

    monkeypatch.setattr(memory, "COLD_AFTER_S", 0.0)
    store = MemoryStore()
    await store.open_with(
        meta("brief"), 60, [(1, b"e")], max_events=BIG, max_bytes=BIG, final_seq=1, retain_s=0.05
    )
    await store.create_stream(meta("other"), ttl_s=60)
    assert "brief" in store._cold
    await anyio.sleep(0.1)
    assert await store.get_stream("brief") is None and "brief" not in store._cold
    assert (await store.usage()).bytes == 0 and await store.delete_session("sess") == ["other"]


async def test_many_cold_streams_leave_the_collector_nothing_to_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thousands of finished streams kept cold are bytes in dicts the collector does not track,
    and stay so as more go cold; their expiries are no rows in the entries' heap."""
    from mcp_resume_asgi.store import memory

    monkeypatch.setattr(memory, "COLD_AFTER_S", 0.0)
    store = MemoryStore()
    for i in range(3000):
        await _finished(store, f"s{i}", events=2)
    await store.create_stream(meta("live"), ttl_s=60)
    assert len(store._cold) == 3000 and set(store._streams) == {"live"}
    assert len(store._expiry) <= 4 * len(store._streams) + 1024 + 1
    gc.collect()
    containers = (store._cold._by_id, store._cold._order, store._session_streams["sess"])
    assert not any(gc.is_tracked(c) for c in containers)
    await _finished(store, "one-more", events=2)
    await store.create_stream(meta("live2"), ttl_s=60)  # (what cools "one-more")
    assert "one-more" in store._cold and not any(gc.is_tracked(c) for c in containers)
    assert await store.read("s7", 0) == [(1, b"s7:1"), (2, b"s7:2")]


async def test_a_cold_stream_kept_for_less_expires_before_those_that_went_cold_before_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mcp_resume_asgi.store import memory

    monkeypatch.setattr(memory, "COLD_AFTER_S", 0.0)
    store = MemoryStore()
    await _finished(store, "long")  # kept 60 s
    await store.open_with(
        meta("brief"), 60, [(1, b"e")], max_events=BIG, max_bytes=BIG, final_seq=1, retain_s=0.05
    )
    await store.create_stream(meta("other"), ttl_s=60)
    assert "long" in store._cold and "brief" in store._cold
    await anyio.sleep(0.1)
    assert (await store.usage()).streams == 2  # (the sweep dropped "brief" without a read)
    assert "brief" not in store._cold and await store.get_stream("long") is not None
    assert await store.delete_session("sess") == ["long", "other"]
