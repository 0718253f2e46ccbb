"""The engine alone, in process: no sockets, fake `receive`/`send`, one core.

Run by `python -m bench` in fresh child processes (one per measurement, so
memory figures start from a clean interpreter); usable directly:

    python -m bench.engine throughput --events 10000 [--runs 7] [--checkpoint]
    python -m bench.engine replay     --events 10000 [--runs 7] [--redis-url URL --redis-prefix P]
    python -m bench.engine memory     --streams 10000 --variant detached|attached|bare [--tracemalloc] [--wave 100]

Each prints one JSON object on stdout.

The raw app answers an MCP-looking POST with `200 text/event-stream` and writes
small events, one `http.response.body` message each, the way sse-starlette does:
`events - 1` progress notifications then the JSON-RPC response (throughput,
replay), or `events` notifications and then nothing: it stays open, idle, until it
is told the client is gone (memory).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_resume_asgi import MemoryStore, Policy, ResumeMiddleware, Store
from mcp_resume_asgi.wire.sse import SSEParser

SESSION = b"bench-session-0000000000000001"
VERSION = b"2025-11-25"
REQUEST_ID = 1
REQUEST = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"stream","arguments":{}}}'
NOTE = (
    b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress",'
    b'"params":{"progressToken":"t1","progress":%d,"total":%d}}\n\n'
)
FINAL = (
    b'event: message\ndata: {"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"done"}],'
    b'"isError":false}}\n\n'
)

#: Frames kept per allocation: enough to reach the engine line behind an anyio/asyncio allocation.
TRACE_FRAMES = 10


def _scope(method: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }


def post_scope() -> dict[str, Any]:
    return _scope(
        "POST",
        [
            (b"host", b"127.0.0.1:8000"),
            (b"accept", b"application/json, text/event-stream"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(REQUEST)).encode()),
            (b"mcp-session-id", SESSION),
            (b"mcp-protocol-version", VERSION),
        ],
    )


def resume_scope(last_event_id: bytes) -> dict[str, Any]:
    return _scope(
        "GET",
        [
            (b"host", b"127.0.0.1:8000"),
            (b"accept", b"text/event-stream"),
            (b"mcp-session-id", SESSION),
            (b"mcp-protocol-version", VERSION),
            (b"last-event-id", last_event_id),
        ],
    )


def stream_app(
    bodies: list[bytes], *, checkpoint: bool, idle: bool, on_sent: Callable[[], None] | None = None
) -> ASGIApp:
    """A raw ASGI app that writes `bodies` as SSE, then ends (or idles until disconnected)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        await receive()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-cache"),
                    (b"mcp-session-id", SESSION),
                ],
            }
        )
        for body in bodies:
            await send({"type": "http.response.body", "body": body, "more_body": True})
            if checkpoint:
                await asyncio.sleep(0)
        if on_sent is not None:
            on_sent()
        if idle:
            while (await receive())["type"] != "http.disconnect":
                pass
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return app


def event_bodies(n_events: int, *, final: bool) -> list[bytes]:
    notes = n_events - 1 if final else n_events
    bodies = [NOTE % (i, n_events) for i in range(1, notes + 1)]
    if final:
        bodies.append(FINAL)
    return bodies


class FakeClient:
    """One client connection: hands over the request body, then waits; counts what it is sent."""

    __slots__ = ("_body", "_body_sent", "_gone", "data_events", "keep", "nbytes", "on_data", "out")

    def __init__(self, body: bytes = b"", *, keep: bool = False, count_data: bool = False) -> None:
        self._body = body
        self._body_sent = False
        self._gone: asyncio.Event | None = None
        self.nbytes = 0
        self.keep = keep
        self.out: list[bytes] = []
        self.data_events = 0 if count_data else -1
        self.on_data: Callable[[FakeClient], None] | None = None

    def disconnect(self) -> None:
        if self._gone is None:
            self._gone = asyncio.Event()
        self._gone.set()

    async def receive(self) -> dict[str, Any]:
        if not self._body_sent:
            self._body_sent = True
            return {"type": "http.request", "body": self._body, "more_body": False}
        if self._gone is None:
            self._gone = asyncio.Event()
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.body":
            if not message.get("more_body", False):
                self.disconnect()  # what servers report once a response is complete
            body = message.get("body", b"")
            self.nbytes += len(body)
            if self.keep:
                self.out.append(body)
            if self.data_events >= 0 and body:
                self.data_events += body.count(b"data: {")
                if self.on_data is not None:
                    self.on_data(self)


