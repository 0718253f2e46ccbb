"""Slow readers: 200 clients that start a noisy tool call and stop reading cannot exhaust the server.

Each stalled client opens a raw TCP connection with a tiny receive buffer, POSTs
`burst` (many large log events), reads the response headers and a few bytes,
then stalls without closing. Meanwhile:

* the store never holds more than `MemoryStore(max_bytes=...)`, sampled all along;
* the process RSS grows by no more than the configured budget: the store's bytes,
  plus one write batch per stalled connection (bounded by the per-stream cap
  `Policy(max_bytes_per_stream=...)`, the most a connection can have in flight),
  plus a fixed allowance for the interpreter, sockets and clients - while the app
  produces several times that much;
* every burst runs to its end (a stalled reader does not block the app);
* a few normal clients complete calls with correct results, each within seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest

from mcp_resume_asgi import MemoryStore, Policy, resumable
from tests.apps.probe_app import PROBE, create_app
from tests.support.raw import RawSession
from tests.support.server import HOST, serve
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

STALLED = 200
SESSIONS = 50
"""The stalled clients share sessions (four calls each), so setting them up stays quick."""
BURST_COUNT = 20
BURST_SIZE = 30_000  # 30 kB per event: 600 kB per stalled call, 120 MB produced in all
STORE_MAX_BYTES = 8 * 1024 * 1024
POLICY = Policy(
    retry_ms=50,
    max_bytes_per_stream=64 * 1024,
    max_events_per_stream=1000,
    max_wait_s=30,
    keepalive_s=None,
)
SLACK_BYTES = 64 * 1024 * 1024
"""Interpreter, 400 sockets' bookkeeping, the test's own clients, allocator slack."""
RSS_BUDGET = STORE_MAX_BYTES + STALLED * POLICY.max_bytes_per_stream + SLACK_BYTES
PRODUCED = STALLED * BURST_COUNT * BURST_SIZE


class MeasuredStore(MemoryStore):
    """A `MemoryStore` that notes its byte total after every append (on the server's own loop;
    `append_final` is one too)."""

    peak = 0

    async def append(self, stream_id: str, events: Any, **caps: int) -> None:
        await super().append(stream_id, events, **caps)
        self.peak = max(self.peak, self.total_bytes)

    async def append_final(self, stream_id: str, events: Any, **kwargs: Any) -> bool:
        completed = await super().append_final(stream_id, events, **kwargs)
        self.peak = max(self.peak, self.total_bytes)
        return completed


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Stalled:
    """A client that POSTs a call, reads a little of the answer, then stops reading (and never closes)."""

    def __init__(self, port: int, session_id: str, tag: str, request_id: int) -> None:
        self.port = port
        self.request_id = request_id
        self.session_id = session_id
        self.tag = tag
        self.stream: anyio.abc.SocketStream | None = None
        self.head = b""

    async def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
        sock.settimeout(5)
        sock.connect((HOST, self.port))  # loopback: immediate
        self.stream = await anyio.abc.SocketStream.from_socket(sock)
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": self.request_id,  # unique within the session
                "method": "tools/call",
                "params": {
                    "name": "burst",
                    "arguments": {"count": BURST_COUNT, "size": BURST_SIZE, "tag": self.tag},
                },
            }
        ).encode()
        request = (
            f"POST /mcp HTTP/1.1\r\nhost: {HOST}:{self.port}\r\ncontent-type: application/json\r\n"
            f"accept: application/json, text/event-stream\r\nmcp-session-id: {self.session_id}\r\n"
            f"mcp-protocol-version: 2025-11-25\r\ncontent-length: {len(body)}\r\n\r\n"
        ).encode() + body
        await self.stream.send(request)
        with anyio.fail_after(scaled(10)):
            while b"\r\n\r\n" not in self.head or len(self.head) < 2048:
                self.head += await self.stream.receive(1024)
        # ...and from here on nobody reads this socket.

    async def aclose(self) -> None:
        if self.stream is not None:
            with contextlib.suppress(Exception):
                await self.stream.aclose()


@contextlib.asynccontextmanager
async def sampler(store: MemoryStore) -> AsyncIterator[dict[str, int]]:
    """Samples the store's bytes and the process RSS every 20 ms; yields the running maxima."""
    peaks = {"store": 0, "rss": 0}

    async def sample() -> None:
        while True:
            peaks["store"] = max(peaks["store"], store.total_bytes)
            peaks["rss"] = max(peaks["rss"], rss_bytes())
            await anyio.sleep(0.02)

    async with anyio.create_task_group() as tg:
        tg.start_soon(sample)
        try:
            yield peaks
        finally:
            tg.cancel_scope.cancel()


