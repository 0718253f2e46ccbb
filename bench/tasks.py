"""What the Tasks extension costs: one `tasks/get`, and the memory of finished tasks.

    python -m bench.tasks            # full run, ~2 min on 2 cores
    python -m bench.tasks --quick    # smoke run

In process, as `bench/stores.py`: the benchmark's stock `MCPServer` (`bench/apps.py`: `echo`,
plus a `wait` tool that sleeps for an hour) wrapped with
`resumable(app, tasks=True, policy=Policy(task_after_s=0, task_ttl_s=3600))`, its lifespan
running, driven with plain ASGI calls (no sockets between client and middleware; the
`RedisStore` talks to Redis over loopback TCP). Every request is 2026-07-28 (no session) and
declares `io.modelcontextprotocol/tasks`.

1. Latency and CPU per call, memory store and Redis store (the shared Redis at
   `--redis-url`, a fresh key prefix deleted at the end), their rounds interleaved:
   `tools/list` through the same wrapped app (the baseline: what a request the app answers
   costs through app and middleware; the stock `MCPServer` answers `ping` on 2026-07-28 with
   -32601, so `ping` cannot be it), `tasks/get` of a *completed* task (an `echo` call answered with a
   `CreateTaskResult`, finished before the timing) and of a *working* one (`wait`). Per call:
   wall time (median, p99 nearest-rank, over every call of every round); process CPU µs per
   call (median over rounds of round CPU / calls); Redis: the store's round trips per call
   (counted in `execute_command`, as `bench/stores.py` does) and the Redis server's CPU per call
   (`INFO cpu`, affected by other clients).
2. Memory of 10,000 finished tasks (`echo`, created one after another, each polled once to
   `completed`): memory store, in a fresh child process: RSS delta per task after
   `gc.collect()`, and in another child the tracemalloc delta per task (top lines); Redis
   store: `INFO memory` `used_memory` delta per task on a private `redis-server` (so that
   nobody else's keys move the figure; skipped without the binary), before and after, and the
   keys per task.

The report (Markdown) goes to stdout and `bench/results/tasks.md`; progress to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import gc
import json
import math
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import redis.asyncio as aioredis
from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp, Message

from bench.apps import echo
from bench.exchange import Exchange, post_scope
from bench.stores import (
    Tally,
    _loadavg,
    command_line,
    counting_redis_store,
    machine_facts,
    other_load,
    publish,
)
from mcp_resume_asgi import MemoryStore, Policy, Store, resumable
from mcp_resume_asgi.store import RedisStore

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
SECRET = "bench-tasks-shared-secret-0123456789"
MODERN = "2026-07-28"
EXTENSION = "io.modelcontextprotocol/tasks"
#: Unbounded tasks per principal: part 2 makes 10,000 tasks as one caller (the default bound is 1,000).
POLICY = Policy(task_after_s=0, task_ttl_s=3600, task_poll_interval_ms=1000, max_tasks_per_principal=None)
KINDS = ("tools/list", "get completed", "get working")
#: The baseline is `tools/list`: the stock `MCPServer` answers `ping` on 2026-07-28 with -32601.
BASELINE = KINDS[0]


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


async def wait(seconds: float) -> str:
    """Sleep `seconds`, then say so (a task that stays `working`)."""
    await anyio.sleep(seconds)
    return "waited"


def build_app(store: Store) -> ASGIApp:
    server = MCPServer("bench-tasks", version="0.0.1", log_level="WARNING")
    server.add_tool(echo, structured_output=False)
    server.add_tool(wait, structured_output=False)
    inner = server.streamable_http_app(host="127.0.0.1")
    return resumable(inner, policy=POLICY, store=store, secret=SECRET, tasks=True)


# --------------------------------------------------------------------------- ASGI driving
@contextlib.asynccontextmanager
async def lifespan(app: ASGIApp) -> AsyncIterator[None]:
    """Run `app`'s ASGI lifespan around the block, as a server would."""
    started, shutdown = asyncio.Event(), asyncio.Event()
    first = True

    async def receive() -> Message:
        nonlocal first
        if first:
            first = False
            return {"type": "lifespan.startup"}
        await shutdown.wait()
        return {"type": "lifespan.shutdown"}

    async def send(message: Message) -> None:
        if message["type"] == "lifespan.startup.complete":
            started.set()
        elif message["type"] == "lifespan.startup.failed":
            raise RuntimeError(message.get("message"))

    runner = asyncio.ensure_future(
        app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)
    )
    await asyncio.wait_for(started.wait(), 10)
    try:
        yield
    finally:
        shutdown.set()
        await asyncio.wait_for(runner, 10)