def parse_events(raw: bytes) -> list[Any]:
    return SSEParser().feed(raw + b"\n\n")


# --------------------------------------------------------------------------- throughput
async def _throughput(n_events: int, runs: int, checkpoint: bool) -> dict[str, Any]:
    bodies = event_bodies(n_events, final=True)
    app = stream_app(bodies, checkpoint=checkpoint, idle=False)
    middleware = ResumeMiddleware(app, policy=Policy(), store=MemoryStore())

    async def once_bare() -> float:
        client = FakeClient(REQUEST)
        t0 = time.perf_counter()
        c0 = time.process_time()
        await app(post_scope(), client.receive, client.send)
        cpu_bare.append(time.process_time() - c0)
        return time.perf_counter() - t0

    async def once_wrapped(keep: bool = False) -> tuple[float, FakeClient]:
        client = FakeClient(REQUEST, keep=keep)
        t0 = time.perf_counter()
        await middleware(post_scope(), client.receive, client.send)
        return time.perf_counter() - t0, client

    # correctness first (untimed): every event arrives once, with ids, ending with the response
    _, check = await once_wrapped(keep=True)
    events = parse_events(b"".join(check.out))
    data = [e for e in events if e.data]
    assert len(data) == n_events, (len(data), n_events)
    assert all(e.id for e in data) and b'"id":1' in data[-1].data
    bare_times: list[float] = []
    wrapped_times: list[float] = []
    cpu_wrapped: list[float] = []
    cpu_bare: list[float] = []
    await once_bare()
    cpu_bare.clear()
    for _ in range(runs):  # interleaved, so drift hits both alike
        gc.collect()
        bare_times.append(await once_bare())
        gc.collect()
        c0 = time.process_time()
        elapsed, _ = await once_wrapped()
        cpu_wrapped.append(time.process_time() - c0)
        wrapped_times.append(elapsed)
    bare = statistics.median(bare_times)
    wrapped = statistics.median(wrapped_times)
    return {
        "events": n_events,
        "runs": runs,
        "checkpoint": checkpoint,
        "bare_events_per_s": n_events / bare,
        "wrapped_events_per_s": n_events / wrapped,
        "ratio": bare / wrapped,
        "wrapped_us_per_event": 1e6 * wrapped / n_events,
        "overhead_us_per_event": 1e6 * (wrapped - bare) / n_events,
        "wrapped_cpu_over_wall": statistics.median(cpu_wrapped) / wrapped,
        # the same rates from process CPU time: what other load on the machine does not distort
        "bare_events_per_cpu_s": n_events / statistics.median(cpu_bare),
        "wrapped_events_per_cpu_s": n_events / statistics.median(cpu_wrapped),
        "bare_s": bare_times,
        "wrapped_s": wrapped_times,
    }


# --------------------------------------------------------------------------- replay
#: A store shared by several processes needs a shared secret; any fixed one serves a benchmark.
REDIS_SECRET = "bench-shared-secret-0123456789abcdef"


async def _replay(n_events: int, runs: int, redis_url: str = "", redis_prefix: str = "") -> dict[str, Any]:
    """Replay on the memory store, or with `redis_url` on a `RedisStore` under `redis_prefix`."""
    if not redis_url:
        return await _replay_on(MemoryStore(), n_events, runs)
    from mcp_resume_asgi.store import RedisStore

    store = RedisStore(redis_url, prefix=redis_prefix)
    try:
        return await _replay_on(store, n_events, runs)
    finally:
        await store.clear()  # everything under its prefix
        await store.aclose()