async def normal_client(client: httpx.AsyncClient, n: int, rounds: int, latencies: list[float]) -> None:
    """A well-behaved client: a few calls, each answered correctly and in time."""
    s = RawSession(client)
    await s.initialize()
    for i in range(rounds):
        calls = [
            (s.tool_call("echo", {"text": f"hi {n}.{i}"}), f"hi {n}.{i}"),
            (s.tool_call("progress", {"steps": 4, "seconds": 0.2}, progress=True), "done 4"),
            (s.tool_call("burst", {"count": 30, "size": 200, "tag": f"normal-{n}-{i}"}), "burst 30"),
        ]
        for call, expected in calls:
            started = time.monotonic()
            reply = await s.exchange("POST", "/mcp", call, timeout=10)
            latencies.append(time.monotonic() - started)
            messages = reply.messages()
            assert reply.status == 200, (reply.status, reply.raw[:200])
            final = messages[-1]
            assert final.get("id") == call["id"], final
            assert final["result"]["content"][0]["text"] == expected, final
            notes = messages[:-1]
            if call["params"]["name"] == "progress":
                assert [m["params"]["progress"] for m in notes] == [1, 2, 3, 4]
            if call["params"]["name"] == "burst":
                assert [m["params"]["data"]["i"] for m in notes] == list(range(30))


async def test_two_hundred_stalled_readers_stay_in_budget_and_others_are_served() -> None:
    PROBE.clear()
    store = MeasuredStore(max_bytes=STORE_MAX_BYTES)
    app = resumable(create_app(), policy=POLICY, store=store)
    begun = time.monotonic()
    stalled: list[Stalled] = []
    latencies: list[float] = []
    async with (
        serve(app) as info,
        httpx.AsyncClient(base_url=info.base_url, timeout=10) as client,
    ):
        # Sessions first (and one normal call) so the baseline includes a warmed-up server.
        sessions: list[str] = []

        async def open_session() -> None:
            s = RawSession(client)
            await s.initialize()
            assert s.session_id
            sessions.append(s.session_id)

        async with anyio.create_task_group() as tg:
            for _ in range(SESSIONS):
                tg.start_soon(open_session)
        await normal_client(client, 99, 1, [])
        baseline = rss_bytes()
        sessions_ready = time.monotonic()

        try:
            async with sampler(store) as peaks:
                stalled = [
                    Stalled(info.port, sessions[i % SESSIONS], f"stall-{i}", 1000 + i) for i in range(STALLED)
                ]
                with anyio.fail_after(scaled(15)):
                    async with anyio.create_task_group() as tg:
                        for s in stalled:
                            tg.start_soon(s.start)
                opened = time.monotonic()
                # While the 200 sit there (and their bursts run), normal clients are served.
                with anyio.fail_after(scaled(20)):
                    async with anyio.create_task_group() as tg:
                        for n in range(4):
                            tg.start_soon(normal_client, client, n, 3, latencies)
                served = time.monotonic()
                with anyio.move_on_after(scaled(20)):
                    while sum(1 for t in PROBE.finished if t.startswith("stall-")) < STALLED:
                        await anyio.sleep(0.05)
                finished = sum(1 for t in PROBE.finished if t.startswith("stall-"))
                # Everything produced; the 200 are still stalled: still served, still in budget.
                with anyio.fail_after(scaled(10)):
                    await normal_client(client, 100, 1, latencies)
                await anyio.sleep(0.2)
        finally:
            for s in stalled:
                await s.aclose()
    growth = peaks["rss"] - baseline
    mib = 1024 * 1024
    print(
        f"\n[slow readers] stalled={len(stalled)} bursts finished={finished}/{STALLED} "
        f"produced={PRODUCED / mib:.0f} MiB | store peak={peaks['store'] / mib:.1f} MiB "
        f"(after each append: {store.peak / mib:.2f} MiB; max_bytes={STORE_MAX_BYTES / mib:.0f} MiB) | RSS baseline={baseline / mib:.0f} MiB "
        f"peak={peaks['rss'] / mib:.0f} MiB growth={growth / mib:.0f} MiB budget={RSS_BUDGET / mib:.0f} MiB | "
        f"normal calls={len(latencies)} max latency={max(latencies):.2f}s | "
        f"sessions={sessions_ready - begun:.1f}s stall setup={opened - sessions_ready:.1f}s normal={served - opened:.1f}s total={time.monotonic() - begun:.1f}s",
        file=sys.stderr,
    )
    assert finished == STALLED, "a stalled reader must not stop the app's work"
    assert 0 < store.peak <= STORE_MAX_BYTES
    assert growth <= RSS_BUDGET
    assert PRODUCED > RSS_BUDGET, "the app must produce more than the budget for the test to prove anything"
    assert len(latencies) == 4 * 3 * 3 + 3
    assert max(latencies) < scaled(5.0), "a normal call waited on the stalled readers"
