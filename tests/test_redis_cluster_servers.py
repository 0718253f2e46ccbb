"""The suite's Redis Cluster (`tests/support/redis_server.py`): three primaries, a replica
each, every slot served, and nothing left behind once it is stopped."""

from __future__ import annotations

import socket

import pytest
from redis.cluster import RedisCluster

from tests.support.redis_server import RedisClusterServers, require_binary


def test_a_cluster_starts_serves_every_slot_and_leaves_nothing_behind() -> None:
    require_binary()
    cluster = RedisClusterServers(name="cluster-test")
    cluster.start()
    try:
        client = RedisCluster.from_url(cluster.url)
        try:
            assert len(client.get_primaries()) == 3
            nodes = client.cluster_nodes()
            assert sum("slave" in node["flags"] for node in nodes.values()) == 3
            assert sum("master" in node["flags"] for node in nodes.values()) == 3
            info = client.cluster_info(target_nodes=RedisCluster.RANDOM)
            assert int(info["cluster_slots_assigned"]) == 16384
            for key in ("a", "b", "c", "d", "e", "f"):
                client.set(key, key)
                assert client.get(key) == key.encode()
        finally:
            client.close()
    finally:
        cluster.stop()
    for node in cluster.nodes:
        assert node.proc is not None and node.proc.poll() is not None
        assert not node.dir.exists()
        with pytest.raises(OSError):  # refused: nothing listens there any more
            socket.create_connection(("127.0.0.1", node.port), timeout=1).close()
