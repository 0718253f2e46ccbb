"""The store's bounded, self-expiring indexes (`index_add`, `index_remove`, `index_page`,
`index_count`), one suite over `MemoryStore` and `RedisStore`.

The stores come from the contract suite's `make` fixture: the suite's own Redis
(`tests/support/stores.py`), skipped without one unless `CI=true`; a key prefix per test.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from mcp_resume_asgi.store import MemoryStore, Store
from mcp_resume_asgi.store.index_bounds import MAX_INDEX_MEMBER_BYTES, MAX_INDEX_NAME_BYTES, MAX_INDEX_PAGE
from tests.support.timing import scaled
from tests.test_store_contract import Factory, make  # noqa: F401 - the parametrised store fixture

pytestmark = pytest.mark.anyio

CAP = 1_000_000  # a cap that never binds


@pytest.fixture
async def store(make: Factory) -> Store:  # noqa: F811 - the imported fixture
    return await make()


def later(seconds: float = 600.0) -> float:
    return time.time() + seconds


async def test_add_count_page_and_remove(store: Store) -> None:
    base = later()
    assert await store.index_count("idx") == 0 and await store.index_page("idx") == []
    for member, offset in (("b", 2.0), ("a", 1.0), ("c", 3.0)):
        assert await store.index_add("idx", member, base + offset, cap=CAP) is True
    assert await store.index_count("idx") == 3
    assert await store.index_page("idx") == [("a", base + 1.0), ("b", base + 2.0), ("c", base + 3.0)]
    await store.index_remove("idx", "b")
    await store.index_remove("idx", "b")  # absent: nothing happens
    await store.index_remove("other", "x")
    assert await store.index_page("idx") == [("a", base + 1.0), ("c", base + 3.0)]
    assert await store.index_count("other") == 0


async def test_adding_a_member_again_moves_its_expiry_and_counts_it_once(store: Store) -> None:
    base = later()
    await store.index_add("idx", "x", base + 5, cap=2)
    await store.index_add("idx", "y", base + 6, cap=2)
    assert await store.index_add("idx", "x", base + 9, cap=2) is True, "a member already in is not refused"
    assert await store.index_count("idx") == 2
    assert await store.index_page("idx") == [("y", base + 6), ("x", base + 9)]


async def test_equal_expiries_are_ordered_by_the_members_bytes(store: Store) -> None:
    at = later()
    members = ["z", "é", "a", "aa", "B", "日本", "a b"]
    for member in members:
        await store.index_add("idx", member, at, cap=CAP)
    assert [m for m, _ in await store.index_page("idx")] == sorted(members, key=str.encode)


async def test_the_cap_refuses_new_members_until_one_leaves(store: Store) -> None:
    base = later()
    for i in range(3):
        assert await store.index_add("tasks:p", f"m{i}", base + i, cap=3)
    assert await store.index_add("tasks:p", "m3", base, cap=3) is False
    assert await store.index_count("tasks:p") == 3
    assert [m for m, _ in await store.index_page("tasks:p")] == ["m0", "m1", "m2"]
    assert await store.index_add("tasks:q", "m3", base, cap=3), "another index has its own cap"
    await store.index_remove("tasks:p", "m1")
    assert await store.index_add("tasks:p", "m3", base, cap=3) is True
    assert await store.index_add("tasks:p", "m4", base, cap=4) is True, "the cap is the caller's, per call"


@pytest.mark.slow
async def test_the_cap_holds_under_concurrent_adds_from_two_handles(make: Factory) -> None:  # noqa: F811
    first = await make()
    handles = [first, await make(peer=first)]
    results: list[bool] = []

    async def add(i: int) -> None:
        results.append(await handles[i % 2].index_add("busy", f"member-{i}", later(), cap=25))

    async with anyio.create_task_group() as tg:
        for i in range(200):
            tg.start_soon(add, i)
    assert len(results) == 200 and results.count(True) == 25
    assert await first.index_count("busy") == 25 == await handles[1].index_count("busy")
    assert len(await handles[1].index_page("busy")) == 25


@pytest.mark.slow
async def test_expired_members_leave_and_free_the_cap(store: Store) -> None:
    short = scaled(0.4)  # the cap is still full when "third" is refused, even on a loaded machine
    await store.index_add("idx", "short", time.time() + short, cap=2)
    await store.index_add("idx", "long", later(), cap=2)
    assert await store.index_add("idx", "third", later(), cap=2) is False
    await anyio.sleep(short + 0.2)
    assert await store.index_count("idx") == 1
    assert [m for m, _ in await store.index_page("idx")] == ["long"]
    assert await store.index_add("idx", "third", later(), cap=2) is True


async def test_an_expiry_already_past_leaves_the_member_out(store: Store) -> None:
    await store.index_add("idx", "kept", later(), cap=CAP)
    await store.index_add("idx", "gone", later(), cap=CAP)
    assert await store.index_add("idx", "gone", time.time() - 1, cap=CAP) is True
    assert await store.index_add("idx", "never", time.time() - 1, cap=CAP) is True
    assert [m for m, _ in await store.index_page("idx")] == ["kept"]


async def test_pages_follow_each_other_even_when_the_last_member_left(store: Store) -> None:
    base = later()
    expected = []
    for i in range(25):
        at = base + (i // 2)  # pairs of equal expiries
        await store.index_add("idx", f"m{i:02d}", at, cap=CAP)
        expected.append((f"m{i:02d}", at))
    seen: list[tuple[str, float]] = []
    removed: set[str] = set()
    after: tuple[float, str] | None = None
    while True:
        page = await store.index_page("idx", after=after, limit=7)
        if not page:
            break
        seen += page
        last_member, last_at = page[-1]
        after = (last_at, last_member)
        await store.index_remove("idx", last_member)  # a cursor need not still be there
        removed.add(last_member)
    assert seen == expected and len(removed) == 4
    left = [(m, at) for m, at in expected if m not in removed]
    assert await store.index_page("idx", after=(base - 100, "zzz"), limit=3) == left[:3]
    assert await store.index_page("idx", after=(left[5][1], left[5][0]), limit=2) == left[6:8]


@pytest.mark.slow
async def test_limit_is_capped(store: Store) -> None:
    base = later()
    for i in range(MAX_INDEX_PAGE + 5):
        await store.index_add("big", f"{i:05d}", base, cap=CAP)
    page = await store.index_page("big", limit=10 * MAX_INDEX_PAGE)
    assert len(page) == MAX_INDEX_PAGE and page[0][0] == "00000"
    assert await store.index_count("big") == MAX_INDEX_PAGE + 5


@pytest.mark.parametrize(
    ("call", "args"),
    [
        ("index_add", ("x" * (MAX_INDEX_NAME_BYTES + 1), "m")),
        ("index_add", ("i", "é" * (MAX_INDEX_MEMBER_BYTES // 2 + 1))),
        ("index_add", ("", "m")),
        ("index_add", ("i", "")),
        ("index_add", ("i", "\ud800")),
        ("index_add", ("i", "m", float("nan"))),
        ("index_add", ("i", "m", float("inf"))),
        ("index_add", ("i", "m", None, 0)),
        ("index_remove", ("i", "x" * (MAX_INDEX_MEMBER_BYTES + 1))),
        ("index_count", ("x" * (MAX_INDEX_NAME_BYTES + 1),)),
        ("index_page", ("i", 0)),
        ("index_page", ("i", 10, (float("nan"), "m"))),
        ("index_page", ("i", 10, (1.0, "m" * (MAX_INDEX_MEMBER_BYTES + 1)))),
    ],
)
async def test_unbounded_or_malformed_inputs_are_refused(
    store: Store, call: str, args: tuple[Any, ...]
) -> None:
    with pytest.raises(ValueError):
        if call == "index_add":
            index, member, *rest = args
            expires_at = rest[0] if rest and rest[0] is not None else later()
            await store.index_add(index, member, expires_at, cap=rest[1] if len(rest) > 1 else 5)
        elif call == "index_page":
            await store.index_page(args[0], limit=args[1], after=args[2] if len(args) > 2 else None)
        else:
            await getattr(store, call)(*args)
    # Names and members at the bound are fine.
    assert await store.index_add("n" * MAX_INDEX_NAME_BYTES, "m" * MAX_INDEX_MEMBER_BYTES, later(), cap=1)


@pytest.mark.slow
async def test_an_index_whose_members_all_expired_leaves_nothing_behind(store: Store) -> None:
    now = time.time()
    await store.index_add("brief", "a", now + 0.3, cap=CAP)
    await store.index_add("brief", "b", now + 0.5, cap=CAP)
    await store.index_add("brief", "c", now + 0.2, cap=CAP)
    await anyio.sleep(0.8)
    await store.index_add("another", "x", later(), cap=CAP)  # (the memory store sweeps on an add)
    memory = getattr(store, "_memory", store)  # (a SQLiteStore's memory: its file is swept apart)
    if isinstance(memory, MemoryStore):
        assert "brief" not in memory._indexes
        assert memory._index_members == 1
    else:
        assert await store._client.exists(f"{store.prefix}i:brief") == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("make", ["redis"], indirect=True)
async def test_redis_index_key_ttl_follows_its_latest_member(make: Factory) -> None:  # noqa: F811
    store = await make()
    client: Any = store._client  # type: ignore[attr-defined]
    key = f"{store.prefix}i:idx"  # type: ignore[attr-defined]
    now = time.time()
    for member, offset in (("a", 100), ("b", 300), ("c", 200)):
        await store.index_add("idx", member, now + offset, cap=CAP)
    assert 299_000 < await client.pttl(key) <= 300_000
    await store.index_remove("idx", "b")
    assert 199_000 < await client.pttl(key) <= 200_000
    await store.index_add("idx", "c", now + 50, cap=CAP)  # moved earlier
    assert 99_000 < await client.pttl(key) <= 100_000
    await store.index_remove("idx", "a")
    await store.index_remove("idx", "c")
    assert await client.exists(key) == 0


@pytest.mark.slow
async def test_the_memory_store_bounds_members_over_all_indexes() -> None:
    store = MemoryStore(max_index_members=3)
    assert await store.index_add("p", "1", later(), cap=CAP)
    assert await store.index_add("q", "1", later(), cap=CAP)
    short = scaled(0.3)
    assert await store.index_add("r", "1", time.time() + short, cap=CAP)
    assert await store.index_add("s", "1", later(), cap=CAP) is False
    assert await store.index_add("p", "1", later(1000), cap=CAP), "moving a member's expiry needs no room"
    await anyio.sleep(short + 0.2)
    assert await store.index_add("s", "1", later(), cap=CAP), "an expired member made room"
    await store.index_remove("s", "1")
    assert await store.index_add("t", "1", later(), cap=CAP)
    with pytest.raises(ValueError):
        MemoryStore(max_index_members=0)