async def _replay_on(store: Store, n_events: int, runs: int) -> dict[str, Any]:
    bodies = event_bodies(n_events, final=True)
    app = stream_app(bodies, checkpoint=False, idle=False)
    secret = REDIS_SECRET if store.shared else None
    middleware = ResumeMiddleware(app, policy=Policy(), store=store, secret=secret)
    first = FakeClient(REQUEST, keep=True)
    await middleware(post_scope(), first.receive, first.send)
    priming = parse_events(b"".join(first.out))[0]
    assert priming.id is not None and not priming.data, priming
    last_event_id = priming.id  # the priming event's id: "<stream>.<sig>:0", i.e. replay everything

    async def once(keep: bool = False) -> tuple[float, FakeClient]:
        client = FakeClient(b"", keep=keep)
        t0 = time.perf_counter()
        await middleware(resume_scope(last_event_id), client.receive, client.send)
        return time.perf_counter() - t0, client

    _, check = await once(keep=True)
    data = [e for e in parse_events(b"".join(check.out)) if e.data]
    assert len(data) == n_events and b'"id":1' in data[-1].data, len(data)
    times = []
    cpu = []
    for _ in range(runs):
        gc.collect()
        c0 = time.process_time()
        elapsed, _ = await once()
        cpu.append(time.process_time() - c0)
        times.append(elapsed)
    median = statistics.median(times)
    return {
        "events": n_events,
        "store": "redis" if store.shared else "memory",
        "runs": runs,
        "replay_ms": 1000 * median,
        "replay_events_per_s": n_events / median,
        "replay_cpu_ms": 1000 * statistics.median(cpu),
        "bytes": check.nbytes,
        "times_s": times,
    }


# --------------------------------------------------------------------------- memory
def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


