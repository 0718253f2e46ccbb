"""What a call costs the Redis store on its hot path, seen from Redis (its `MONITOR`).

A call's end records where its connection stopped (`detached`): a compare-and-set on the
stream's `attach_gen` whose caller wants no record back, so the store reads none (no `HGETALL`,
nothing decoded), and the same when the store is wrapped for telemetry (`ObservedStore` passes
`detached` on to the store's own). A request's entry in the index of running requests costs
no script of its own: the scripts that open its record and record its answer write it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from urllib.parse import urlsplit

import pytest

from mcp_resume_asgi.store import Listing, RedisStore, Store, keys
from mcp_resume_asgi.store.observed import ObservedStore
from mcp_resume_asgi.telemetry import Telemetry
from tests.support.stores import redis_prefix, redis_url, require_redis
from tests.test_store_contract import meta

pytestmark = pytest.mark.anyio


class Monitor:
    """`MONITOR` on a connection of its own: the commands Redis runs (scripts' included) that
    name a key under `prefix`."""

    def __init__(self, prefix: str) -> None:
        parts = urlsplit(redis_url())
        self.sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379))
        self.sock.sendall(b"MONITOR\r\n")
        assert self.sock.recv(5) == b"+OK\r\n"
        self.prefix = prefix.encode()
        self.lines: list[bytes] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = self.sock.recv(1 << 16)
            except OSError:
                return
            if not chunk:
                return
            buffer += chunk
            *lines, buffer = buffer.split(b"\r\n")
            self.lines += [line for line in lines if self.prefix in line]

    def commands(self, marker: bytes) -> list[str]:
        """The commands seen from the first naming `marker` on (the monitor is asynchronous:
        a command of the caller's, sent after the ones watched, marks their end)."""
        deadline = 500
        while not any(marker in line for line in self.lines) and deadline:
            threading.Event().wait(0.01)
            deadline -= 1
        names = [
            line.partition(b"] ")[2].split(b" ", 1)[0].strip(b'"').decode().upper() for line in self.lines
        ]
        return names

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(5)


async def _detach_seen(store: Store, raw: RedisStore, prefix: str) -> list[str]:
    await raw.create_stream(meta("s1"), ttl_s=60)
    attached = await store.attach("s1", 100.0)
    assert attached is not None
    monitor = Monitor(prefix)
    try:
        await store.detached("s1", attached.attach_gen, last_contact=101.0, delivered_seq=0)
        await raw.get_key("end-marker")
        return monitor.commands(b"end-marker")
    finally:
        monitor.close()


@pytest.mark.parametrize("observed", [False, True], ids=["plain", "observed"])
async def test_detached_reads_no_record_back(observed: bool) -> None:
    require_redis()
    prefix = redis_prefix("hot-path")
    raw = RedisStore(redis_url(), prefix=prefix)
    store: Store = ObservedStore(raw, Telemetry()) if observed else raw
    try:
        seen = await _detach_seen(store, raw, prefix)
        assert "EVALSHA" in seen and "HSET" in seen, seen
        assert "HGETALL" not in seen, f"detached read the record back: {seen}"
        record = await raw.get_stream("s1")
        assert record is not None
        assert (record.attached, record.last_contact, record.delivered_seq) == (False, 101.0, 0)
        # a connection of an older generation changes nothing
        assert await raw.attach("s1", 102.0) is not None
        await store.detached("s1", record.attach_gen, last_contact=103.0, delivered_seq=0)
        again = await raw.get_stream("s1")
        assert again is not None and again.attached and again.last_contact == 102.0
    finally:
        await raw.clear()
        await raw.aclose()


async def test_the_index_of_running_requests_costs_no_call_of_its_own() -> None:
    """On one instance a request's entry in the index of running requests is written by the
    scripts its stream runs anyway: listed by the one that opens its record (`open_with`'s
    `listing`), taken out by the one that records its answer (`append_final`'s `unlist`)."""
    require_redis()
    prefix = redis_prefix("hot-path")
    store = RedisStore(redis_url(), prefix=prefix)
    try:
        listing = Listing(keys.RUNNING_INDEX, time.time() + 60, 10)
        # The layout known and the scripts loaded first: no INFO, no NOSCRIPT retried below.
        await store.open_with(meta("s0"), 60, [], max_events=10, max_bytes=1000, listing=listing)
        await store.index_page(keys.RUNNING_INDEX)
        await store.append_final(
            "s0", [], max_events=10, max_bytes=1000, final_seq=0, unlist=keys.RUNNING_INDEX
        )
        monitor = Monitor(prefix)
        try:
            assert await store.open_with(
                meta("s1"), 60, [(1, b"one")], max_events=10, max_bytes=1000, listing=listing
            )
            assert [m for m, _ in await store.index_page(keys.RUNNING_INDEX)] == ["s1"]
            await store.get_key("listed-marker")
            listed = monitor.commands(b"listed-marker")
            assert await store.append_final(
                "s1", [(2, b"two")], max_events=10, max_bytes=1000, final_seq=2, unlist=keys.RUNNING_INDEX
            )
            await store.get_key("end-marker")
            seen = monitor.commands(b"end-marker")
        finally:
            monitor.close()
        assert listed.count("EVALSHA") == 2, f"open_with, then index_page: {listed}"
        assert "ZADD" in listed
        assert seen.count("EVALSHA") == 3 and "ZREM" in seen[len(listed) :], seen
        assert await store.index_count(keys.RUNNING_INDEX) == 0
    finally:
        await store.clear()
        await store.aclose()