class Caller:
    """2026-07-28 JSON-RPC requests with the extension declared, as plain ASGI calls."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.next_id = 0
        self.background: set[asyncio.Task[None]] = set()
        """The ASGI calls of tasks: each runs until its app is done, past its answer."""

    def request(self, method: str, params: dict[str, Any], name: str | None) -> tuple[bytes, list[Any]]:
        self.next_id += 1
        meta = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}},
        }
        body = json.dumps(
            {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": {**params, "_meta": meta}}
        ).encode()
        headers = [
            (b"host", b"127.0.0.1:8000"),
            (b"accept", b"application/json, text/event-stream"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"mcp-protocol-version", MODERN.encode()),
            (b"mcp-method", method.encode()),
        ]
        if name is not None:
            headers.append((b"mcp-name", name.encode()))
        return body, headers

    async def call(
        self, method: str, params: dict[str, Any], name: str | None = None, *, detach: bool = False
    ) -> dict[str, Any]:
        """One request; with `detach`, the ASGI call goes on in the background once answered
        (a task's call returns when its app is done, as under a server)."""
        body, headers = self.request(method, params, name)
        exchange = Exchange(body)
        scope, receive, send = post_scope(headers), exchange.receive, exchange.send
        if detach:
            running = asyncio.ensure_future(self.app(scope, receive, send))
            self.background.add(running)
            running.add_done_callback(self.background.discard)
            await asyncio.wait(
                [running, asyncio.ensure_future(exchange.done.wait())], return_when=asyncio.FIRST_COMPLETED
            )
            if running.done():
                running.result()
        else:
            await self.app(scope, receive, send)
        payload = exchange.payload
        assert exchange.status == 200, (exchange.status, payload[:300])
        return _answer(payload)

    async def create(self, tool: str, arguments: dict[str, Any]) -> str:
        answer = await self.call("tools/call", {"name": tool, "arguments": arguments}, tool, detach=True)
        result = answer["result"]
        assert result["resultType"] == "task", answer
        task_id: str = result["taskId"]
        return task_id

    async def get(self, task_id: str) -> dict[str, Any]:
        result: dict[str, Any] = (await self.call("tasks/get", {"taskId": task_id}, task_id))["result"]
        return result


def _answer(payload: bytes) -> dict[str, Any]:
    """The JSON-RPC response in a JSON or SSE body."""
    text = payload.decode()
    if text.lstrip().startswith("{"):
        answer: dict[str, Any] = json.loads(text)
        return answer
    for line in reversed(text.splitlines()):
        if line.startswith("data:") and line[5:].strip():
            message = json.loads(line[5:])
            if "result" in message or "error" in message:
                return message  # type: ignore[no-any-return]
    raise AssertionError(f"no answer in {payload[:300]!r}")


# --------------------------------------------------------------------------- 1. per call
@dataclass
class Subject:
    name: str
    caller: Caller
    completed: list[str]
    working: list[str]
    tally: Tally | None = None
    admin: aioredis.Redis | None = None


@dataclass
class Calls:
    latencies: list[float] = field(default_factory=list)
    cpu_per_call: list[float] = field(default_factory=list)
    round_trips: list[float] = field(default_factory=list)
    redis_cpu_per_call: list[float] = field(default_factory=list)


async def _redis_cpu(admin: aioredis.Redis | None) -> float:
    if admin is None:
        return 0.0
    cpu: dict[str, Any] = await admin.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


async def one_round(subject: Subject, kind: str, calls: int, out: Calls) -> None:
    caller = subject.caller
    ids = subject.completed if kind == "get completed" else subject.working
    latencies: list[float] = []
    gc.collect()
    if subject.tally is not None:
        subject.tally.reset()
    redis_before = await _redis_cpu(subject.admin)
    c0 = time.process_time()
    for i in range(calls):
        t0 = time.perf_counter()
        if kind == BASELINE:
            answer = await caller.call(BASELINE, {})
            latencies.append(time.perf_counter() - t0)
            assert "result" in answer, answer
        else:
            task = await caller.get(ids[i % len(ids)])
            latencies.append(time.perf_counter() - t0)
            assert task["status"] == kind.split()[1], task
    cpu = time.process_time() - c0
    redis_after = await _redis_cpu(subject.admin)
    out.latencies += latencies
    out.cpu_per_call.append(cpu / calls)
    if subject.tally is not None:
        out.round_trips.append(sum(subject.tally.commands.values()) / calls)
        out.redis_cpu_per_call.append((redis_after - redis_before) / calls)


async def prepare(subject: Subject, n_tasks: int) -> None:
    caller = subject.caller
    for _ in range(n_tasks):
        subject.completed.append(await caller.create("echo", {"text": "hi"}))
        subject.working.append(await caller.create("wait", {"seconds": 3600}))
    for task_id in subject.completed:
        for _ in range(200):
            if (await caller.get(task_id))["status"] == "completed":
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError(f"task {task_id} did not complete")
    for i in range(50):  # warm-up
        await caller.call(BASELINE, {})
        await caller.get(subject.completed[i % n_tasks])
        await caller.get(subject.working[i % n_tasks])


async def measure_calls(
    redis_url: str, calls: int, rounds: int
) -> tuple[dict[tuple[str, str], Calls], dict[str, str]]:
    prefix = f"bench-tasks:{secrets.token_hex(6)}:"
    tally = Tally()
    admin = aioredis.Redis.from_url(redis_url)
    redis_store, clients = counting_redis_store(redis_url, prefix, tally)
    memory_app, redis_app = build_app(MemoryStore()), build_app(redis_store)
    out: dict[tuple[str, str], Calls] = {}
    try:
        facts = await machine_facts(admin)
        async with lifespan(memory_app), lifespan(redis_app):
            subjects = [
                Subject("memory", Caller(memory_app), [], []),
                Subject("redis", Caller(redis_app), [], [], tally=tally, admin=admin),
            ]
            for subject in subjects:
                await prepare(subject, 20)
            for r in range(rounds):
                for kind in KINDS:
                    for subject in subjects if r % 2 == 0 else subjects[::-1]:
                        await one_round(subject, kind, calls, out.setdefault((subject.name, kind), Calls()))
                log(f"  round {r + 1}/{rounds}")
            for subject in subjects:  # the `wait` tools: cancel them, so the lifespan ends at once
                for task_id in subject.working:
                    await subject.caller.call("tasks/cancel", {"taskId": task_id}, task_id)
    finally:
        await redis_store.clear()
        left = [key async for key in admin.scan_iter(match=prefix + "*", count=1000)]
        if left:
            await admin.unlink(*left)
        for client in clients:
            await client.aclose()
        await admin.aclose()
    return out, facts


# --------------------------------------------------------------------------- 2. memory
def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def _finish_tasks(caller: Caller, n: int) -> None:
    ids = [await caller.create("echo", {"text": "hi"}) for _ in range(n)]
    for task_id in ids:
        for _ in range(200):
            if (await caller.get(task_id))["status"] == "completed":
                break
            await asyncio.sleep(0.005)
        else:
            raise AssertionError(f"task {task_id} did not complete")


async def child_memory(n: int, mode: str) -> dict[str, Any]:
    """In a fresh process: the memory store's growth for `n` finished tasks."""
    app = build_app(MemoryStore())
    caller = Caller(app)
    async with lifespan(app):
        await _finish_tasks(caller, 200)  # warm-up: imports, caches, the first allocations
        gc.collect()
        if mode == "tracemalloc":
            tracemalloc.start(1)
            before = tracemalloc.take_snapshot()
            await _finish_tasks(caller, n)
            gc.collect()
            after = tracemalloc.take_snapshot()
            tracemalloc.stop()
            stats = after.compare_to(before, "lineno")
            total = sum(s.size_diff for s in stats)
            top = [
                {
                    "where": f"{Path(s.traceback[0].filename).name}:{s.traceback[0].lineno}",
                    "bytes_per_task": s.size_diff / n,
                }
                for s in stats[:12]
            ]
            return {"bytes_per_task": total / n, "top": top}
        rss0 = _rss_kib()
        await _finish_tasks(caller, n)
        gc.collect()
        rss1 = _rss_kib()
        return {"rss_bytes_per_task": (rss1 - rss0) * 1024 / n}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def private_redis() -> Any:
    binary = shutil.which("redis-server")
    if binary is None:
        yield None
        return
    port = _free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.kill()
        proc.wait(5)


async def redis_memory(url: str, n: int) -> dict[str, Any]:
    admin = aioredis.Redis.from_url(url)
    store = RedisStore(url, prefix=f"bench-tasks-mem:{secrets.token_hex(4)}:")
    app = build_app(store)
    caller = Caller(app)
    try:
        async with lifespan(app):
            await _finish_tasks(caller, 200)
            info: dict[str, Any] = await admin.info("memory")
            keys0 = await admin.dbsize()
            m0 = int(info["used_memory"])
            await _finish_tasks(caller, n)
            info = await admin.info("memory")
            m1 = int(info["used_memory"])
            keys1 = await admin.dbsize()
            server: dict[str, Any] = await admin.info("server")
        return {
            "used_memory_bytes_per_task": (m1 - m0) / n,
            "keys_per_task": (keys1 - keys0) / n,
            "used_memory_human_after": info.get("used_memory_human"),
            "redis_version": server.get("redis_version"),
        }
    finally:
        await store.clear()
        await store.aclose()
        await admin.aclose()


def run_child(mode: str, n: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.tasks", "--child", mode, "--tasks", str(n)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


# --------------------------------------------------------------------------- report
def p99(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def build_report(
    *,
    command: str,
    quick: bool,
    facts: dict[str, str],
    load: list[tuple[str, str]],
    calls: int,
    rounds: int,
    per_call: dict[tuple[str, str], Calls],
    memory: dict[str, Any],
    n_tasks: int,
    elapsed_s: float,
) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "## Tasks (SEP-2663): one `tasks/get`, and 10,000 finished tasks",
        "",
        f"Command: `{command}`{' (quick)' if quick else ''}, {now}, {elapsed_s:.0f} s, "
        f"mcp_resume_asgi at {facts['package']}.",
        "",
        f"Machine: nproc {facts['nproc']}, {facts['cpu']}; Python {facts['python']}; Redis "
        f"{facts['redis_server_live']}; redis-py {facts['redis_py']}; anyio {facts['anyio']}. Other load: "
        + "; ".join(
            f"{what} {state} (loadavg {avg})"
            for what, (state, avg) in zip(("at start", "after part 1", "at the end"), load, strict=False)
        )
        + ".",
        "",
        "In process, one asyncio loop, plain ASGI calls (no HTTP server), the stock `MCPServer` "
        "wrapped with `resumable(app, tasks=True)`, `Policy(task_after_s=0, task_ttl_s=3600)`; every "
        "request 2026-07-28, the extension declared. Both stores run the same code; their rounds are "
        "interleaved.",
        "",
        f"### 1. One call: {rounds} rounds of {calls:,} calls per cell",
        "",
        "Latency: wall time of the ASGI call, over every call (p99 nearest-rank). CPU: process CPU per "
        "call, median over rounds. Redis: the store's round trips per call, and the Redis server's CPU per "
        "call (`INFO cpu`; other clients of the shared Redis count too). `get completed` / `get working`: "
        "`tasks/get` of 20 tasks in turn, finished `echo` calls / `wait` calls still sleeping.",
        "",
        "| store | request | latency median µs | p99 µs | process CPU µs/call | vs tools/list (CPU) | Redis round trips/call | Redis CPU µs/call |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in ("memory", "redis"):
        base = statistics.median(per_call[(name, BASELINE)].cpu_per_call)
        for kind in KINDS:
            c = per_call[(name, kind)]
            cpu = statistics.median(c.cpu_per_call)
            rt = f"{statistics.median(c.round_trips):.2f}" if c.round_trips else "-"
            rcpu = f"{1e6 * statistics.median(c.redis_cpu_per_call):.0f}" if c.redis_cpu_per_call else "-"
            ratio = "1.00x" if kind == BASELINE else f"{cpu / base:.2f}x ({1e6 * (cpu - base):+.0f} µs)"
            lines.append(
                f"| {name} | `{kind}` | {1e6 * statistics.median(c.latencies):.0f} | {1e6 * p99(c.latencies):.0f} "
                f"| {1e6 * cpu:.0f} | {ratio} | {rt} | {rcpu} |"
            )
    lines += [
        "",
        f"### 2. Memory of {n_tasks:,} finished tasks (`echo`, each polled once to `completed`)",
        "",
        "Memory store, each figure from a fresh child process after 200 warm-up tasks and `gc.collect()`: "
        "RSS delta per task; tracemalloc delta per task (another child, allocations still alive, by line). "
        "Redis store: `INFO memory` `used_memory` delta per task on a private `redis-server` "
        "(in memory only, nobody else's keys), and keys per task.",
        "",
        "| store | measure | per task |",
        "|---|---|---:|",
    ]
    if "rss" in memory:
        lines.append(f"| memory | RSS delta | {memory['rss']['rss_bytes_per_task']:,.0f} B |")
    if "tracemalloc" in memory:
        lines.append(f"| memory | tracemalloc delta | {memory['tracemalloc']['bytes_per_task']:,.0f} B |")
    if memory.get("redis"):
        r = memory["redis"]
        lines.append(f"| redis | `used_memory` delta | {r['used_memory_bytes_per_task']:,.0f} B |")
        lines.append(f"| redis | keys | {r['keys_per_task']:.2f} |")
    else:
        lines.append("| redis | `used_memory` delta | skipped (no `redis-server` binary) |")
    if "tracemalloc" in memory:
        lines += ["", "Where the memory store's bytes are (tracemalloc, top lines, bytes per task):", ""]
        lines += ["| line | B/task |", "|---|---:|"]
        for entry in memory["tracemalloc"]["top"]:
            lines.append(f"| `{entry['where']}` | {entry['bytes_per_task']:,.0f} |")
    lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------- main
async def run(args: argparse.Namespace, command: str) -> str:
    started = time.perf_counter()
    calls = 300 if args.quick else 2000
    rounds = 3 if args.quick else 5
    n_tasks = 1000 if args.quick else args.tasks
    load = [(other_load(), _loadavg())]
    log(f"bench.tasks: 1. per call ({rounds} rounds x {calls} calls x {len(KINDS)} kinds x 2 stores)")
    per_call, facts = await measure_calls(args.redis_url, calls, rounds)
    load.append((other_load(), _loadavg()))
    log(f"bench.tasks: 2. memory of {n_tasks} finished tasks")
    memory: dict[str, Any] = {
        "rss": await asyncio.to_thread(run_child, "rss", n_tasks),
        "tracemalloc": await asyncio.to_thread(run_child, "tracemalloc", n_tasks),
    }
    with private_redis() as url:
        memory["redis"] = await redis_memory(url, n_tasks) if url else None
    load.append((other_load(), _loadavg()))
    return build_report(
        command=command,
        quick=args.quick,
        facts=facts,
        load=load,
        calls=calls,
        rounds=rounds,
        per_call=per_call,
        memory=memory,
        n_tasks=n_tasks,
        elapsed_s=time.perf_counter() - started,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tasks", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="300 calls x 3 rounds, 1,000 tasks")
    parser.add_argument("--tasks", type=int, default=10_000, help="finished tasks for the memory figures")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL, help="a Redis on loopback")
    parser.add_argument("--child", choices=("rss", "tracemalloc"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(asyncio.run(child_memory(args.tasks, args.child))))
        return
    publish(asyncio.run(run(args, command_line("bench.tasks", argv))), "tasks.md")


if __name__ == "__main__":
    main()