async def _memory(
    n_streams: int, variant: str, events_per_stream: int, traced: bool, wave: int = 0
) -> dict[str, Any]:
    """`n_streams` idle streams of `events_per_stream` small events each, all alive at once
    (started all at once, or `wave` at a time: detached only).

    * detached - wrapped; each client takes its events, then disconnects (the stream
      is recorded, nobody attached, the app idles: what a dropped client leaves);
    * attached - wrapped; the clients stay connected and idle;
    * bare     - the app alone, clients connected and idle (the app's own cost, the baseline).
    """
    bodies = event_bodies(events_per_stream, final=False)
    sent = 0
    all_sent = asyncio.Event()
    in_flight: list[tracemalloc.Snapshot] = []  # (traced: a snapshot once every app sent its events)

    def on_sent() -> None:
        nonlocal sent
        sent += 1
        if sent == target:
            all_sent.set()
            if traced and tracemalloc.is_tracing():
                # every app has sent its events (not yet written): the requests are all in flight
                in_flight.append(tracemalloc.take_snapshot())

    app = stream_app(bodies, checkpoint=False, idle=True, on_sent=on_sent)
    store = MemoryStore()
    # a long resume window: nothing may expire while we measure
    middleware = ResumeMiddleware(app, policy=Policy(max_wait_s=3600, keepalive_s=3600), store=store)
    handler = app if variant == "bare" else middleware

    def got_events(client: FakeClient) -> None:
        if client.data_events >= events_per_stream:
            client.on_data = None
            if variant == "detached":
                client.disconnect()

    async def settle(tasks: list[asyncio.Task[None]]) -> None:
        deadline = time.monotonic() + 120
        await asyncio.wait_for(all_sent.wait(), 120)
        while time.monotonic() < deadline:
            if variant == "detached":
                attached = sum(1 for e in store._streams.values() if e.meta.attached)
                if attached == 0:
                    break
            elif variant == "attached":
                if all(c.data_events >= events_per_stream for c in clients):
                    break
            else:
                break
            await asyncio.sleep(0.01)
        for _ in range(10):  # let every task reach its idle await
            await asyncio.sleep(0)
        if variant == "detached":
            check_detached(tasks)
            assert len(middleware.engine.live) >= target, "streams ended early"
        else:
            failed = [t for t in tasks if t.done()]
            assert not failed, f"{len(failed)} streams ended early: {failed[0].exception()!r}"

    def check_detached(tasks: list[asyncio.Task[None]]) -> None:
        # A POST's call returns once its client left (the app's request runs on the engine's
        # task): only one that failed ended early.
        failed = [t for t in tasks if t.done() and (t.cancelled() or t.exception() is not None)]
        assert not failed, f"{len(failed)} streams ended early: {failed[0].exception()!r}"

    async def spawn(count: int) -> tuple[list[asyncio.Task[None]], list[FakeClient]]:
        made_tasks = []
        made_clients = []
        for _ in range(count):
            client = FakeClient(REQUEST, count_data=True)
            client.on_data = got_events
            made_clients.append(client)
            made_tasks.append(asyncio.ensure_future(handler(post_scope(), client.receive, client.send)))
        return made_tasks, made_clients

    async def stop(tasks: list[asyncio.Task[None]]) -> None:
        for t in tasks:
            t.cancel()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 120)

    # warm-up: the same path end to end for a few streams, so imports, caches and
    # free lists are in place before the baseline
    target = 50
    clients: list[FakeClient] = []
    tasks, clients = await spawn(target)
    await settle(tasks)
    await stop(tasks)
    for s in list(store._streams):
        await store.delete_stream(s)
    sent = 0
    all_sent.clear()
    del tasks, clients
    gc.collect()
    await asyncio.sleep(0.05)
    gc.collect()

    target = n_streams
    if traced:
        types0 = _type_counts()
        tracemalloc.start(TRACE_FRAMES)
        snap0 = tracemalloc.take_snapshot()
        tracemalloc.reset_peak()
        traced0 = tracemalloc.get_traced_memory()[0]
    rss0 = rss_bytes()
    t0 = time.perf_counter()
    if wave:
        # Streams arrive `wave` at a time, each wave's clients gone before the next arrives: what
        # idle streams left over time hold, rather than the peak of them all in flight at once.
        for start in range(0, n_streams, wave):
            tasks, clients = await spawn(min(wave, n_streams - start))
            await asyncio.wait_for(asyncio.wait(tasks), 120)  # (each returns once its client left)
            check_detached(tasks)
        tasks = clients = []
    else:
        tasks, clients = await spawn(n_streams)
    await settle(tasks)
    if variant == "detached":
        # A server forgets a request whose call returned (its connection's objects, its task):
        # what lives on is the stream's, not the harness's.
        check_detached(tasks)
        tasks = clients = []
    setup_s = time.perf_counter() - t0
    gc.collect()
    rss1 = rss_bytes()
    payload = store.total_bytes
    result: dict[str, Any] = {
        "variant": variant,
        "streams": n_streams,
        "wave": wave or n_streams,
        "events_per_stream": events_per_stream,
        "setup_s": setup_s,
        "rss_delta_per_stream": (rss1 - rss0) / n_streams,
        "payload_per_stream": payload / n_streams,
        "stored_streams": store.stream_count,
        "live_streams": len(middleware.engine.live),
        "tasks_per_stream": (len(asyncio.all_tasks()) - 1) / n_streams,
    }
    if traced:
        # RSS follows the peak, not what is live at the end: 10,000 requests are in flight at once,
        # and what they free lies in pools among what lives on, which the allocator keeps.
        result["traced_peak_per_stream"] = (tracemalloc.get_traced_memory()[1] - traced0) / n_streams
        snap1 = tracemalloc.take_snapshot()
        tracemalloc.stop()
        result.update(_attribute(snap0, snap1, n_streams))
        if in_flight:
            at_peak = _attribute(snap0, in_flight[0], n_streams)
            result["in_flight"] = {
                "traced_per_stream": at_peak["traced_delta_per_stream"],
                "top_engine_lines": at_peak["top_engine_lines"],
                "top_sites": at_peak["top_sites"],
            }
        types1 = _type_counts()
        grown = {name: (types1[name] - types0.get(name, 0)) / n_streams for name in types1}
        result["objects_per_stream"] = dict(sorted(grown.items(), key=lambda kv: kv[1], reverse=True)[:20])
    return result  # the streams are left running: the process exits right after reporting


