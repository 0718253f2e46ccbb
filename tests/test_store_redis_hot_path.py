"""What a call costs the Redis store on its hot path, seen from Redis (its `MONITOR`).

A call's end records where its connection stopped (`detached`): a compare-and-set on the
stream's `attach_gen` whose caller wants no record back, so the store reads none (no `HGETALL`,
nothing decoded), and the same when the store is wrapped for telemetry (`ObservedStore` passes
`detached` on to the store's own).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from urllib.parse import urlsplit

import pytest

from mcp_resume_asgi.store import RedisStore, Store
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
