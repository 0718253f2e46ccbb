"""`RedisStore` on a Redis Cluster: what the contract suite (`tests/test_store_contract.py`,
run there on the cluster too) does not show - that the store finds the cluster by itself,
spreads over its primaries with every partition in one slot, keeps its bounds in shares
(`store/redis_layout.py`), publishes on sharded channels, and leaves one instance's key
names as they were."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import AsyncIterator

import anyio
import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from mcp_resume_asgi.store import Listing, RedisStore, StoreFullError, keys
from mcp_resume_asgi.store.redis_layout import RedisLayout
from tests.support.redis_server import RedisClusterServers
from tests.support.stores import redis_prefix, redis_url, require_redis
from tests.support.timing import scaled
from tests.test_store_contract import append, events, meta

pytestmark = pytest.mark.anyio


@pytest.fixture
async def cluster_client(redis_cluster_url: str) -> AsyncIterator[RedisCluster]:
    client = RedisCluster.from_url(redis_cluster_url)
    await client.initialize()
    try:
        yield client
    finally:
        await client.aclose()


async def _keys(client: RedisCluster, prefix: str) -> list[bytes]:
    return [key async for key in client.scan_iter(match=prefix + "*")]


async def test_a_url_of_any_node_even_a_replica_is_found_to_be_a_cluster(
    redis_cluster: RedisClusterServers, cluster_client: RedisCluster
) -> None:
    replicas = [
        node
        for node in redis_cluster.nodes
        if b"role:slave" in redis_cluster._ask(node, "info", "replication")
    ]
    assert replicas
    prefix = redis_prefix("cluster-found")
    store = RedisStore(replicas[0].url, prefix=prefix)
    try:
        for i in range(20):
            await store.create_stream(meta(f"s{i}"), ttl_s=60)
            await append(store, f"s{i}", events(1, 3))
        assert (await store.usage()).streams == 20
        assert [seq for seq, _ in await store.read("s7", 0)] == [1, 2, 3]
        assert len(await _keys(cluster_client, prefix)) >= 20
    finally:
        await store.clear()
        await store.aclose()
    assert await _keys(cluster_client, prefix) == []


async def test_a_cluster_client_is_taken_as_it_is(cluster_client: RedisCluster) -> None:
    prefix = redis_prefix("cluster-client")
    store = RedisStore(client=cluster_client, prefix=prefix)
    try:
        await store.open_with(meta("a"), 60, events(1, 2), max_events=10, max_bytes=1000, final_seq=2)
        got = await store.read_key_and_stream("task:a", "a")
        assert got.meta is not None and got.final == events(2, 2)[0][1]
    finally:
        await store.clear()
    assert await cluster_client.ping()  # the caller's client: not closed by the store


async def test_every_partition_is_one_slot_and_the_partitions_spread_over_the_primaries(
    cluster_client: RedisCluster,
) -> None:
    prefix = redis_prefix("cluster-spread")
    store = RedisStore(client=cluster_client, prefix=prefix)
    try:
        for i in range(64):
            await store.create_stream(meta(f"s{i}", session_id=f"sess{i % 5}"), ttl_s=60)
            await append(store, f"s{i}", events(1, 2))
            await store.set_key(f"k{i}", "v", ttl_s=60)
        slots: dict[bytes, set[int]] = defaultdict(set)
        for key in await _keys(cluster_client, prefix):
            tag = key[len(prefix) :].split(b"}", 1)[0]
            slots[tag].add(cluster_client.keyslot(key))
        assert len(slots) == store.partitions == 16
        assert all(len(found) == 1 for found in slots.values()), slots
        owners = {cluster_client.get_node_from_key(f"{{{tag.decode()[1:]}}}").name for tag in slots}
        assert len(owners) == 3  # every primary holds some of the store
    finally:
        await store.clear()


async def test_each_partition_keeps_its_share_of_a_bound_and_the_whole_never_exceeds_it(
    cluster_client: RedisCluster,
) -> None:
    prefix = redis_prefix("cluster-bounds")
    store = RedisStore(client=cluster_client, prefix=prefix, partitions=4, max_streams=8)
    layout = RedisLayout(prefix, cluster=True, partitions=4)
    try:
        refused: list[str] = []
        held: dict[str, int] = defaultdict(int)
        for i in range(40):
            stream_id = f"s{i}"
            try:
                await store.create_stream(meta(stream_id), ttl_s=60)  # running: never evicted
            except StoreFullError:
                refused.append(stream_id)
                assert held[layout.of_stream(stream_id)] == 2  # its partition's share is full
            else:
                held[layout.of_stream(stream_id)] += 1
            assert (await store.usage()).streams <= 8
        assert (await store.usage()).streams == 8
        assert refused
    finally:
        await store.clear()


async def test_the_index_of_running_requests_is_kept_by_partition(cluster_client: RedisCluster) -> None:
    """On a cluster the index a stream's scripts write (`keys.RUNNING_INDEX`) is split as the
    streams are: each stream's entry is in its partition's slot, written by its own script; a
    page reads every partition, in the order one key keeps (by expiry, then member), a count adds
    them up, and each partition keeps its share of the cap."""
    prefix = redis_prefix("cluster-running")
    store = RedisStore(client=cluster_client, prefix=prefix, partitions=4)
    layout = RedisLayout(prefix, cluster=True, partitions=4)
    try:
        base = time.time() + 60
        expected: list[tuple[str, float]] = []
        for i in range(12):
            stream_id, until = f"s{i:02d}", base + (i % 5)
            listing = Listing(keys.RUNNING_INDEX, until, 1000)
            assert await store.open_with(
                meta(stream_id), 60, events(1, 1), max_events=10, max_bytes=10_000, listing=listing
            )
            expected.append((stream_id, until))
        expected.sort(key=lambda x: (x[1], x[0]))
        names = {key.decode() for key in await _keys(cluster_client, prefix)}
        assert f"{prefix}i:{keys.RUNNING_INDEX}" not in names
        assert {name for name in names if name.endswith(f"i:{keys.RUNNING_INDEX}")} == {
            f"{layout.of_stream(stream_id)}i:{keys.RUNNING_INDEX}" for stream_id, _ in expected
        }
        assert await store.index_count(keys.RUNNING_INDEX) == 12
        paged: list[tuple[str, float]] = []
        after: tuple[float, str] | None = None
        while page := await store.index_page(keys.RUNNING_INDEX, after=after, limit=5):
            paged += page
            after = (page[-1][1], page[-1][0])
        assert [m for m, _ in paged] == [m for m, _ in expected]
        assert all(
            at == pytest.approx(until, abs=1e-3) for (_, at), (_, until) in zip(paged, expected, strict=True)
        )
        assert await store.append_final(
            "s03", events(2, 2), max_events=10, max_bytes=10_000, final_seq=2, unlist=keys.RUNNING_INDEX
        )
        await store.index_remove(keys.RUNNING_INDEX, "s04")
        left = [m for m, _ in await store.index_page(keys.RUNNING_INDEX, limit=100)]
        assert left == [m for m, _ in expected if m not in ("s03", "s04")]
        for member in left:
            await store.index_remove(keys.RUNNING_INDEX, member)
        assert await store.index_count(keys.RUNNING_INDEX) == 0
        # A cap of 4 over 4 partitions: one member a partition.
        held: dict[str, int] = defaultdict(int)
        for i in range(12):
            member = f"c{i}"
            if await store.index_add(keys.RUNNING_INDEX, member, base, cap=4):
                held[layout.of_stream(member)] += 1
        assert len(held) > 1 and all(count == 1 for count in held.values()), held
    finally:
        await store.clear()


async def test_a_bound_below_the_partitions_is_refused(cluster_client: RedisCluster) -> None:
    with pytest.raises(ValueError, match="max_streams=8 is below partitions=16"):
        RedisStore(client=cluster_client, prefix="x:", max_streams=8)
    RedisStore(client=cluster_client, prefix="x:", max_streams=8, partitions=8)


async def test_publish_is_sharded(cluster_client: RedisCluster) -> None:
    prefix = redis_prefix("cluster-pubsub")
    store = RedisStore(client=cluster_client, prefix=prefix)
    channel = f"{prefix}ch:node:a".encode()
    async with store.subscribe("node:a") as inbox:
        owner = cluster_client.get_node_from_key(channel)
        shard_channels = await cluster_client.pubsub_shardchannels(target_nodes=owner)
        assert channel in shard_channels
        assert await cluster_client.pubsub_channels(target_nodes=RedisCluster.ALL_NODES) == []
        assert await store.publish("node:a", b"hello") == 1
        with anyio.fail_after(10):
            assert await inbox.__anext__() == b"hello"


async def test_one_instances_key_names_are_unchanged() -> None:
    """The layout of a single Redis is as before the cluster: data written then is found."""
    require_redis()
    prefix = redis_prefix("single-names")
    store = RedisStore(redis_url(), prefix=prefix, partitions=16)
    plain = aioredis.Redis.from_url(redis_url())
    try:
        await store.create_stream(meta("a", session_id="sess"), ttl_s=60)
        await append(store, "a", events(1, 1))
        await store.update_stream("a", attached=False)  # (a change without events: notified on `s:a:n`)
        await store.set_key("task:a", "v", ttl_s=60)
        names = sorted([key.decode()[len(prefix) :] async for key in plain.scan_iter(match=prefix + "*")])
        assert names == [
            "g:exp",
            "g:hold",
            "g:keys",
            "g:lru",
            "g:nb",
            "g:tick",
            "g:total",
            "k:task:a",
            "s:a:e",
            "s:a:m",
            "s:a:n",
            "ss:sess",
        ]
    finally:
        await store.clear()
        await store.aclose()
        await plain.aclose()


async def test_a_command_that_timed_out_is_not_sent_again(
    redis_cluster_url: str, cluster_client: RedisCluster
) -> None:
    """As on one instance (`redis_connections._RECONNECT`): a script that timed out may still
    run, so the store's cluster client does not send it again (redis-py's would)."""
    from redis.exceptions import TimeoutError as RedisTimeoutError

    prefix = redis_prefix("cluster-timeout")
    store = RedisStore(f"{redis_cluster_url}?socket_timeout=0.1", prefix=prefix, partitions=1)
    counter = f"{prefix}counter"
    # Counts its runs, then keeps the node busy past the client's socket timeout.
    slow = "redis.call('INCR', KEYS[1]) local t0 = redis.call('TIME')[1] + 1 while tonumber(redis.call('TIME')[1]) <= t0 do end return 1"
    try:
        with anyio.fail_after(
            scaled(20)
        ):  # the store finds the cluster (a quick call may time out under load)
            while True:
                try:
                    await store.usage()
                    break
                except RedisTimeoutError:
                    await anyio.sleep(0.05)
        with pytest.raises(RedisTimeoutError):
            await store._client.eval(slow, 1, counter)
        with anyio.fail_after(10):
            while await cluster_client.get(counter) is None:  # the one run ends
                await anyio.sleep(0.05)
        assert await cluster_client.get(counter) == b"1"
    finally:
        await cluster_client.delete(counter)
        await store.aclose()


async def test_more_concurrent_calls_than_connections_wait_their_turn(
    redis_cluster_url: str, cluster_client: RedisCluster
) -> None:
    """redis-py's cluster client refuses a command beyond a node's `max_connections`
    (`MaxConnectionsError`); the store's own client queues it, as the pool of one
    instance does, so a burst of requests is slower, never refused."""
    prefix = redis_prefix("cluster-turns")
    store = RedisStore(redis_cluster_url, prefix=prefix, max_connections=2)
    try:
        async with anyio.create_task_group() as tg:
            for i in range(60):
                tg.start_soon(store.set_key, f"k{i}", "v", 60)
        assert [await store.get_key(f"k{i}") for i in range(60)] == ["v"] * 60
    finally:
        await store.clear()
        await store.aclose()
    assert await _keys(cluster_client, prefix) == []


async def test_writes_refused_for_want_of_replicas_are_an_outage() -> None:
    """`min-replicas-to-write` with its replica gone: the primary answers `NOREPLICAS` to every
    write, which the store reports as an outage (served unresumable meanwhile), not as a refusal."""
    from redis.exceptions import ResponseError

    from tests.support.redis_server import RedisServer, require_binary

    require_binary()
    server = RedisServer(name="noreplicas", extra_args=("--min-replicas-to-write", "1"))
    server.start()
    store = RedisStore(server.url, prefix=redis_prefix("noreplicas"))
    try:
        with pytest.raises(ResponseError) as refused:
            await store.create_stream(meta("s1"), ttl_s=60)
        assert "NOREPLICAS" in str(refused.value)
        assert store.is_unavailable_error(refused.value)
        assert not store.is_unavailable_error(ResponseError("ERR something else"))
        # redis-py 8.1's cluster client handing out a connection torn down under it (a failover)
        torn = AttributeError("'NoneType' object has no attribute 'writelines'")
        assert store.is_unavailable_error(torn)
        assert not store.is_unavailable_error(AttributeError("'NoneType' object has no attribute 'x'"))
    finally:
        await store.aclose()
        server.stop()


@pytest.mark.slow
async def test_a_subscription_comes_back_after_its_shards_primary_failed_over() -> None:
    """The primary of a channel's shard SIGKILLed, its replica promoted: subscribing again works
    (redis-py refreshes its slot map after a failed command, not after a failed subscribe - a
    node's cluster link would dial the dead primary for good)."""
    from tests.support.redis_server import require_binary
    from tests.support.timing import scaled

    require_binary()
    servers = RedisClusterServers(name="sub-failover")
    servers.start()
    prefix = redis_prefix("sub-failover")
    store = RedisStore(servers.url, prefix=prefix)
    probe = RedisCluster.from_url(servers.url)
    try:
        await probe.initialize()
        by_port = {node.port: i for i, node in enumerate(servers.nodes)}
        owners = {
            channel: by_port[probe.get_node_from_key(f"{prefix}ch:{channel}").port]
            for channel in (f"relay{i}" for i in range(40))
        }
        channel, victim = next((c, i) for c, i in owners.items() if i != 0)  # not the URL's node
        async with store.subscribe(channel) as inbox:
            await store.publish(channel, b"before")
            assert await anext(inbox) == b"before"
        servers.nodes[victim].kill()
        await anyio.to_thread.run_sync(servers.wait_failed_over, victim, scaled(30))
        failures: list[str] = []
        with anyio.fail_after(scaled(20)):
            while True:
                try:
                    async with store.subscribe(channel) as inbox:
                        await store.publish(channel, b"after")
                        assert await anext(inbox) == b"after"
                        break
                except Exception as exc:
                    if not store.is_unavailable_error(exc):
                        raise
                    failures.append(type(exc).__name__)
                    await anyio.sleep(0.1)
        assert len(failures) <= 2, failures
    finally:
        await probe.aclose()
        await store.aclose()
        servers.stop()