def _type_counts() -> dict[str, int]:
    counts: dict[str, int] = {}
    for obj in gc.get_objects():
        t = type(obj)
        name = f"{t.__module__}.{t.__qualname__}"
        counts[name] = counts.get(name, 0) + 1
    return counts


def _attribute(snap0: tracemalloc.Snapshot, snap1: tracemalloc.Snapshot, n: int) -> dict[str, Any]:
    """Bytes per stream by allocation site, and by the innermost mcp_resume_asgi line responsible."""
    diff = snap1.compare_to(snap0, "traceback")
    total = sum(d.size_diff for d in diff)
    by_site: dict[str, list[float]] = {}
    by_engine: dict[str, list[float]] = {}
    for d in diff:
        if d.size_diff <= 0:
            continue
        frames = list(d.traceback)[::-1]  # a Traceback runs oldest first; most recent first here
        site = f"{_short(frames[0].filename)}:{frames[0].lineno}"
        owner = next(
            (f"{_short(f.filename)}:{f.lineno}" for f in frames if "mcp_resume_asgi" in f.filename),
            "(outside mcp_resume_asgi) " + site,
        )
        for table, key in ((by_site, site), (by_engine, owner)):
            row = table.setdefault(key, [0.0, 0.0])
            row[0] += d.size_diff
            row[1] += d.count_diff

    def top(table: dict[str, list[float]]) -> list[dict[str, Any]]:
        rows = sorted(table.items(), key=lambda kv: kv[1][0], reverse=True)[:40]
        return [{"where": k, "bytes_per_stream": v[0] / n, "blocks_per_stream": v[1] / n} for k, v in rows]

    return {
        "traced_delta_per_stream": total / n,
        "top_sites": top(by_site),
        "top_engine_lines": top(by_engine),
    }


def _short(path: str) -> str:
    for package in ("mcp_resume_asgi/", "bench/"):
        if package in path:
            return package + path.rsplit(package, 1)[1]
    for marker in ("site-packages/", "/work/main/", "python3.11/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.engine")
    parser.add_argument("mode", choices=("throughput", "replay", "memory"))
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--checkpoint", action="store_true", help="the app yields after every event")
    parser.add_argument("--streams", type=int, default=10_000)
    parser.add_argument("--events-per-stream", type=int, default=10)
    parser.add_argument("--variant", choices=("detached", "attached", "bare"), default="detached")
    parser.add_argument("--tracemalloc", action="store_true")
    parser.add_argument(
        "--wave",
        type=int,
        default=0,
        help="memory, detached: streams start this many at a time (default: all)",
    )
    parser.add_argument("--cpu", type=int, default=None, help="pin to one CPU")
    parser.add_argument("--redis-url", default="", help="replay: on a RedisStore at this URL")
    parser.add_argument("--redis-prefix", default="", help="replay: the RedisStore's key prefix")
    args = parser.parse_args(argv)
    if args.cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    if args.mode == "throughput":
        result = asyncio.run(_throughput(args.events, args.runs, args.checkpoint))
    elif args.mode == "replay":
        result = asyncio.run(_replay(args.events, args.runs, args.redis_url, args.redis_prefix))
    else:
        if args.wave and args.variant != "detached":
            parser.error("--wave: detached only (an attached stream's peak is its idle state)")
        result = asyncio.run(
            _memory(args.streams, args.variant, args.events_per_stream, args.tracemalloc, args.wave)
        )
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    sys.stdout.flush()
    if args.mode == "memory":
        os._exit(0)  # skip tearing down thousands of idle streams: not what is measured


if __name__ == "__main__":
    main()
