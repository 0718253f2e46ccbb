"""Where `RedisStore` keeps each key (`store/redis_layout.py`), without a Redis: one
instance's names untouched, a cluster's partitions each one slot, in even ranges of slots,
the same on every node."""

from __future__ import annotations

import pytest

pytest.importorskip("redis")

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from mcp_resume_asgi.store.redis_layout import RedisLayout


def test_one_instance_has_one_partition_under_the_prefix_itself() -> None:
    layout = RedisLayout("p:", cluster=False, partitions=16)
    assert layout.partitions == 1 and list(layout.prefixes) == ["p:"]
    assert {layout.of_stream("s"), layout.of_session("sess"), layout.of_key("k")} == {"p:"}
    assert layout.share(1000) == 1000


def test_a_clusters_partitions_are_one_slot_each_in_even_ranges() -> None:
    layout = RedisLayout("p:", cluster=True, partitions=16)
    width = REDIS_CLUSTER_HASH_SLOTS // 16
    for index, part in enumerate(layout.prefixes):
        slots = {key_slot(f"{part}{name}".encode()) for name in ("s:a:m", "s:b:e", "g:total", "ss:x", "k:y")}
        assert len(slots) == 1
        assert index * width <= slots.pop() < (index + 1) * width
    assert layout.share(1000) == 62


def test_every_node_places_a_name_alike_and_a_task_with_its_stream() -> None:
    one, other = (RedisLayout("p:", cluster=True, partitions=16) for _ in range(2))
    names = [f"stream-{i}" for i in range(200)]
    assert [one.of_stream(n) for n in names] == [other.of_stream(n) for n in names]
    assert len({one.of_stream(n) for n in names}) == 16  # all partitions used
    assert one.of_key("task:stream-7") == one.of_stream("stream-7")


def test_a_bound_below_the_partitions_is_refused() -> None:
    layout = RedisLayout("p:", cluster=True, partitions=16)
    layout.check(max_streams=16)
    with pytest.raises(ValueError, match="max_keys=15 is below partitions=16"):
        layout.check(max_keys=15)
