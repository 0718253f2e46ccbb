"""Memory vs Redis store, side by side: resume latency, recording rate, Redis round trips.

    python -m bench.stores            # full run, ~1.5 min on 2 cores
    python -m bench.stores --quick    # smoke run

In process, as `bench/engine.py`: a raw ASGI app answers an MCP-looking `tools/call`
POST with `200 text/event-stream` and small events, one `http.response.body` message
each (notifications, then the JSON-RPC result), driven through
`ResumeMiddleware.__call__` with fake `receive`/`send`; no sockets between client and
middleware. The same code runs once with `MemoryStore()` and once with a `RedisStore`
on the Redis at `--redis-url` (loopback), under a fresh key prefix
`bench-stores:<random>:` that is deleted at the end. Runs of the two stores are
interleaved, so drift and other load on the machine hit both alike.

1. Resume latency: a completed 1,000-event stream, then GET `/mcp` with
   `Last-Event-ID` = its priming id (replay all) or the id of event 500 (replay the
   second half): time from the call to the first body chunk carrying a replayed event,
   to the chunk carrying the last one (the result), and to the call's return.
2. Recording rate: the POST's own client stays attached and reads while the app writes
   N events, *batched* (never yields between events) or *live* (`anyio.sleep(0)` after
   each); events/s = N / wall time of the whole call.
3. Redis traffic: the `RedisStore` is given its two clients (`client=`, `wait_client=`,
   connection pools built exactly as `RedisStore(url)` builds them) of a subclass of
   `redis.asyncio.Redis` whose `execute_command` counts each command it sends (every one
   is a request/response: one round trip; the store uses no pipelines). Redis's own
   `INFO commandstats` (calls per command, including those run inside the Lua scripts)
   is read before and after each run on a separate client; a run counts as *quiet* when
   Redis saw exactly our EVALSHA, XREAD and HMGET calls (the scripts issue none of
   those), i.e. no other client used Redis meanwhile. One extra run per mode walks the
   stack on every command to attribute it to the `RedisStore` method and the engine
   function that issued it (not timed).

The report (Markdown) goes to stdout and `bench/results/stores.md`; progress to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import gc
import math
import os
import platform
import secrets
import shlex
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from types import FrameType
from typing import Any

import redis
import redis.asyncio as aioredis
from starlette.types import ASGIApp, Message

import mcp_resume_asgi
import mcp_resume_asgi.store.redis as redis_store_module
from bench.engine import REQUEST, event_bodies, post_scope, resume_scope, stream_app
from mcp_resume_asgi import MemoryStore, Policy, ResumeMiddleware, Store
from mcp_resume_asgi.store import RedisStore

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
#: Shared stores need a shared secret (>= 16 characters); the memory store gets the same.
SECRET = "bench-stores-shared-secret-0123456789"

DATA_MARK = b"data: {"
FINAL_MARK = b'"id":1,"result"'

RESUME_EVENTS = 1_000
RESUME_MIDDLE = 500
#: Commands issued by the Lua scripts never include these, so Redis's count of them must
#: equal ours when nobody else uses Redis during a run.
QUIET_CHECK = ("EVALSHA", "XREAD", "HMGET")

STORE_FILE = str(Path(redis_store_module.__file__).resolve())
PACKAGE_DIR = str(Path(mcp_resume_asgi.__file__).resolve().parent)


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the app and the client
class Client:
    """One client connection: hands over the request body, then stays; times what it is sent."""

    __slots__ = ("_body", "_body_sent", "_gone", "data_events", "final_at", "first_at", "head")

    def __init__(self, body: bytes = b"") -> None:
        self._body = body
        self._body_sent = False
        self._gone: asyncio.Event | None = None
        self.head: bytes | None = None
        """The first body chunk (the priming event)."""
        self.data_events = 0
        self.first_at: float | None = None
        """perf_counter() when the first chunk carrying an event with data arrived."""
        self.final_at: float | None = None
        """perf_counter() when the chunk carrying the JSON-RPC result arrived."""

    async def receive(self) -> Message:
        if not self._body_sent:
            self._body_sent = True
            return {"type": "http.request", "body": self._body, "more_body": False}
        if self._gone is None:
            self._gone = asyncio.Event()
        await self._gone.wait()  # set once the response is complete, as servers report it
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if message["type"] != "http.response.body":
            return
        if not message.get("more_body", False):
            if self._gone is None:
                self._gone = asyncio.Event()
            self._gone.set()
        body: bytes = message.get("body", b"")
        if not body:
            return
        if self.head is None:
            self.head = body
        n = body.count(DATA_MARK)
        if n:
            self.data_events += n
            now = time.perf_counter()
            if self.first_at is None:
                self.first_at = now
            if FINAL_MARK in body:
                self.final_at = now

    def priming_id(self) -> bytes:
        assert self.head is not None and self.head.startswith(b"id: "), self.head
        return self.head.split(b"\n", 1)[0][4:]


# --------------------------------------------------------------------------- counting Redis traffic
def _callers() -> tuple[str, str]:
    """(engine function, RedisStore method) behind the Redis command being sent now."""
    frame: FrameType | None = sys._getframe(2)
    store_fn = ""
    while frame is not None:
        code = frame.f_code
        if code.co_filename == STORE_FILE:
            store_fn = code.co_qualname  # the outermost store frame wins: update_stream over _if
        elif store_fn and code.co_filename.startswith(PACKAGE_DIR):
            path = code.co_filename[len(PACKAGE_DIR) + 1 :]
            return f"{code.co_qualname} ({path})", store_fn
        frame = frame.f_back
    return "?", store_fn or "?"


class Tally:
    """Commands sent by the counting clients, by name; with `attribute`, also by caller."""

    def __init__(self) -> None:
        self.commands: Counter[str] = Counter()
        self.sites: Counter[tuple[str, str, str]] = Counter()
        self.attribute = False

    def note(self, name: str) -> None:
        self.commands[name] += 1
        if self.attribute:
            engine_fn, store_fn = _callers()
            self.sites[(engine_fn, store_fn, name)] += 1

    def reset(self) -> None:
        self.commands.clear()
        self.sites.clear()


class CountingRedis(aioredis.Redis):
    """`redis.asyncio.Redis` counting every command it sends (one request/response each)."""

    tally: Tally

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        name = args[0]
        self.tally.note(name.decode() if isinstance(name, bytes) else str(name))
        return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]


def counting_redis_store(url: str, prefix: str, tally: Tally) -> tuple[RedisStore, list[CountingRedis]]:
    """A RedisStore with the pools `RedisStore(url)` would build (64 / 1000 connections), counted."""
    clients: list[CountingRedis] = []
    for max_connections in (64, 1000):  # RedisStore's max_connections and max_waiters defaults
        pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=max_connections, timeout=None)
        client = CountingRedis(connection_pool=pool)
        client.tally = tally
        clients.append(client)
    return RedisStore(client=clients[0], wait_client=clients[1], prefix=prefix), clients


@dataclass
class ServerSnapshot:
    calls: dict[str, int]
    cpu_s: float


async def server_snapshot(admin: aioredis.Redis) -> ServerSnapshot:
    stats: dict[str, Any] = await admin.info("commandstats")
    cpu: dict[str, Any] = await admin.info("cpu")
    calls = {key.removeprefix("cmdstat_"): int(value["calls"]) for key, value in stats.items()}
    return ServerSnapshot(calls, float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]))


def calls_between(before: ServerSnapshot, after: ServerSnapshot) -> Counter[str]:
    diff: Counter[str] = Counter()
    for name, calls in after.calls.items():
        delta = calls - before.calls.get(name, 0)
        if delta > 0 and name != "info":  # our own snapshots
            diff[name] = delta
    return diff


def is_quiet(ours: Counter[str], server: Counter[str]) -> bool:
    return all(server.get(name.lower(), 0) == ours.get(name, 0) for name in QUIET_CHECK)


# --------------------------------------------------------------------------- subjects
@dataclass
class Subject:
    """One store, with a middleware per app shape."""

    name: str
    store: Store
    resume: ResumeMiddleware
    batched: ResumeMiddleware
    live: ResumeMiddleware
    tally: Tally | None = None
    admin: aioredis.Redis | None = None


def make_subject(name: str, store: Store, n_events: int, **redis_parts: Any) -> Subject:
    # a long retention: the resumed stream must outlive every repetition
    policy = Policy(retain_completed_s=600)
    bodies = event_bodies(n_events, final=True)

    def wrap(app: ASGIApp) -> ResumeMiddleware:
        return ResumeMiddleware(app, policy=policy, store=store, secret=SECRET)

    return Subject(
        name=name,
        store=store,
        resume=wrap(stream_app(event_bodies(RESUME_EVENTS, final=True), checkpoint=False, idle=False)),
        batched=wrap(stream_app(bodies, checkpoint=False, idle=False)),
        live=wrap(stream_app(bodies, checkpoint=True, idle=False)),
        **redis_parts,
    )


@dataclass
class Recorded:
    wall_s: float
    cpu_s: float
    priming_id: bytes
    round_trips: int = 0
    server_commands: int = 0
    evalsha: int = 0
    redis_cpu_s: float = 0.0
    quiet: bool = True
    server: Counter[str] = field(default_factory=Counter)


async def record(subject: Subject, middleware: ResumeMiddleware, n_events: int) -> Recorded:
    """One POST whose own client stays attached and reads all `n_events`; timed."""
    client = Client(REQUEST)
    before = await server_snapshot(subject.admin) if subject.admin is not None else None
    if subject.tally is not None:
        subject.tally.commands.clear()
    gc.collect()
    c0 = time.process_time()
    t0 = time.perf_counter()
    await middleware(post_scope(), client.receive, client.send)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    assert client.data_events == n_events and client.final_at is not None, client.data_events
    result = Recorded(wall_s=wall, cpu_s=cpu, priming_id=client.priming_id())
    if subject.admin is not None and subject.tally is not None and before is not None:
        after = await server_snapshot(subject.admin)
        ours = subject.tally.commands
        result.server = calls_between(before, after)
        result.round_trips = sum(ours.values())
        result.server_commands = sum(result.server.values())
        result.evalsha = ours["EVALSHA"]
        result.redis_cpu_s = after.cpu_s - before.cpu_s
        result.quiet = is_quiet(ours, result.server)
    return result


async def forget(subject: Subject, middleware: ResumeMiddleware, priming_id: bytes) -> None:
    """Delete a measured stream (untimed), so the store does not grow from run to run."""
    parsed = middleware.engine.signer.parse_event_id(priming_id.decode())
    assert parsed is not None
    await subject.store.delete_stream(parsed[0])


@dataclass
class Resumed:
    first_s: float
    last_s: float
    done_s: float


async def resume(middleware: ResumeMiddleware, last_event_id: bytes, expect: int) -> Resumed:
    client = Client()
    t0 = time.perf_counter()
    await middleware(resume_scope(last_event_id), client.receive, client.send)
    done = time.perf_counter()
    assert client.data_events == expect, (client.data_events, expect)
    assert client.first_at is not None and client.final_at is not None
    return Resumed(client.first_at - t0, client.final_at - t0, done - t0)


# --------------------------------------------------------------------------- the three measurements
def p90(values: Sequence[float]) -> float:
    """Nearest-rank 90th percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


async def measure_resume(subjects: list[Subject], reps: int) -> dict[tuple[str, str], list[Resumed]]:
    positions: dict[str, dict[str, bytes]] = {}
    for subject in subjects:
        first = await record(subject, subject.resume, RESUME_EVENTS)
        priming = first.priming_id
        head, _, _ = priming.rpartition(b":")
        positions[subject.name] = {"priming": priming, "middle": head + b":" + str(RESUME_MIDDLE).encode()}
        for where, event_id in positions[subject.name].items():  # warm-up and correctness, untimed
            await resume(subject.resume, event_id, _replayed(where))
    out: dict[tuple[str, str], list[Resumed]] = {}
    for rep in range(reps):
        for subject in subjects if rep % 2 == 0 else subjects[::-1]:
            for where, event_id in positions[subject.name].items():
                gc.collect()
                out.setdefault((subject.name, where), []).append(
                    await resume(subject.resume, event_id, _replayed(where))
                )
    for subject in subjects:
        await forget(subject, subject.resume, positions[subject.name]["priming"])
    return out


def _replayed(where: str) -> int:
    return RESUME_EVENTS if where == "priming" else RESUME_EVENTS - RESUME_MIDDLE


async def measure_rate(
    subjects: list[Subject], n_events: int, runs: int
) -> dict[tuple[str, str], list[Recorded]]:
    out: dict[tuple[str, str], list[Recorded]] = {}
    for subject in subjects:  # warm-up (connections, scripts, caches) and correctness, untimed
        for mode in ("batched", "live"):
            middleware = getattr(subject, mode)
            warm = await record(subject, middleware, n_events)
            await forget(subject, middleware, warm.priming_id)
    for run in range(runs):
        for mode in ("batched", "live"):
            for subject in subjects if run % 2 == 0 else subjects[::-1]:
                middleware = getattr(subject, mode)
                result = await record(subject, middleware, n_events)
                await forget(subject, middleware, result.priming_id)
                out.setdefault((subject.name, mode), []).append(result)
                log(
                    f"  run {run + 1}/{runs} {subject.name:6} {mode:7} "
                    f"{n_events / result.wall_s:9.0f} events/s"
                    + (f", {result.round_trips / n_events:.2f} round trips/event" if subject.tally else "")
                )
    return out


@dataclass
class Attribution:
    events: int
    sites: Counter[tuple[str, str, str]]
    commands: Counter[str]
    server: Counter[str]
    quiet: bool


async def measure_attribution(subject: Subject, n_events: int) -> dict[str, Attribution]:
    """One run per mode, and one 1,000-event replay, with every command traced to its caller."""
    assert subject.tally is not None and subject.admin is not None
    tally = subject.tally
    out: dict[str, Attribution] = {}
    for mode in ("batched", "live"):
        middleware: ResumeMiddleware = getattr(subject, mode)
        tally.reset()
        tally.attribute = True
        result = await record(subject, middleware, n_events)
        tally.attribute = False
        out[mode] = Attribution(
            n_events, Counter(tally.sites), Counter(tally.commands), result.server, result.quiet
        )
        await forget(subject, middleware, result.priming_id)
    stream = await record(subject, subject.resume, RESUME_EVENTS)
    before = await server_snapshot(subject.admin)
    tally.reset()
    tally.attribute = True
    await resume(subject.resume, stream.priming_id, RESUME_EVENTS)
    tally.attribute = False
    after = await server_snapshot(subject.admin)
    server = calls_between(before, after)
    out["replay"] = Attribution(
        RESUME_EVENTS, Counter(tally.sites), Counter(tally.commands), server, is_quiet(tally.commands, server)
    )
    await forget(subject, subject.resume, stream.priming_id)
    return out


# --------------------------------------------------------------------------- machine facts
def _run(command: list[str]) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=10, cwd=ROOT).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def other_load() -> str:
    found = [line for line in _run(["pgrep", "-af", "pytest"]).splitlines() if line]
    return f"{len(found)} pytest process(es)" if found else "no pytest process"


async def machine_facts(admin: aioredis.Redis) -> dict[str, str]:
    server: dict[str, Any] = await admin.info("server")
    memory: dict[str, Any] = await admin.info("memory")
    rev = _run(["git", "rev-parse", "--short", "HEAD"])
    status = _run(["git", "status", "--porcelain", "--", "mcp_resume_asgi"])
    dirty = [line.split(maxsplit=1)[-1] for line in status.splitlines() if line.strip()]
    return {
        "nproc": _run(["nproc"]),
        "cpu": _cpu_model(),
        "python": platform.python_version(),
        "redis_server_cli": _run(["redis-server", "--version"]),
        "redis_server_live": f"{server.get('redis_version', '?')} "
        f"(maxmemory-policy {memory.get('maxmemory_policy', '?')})",
        "redis_py": redis.__version__,
        "package": f"{rev}" + (f" + uncommitted changes to {', '.join(dirty)}" if dirty else ""),
        "anyio": metadata.version("anyio"),
    }


# --------------------------------------------------------------------------- report
def _ms(seconds: float) -> str:
    return f"{1000 * seconds:.2f}"


def _per(count: float, events: int) -> str:
    return f"{count / events:.2f}"


def _cell(mode: str, count: int, events: int) -> str:
    """Attribution cells: per recorded event for a recording run, a plain count for the replay."""
    if not count:
        return ""
    return str(count) if mode == "replay" else f"{count / events:.4f}"


def build_report(
    *,
    command: str,
    quick: bool,
    facts: dict[str, str],
    load_before: tuple[str, str],
    load_after: tuple[str, str],
    reps: int,
    n_events: int,
    runs: int,
    resume_results: dict[tuple[str, str], list[Resumed]],
    rate_results: dict[tuple[str, str], list[Recorded]],
    attribution: dict[str, Attribution],
    elapsed_s: float,
) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "## Stores: memory vs Redis",
        "",
        f"Command: `{command}`{' (quick)' if quick else ''}, {now}, {elapsed_s:.0f} s, "
        f"mcp_resume_asgi at {facts['package']}.",
        "",
        f"Machine: nproc {facts['nproc']}, {facts['cpu']}; Python {facts['python']}; "
        f"`redis-server --version`: {facts['redis_server_cli']}; the server on loopback reports "
        f"{facts['redis_server_live']}; redis-py {facts['redis_py']}; anyio {facts['anyio']}. "
        f"Other load: {load_before[0]} at start (loadavg {load_before[1]}), "
        f"{load_after[0]} at the end (loadavg {load_after[1]}).",
        "",
        "In process, one asyncio loop, no sockets between client and middleware (the `RedisStore` talks "
        "to Redis over loopback TCP). `Policy(retain_completed_s=600)`, everything else default. "
        "Both stores run the same code; their runs are interleaved.",
        "",
        f"### 1. Resume latency: a completed {RESUME_EVENTS:,}-event stream, GET `/mcp` + `Last-Event-ID`",
        "",
        f"{reps} repetitions each, ms from the call: to the first body chunk carrying a replayed event, "
        "to the chunk carrying the last one (the result), and to the call's return (the connection "
        "detached). The engine reads and writes at most 512 events per chunk. p90 is nearest-rank.",
        "",
        "| store | Last-Event-ID | events replayed | first event, median | p90 | last event, median | p90 "
        "| call returns, median |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for (name, where), values in resume_results.items():
        first = [r.first_s for r in values]
        last = [r.last_s for r in values]
        done = [r.done_s for r in values]
        label = "priming id (`…:0`)" if where == "priming" else f"event {RESUME_MIDDLE} (`…:{RESUME_MIDDLE}`)"
        lines.append(
            f"| {name} | {label} | {_replayed(where):,} | {_ms(statistics.median(first))} | {_ms(p90(first))} "
            f"| {_ms(statistics.median(last))} | {_ms(p90(last))} | {_ms(statistics.median(done))} |"
        )
    lines += [
        "",
        f"### 2. Recording rate: one stream of {n_events:,} events, its client attached and reading",
        "",
        f"Events/s = {n_events:,} / wall time of the whole POST (create, record, deliver, complete); "
        f"median of {runs} runs (min-max). *batched*: the app never yields between events; "
        "*live*: `await anyio.sleep(0)` after each. CPU: this process's CPU time; Redis CPU: "
        "`used_cpu_user + used_cpu_sys` of the Redis server over the run.",
        "",
        "| store | app | events/s, median | min-max | µs/event (wall) | process CPU µs/event "
        "| Redis server CPU µs/event |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    medians: dict[tuple[str, str], float] = {}
    for (name, mode), runs_of in sorted(rate_results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        rates = [n_events / r.wall_s for r in runs_of]
        medians[(name, mode)] = statistics.median(rates)
        wall = statistics.median(r.wall_s for r in runs_of)
        cpu = statistics.median(r.cpu_s for r in runs_of)
        redis_cpu = (
            f"{1e6 * statistics.median(r.redis_cpu_s for r in runs_of) / n_events:.1f}"
            if name == "redis"
            else "-"
        )
        lines.append(
            f"| {name} | {mode} | {statistics.median(rates):,.0f} | {min(rates):,.0f}-{max(rates):,.0f} "
            f"| {1e6 * wall / n_events:.1f} | {1e6 * cpu / n_events:.1f} | {redis_cpu} |"
        )
    for mode in ("batched", "live"):
        if ("memory", mode) in medians and ("redis", mode) in medians:
            lines.append("")
            lines.append(
                f"{mode}: memory records {medians[('memory', mode)] / medians[('redis', mode)]:.1f}x "
                "as many events per second as Redis."
            )
    lines += [
        "",
        f"### 3. Redis traffic while one stream records {n_events:,} events (client attached)",
        "",
        "Round trips: commands the store's two clients sent (counted in `execute_command`). Redis "
        "commands: calls Redis counted in `INFO commandstats` over the run, the scripts' own `redis.call`s "
        "included. Medians over the timed runs of section 2; *quiet*: runs in which Redis saw exactly "
        "our EVALSHA/XREAD/HMGET calls (no other client).",
        "",
        "| app | round trips/event | EVALSHA/event | other round trips/event | Redis commands/event "
        "| of which inside scripts | quiet runs |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for mode in ("batched", "live"):
        redis_runs = rate_results.get(("redis", mode), [])
        if not redis_runs:
            continue
        rt = statistics.median(r.round_trips for r in redis_runs)
        ev = statistics.median(r.evalsha for r in redis_runs)
        sc = statistics.median(r.server_commands for r in redis_runs)
        lines.append(
            f"| {mode} | {_per(rt, n_events)} | {_per(ev, n_events)} | {_per(rt - ev, n_events)} "
            f"| {_per(sc, n_events)} | {_per(sc - rt, n_events)} | {sum(r.quiet for r in redis_runs)}/{len(redis_runs)} |"
        )
    if attribution:
        modes = [m for m in ("batched", "live", "replay") if m in attribution]
        headers = [f"{m} (per resume)" if m == "replay" else f"{m} (per event)" for m in modes]
        lines += [
            "",
            "Where the round trips come from: one extra, untimed run per app with every command traced "
            "to its caller, per recorded event; *replay*: one resume replaying "
            f"{RESUME_EVENTS:,} events of a completed stream, commands per resume.",
            "",
            "| engine function | RedisStore method | command | " + " | ".join(headers) + " |",
            "|---|---|---|" + "---:|" * len(modes),
        ]
        keys: Counter[tuple[str, str, str]] = Counter()
        for mode in modes:
            for key, count in attribution[mode].sites.items():
                keys[key] += count
        for key, _ in keys.most_common():
            cells = [_cell(m, attribution[m].sites.get(key, 0), attribution[m].events) for m in modes]
            lines.append(f"| `{key[0]}` | `{key[1]}` | {key[2]} | " + " | ".join(cells) + " |")
        totals = [_cell(m, sum(attribution[m].commands.values()), attribution[m].events) for m in modes]
        lines.append("| **total** | | | " + " | ".join(f"**{t}**" for t in totals) + " |")
        lines += [
            "",
            "What Redis executed in the same runs (`INFO commandstats`, the scripts' commands included), "
            "top 20; quiet: "
            + ", ".join(f"{m} {'yes' if attribution[m].quiet else 'NO'}" for m in modes)
            + ":",
            "",
            "| Redis command | " + " | ".join(headers) + " |",
            "|---|" + "---:|" * len(modes),
        ]
        server_keys: Counter[str] = Counter()
        for mode in modes:
            for name, count in attribution[mode].server.items():
                server_keys[name] += count
        for name, _ in server_keys.most_common(20):
            cells = [_cell(m, attribution[m].server.get(name, 0), attribution[m].events) for m in modes]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        server_totals = [_cell(m, sum(attribution[m].server.values()), attribution[m].events) for m in modes]
        lines.append("| **all** | " + " | ".join(f"**{t}**" for t in server_totals) + " |")
    lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------- main
async def run(args: argparse.Namespace, command: str) -> str:
    started = time.perf_counter()
    n_events = 2_000 if args.quick else 10_000
    reps = 20 if args.quick else 30
    runs = 5 if args.quick else 7
    prefix = f"bench-stores:{secrets.token_hex(6)}:"
    load_before = (other_load(), _loadavg())
    admin = aioredis.Redis.from_url(args.redis_url)
    tally = Tally()
    redis_store, clients = counting_redis_store(args.redis_url, prefix, tally)
    try:
        facts = await machine_facts(admin)
        subjects = [
            make_subject("memory", MemoryStore(), n_events),
            make_subject("redis", redis_store, n_events, tally=tally, admin=admin),
        ]
        log(f"bench.stores: prefix {prefix}, {n_events} events, {reps} resume repetitions, {runs} runs")
        log("1. resume latency")
        resume_results = await measure_resume(subjects, reps)
        log("2. recording rate")
        rate_results = await measure_rate(subjects, n_events, runs)
        log("3. round trips by caller")
        attribution = await measure_attribution(subjects[1], n_events)
    finally:
        await redis_store.clear()
        left = [key async for key in admin.scan_iter(match=prefix + "*", count=1000)]
        if left:
            await admin.unlink(*left)
        for client in clients:
            await client.aclose()
        await admin.aclose()
    load_after = (other_load(), _loadavg())
    return build_report(
        command=command,
        quick=args.quick,
        facts=facts,
        load_before=load_before,
        load_after=load_after,
        reps=reps,
        n_events=n_events,
        runs=runs,
        resume_results=resume_results,
        rate_results=rate_results,
        attribution=attribution,
        elapsed_s=time.perf_counter() - started,
    )


def command_line(module: str, argv: list[str] | None) -> str:
    """How this run was started, to print beside its figures (`python -m <module> ...`)."""
    given = sys.argv[1:] if argv is None else argv
    executable = os.path.relpath(sys.executable, ROOT) if sys.executable.startswith(str(ROOT)) else "python"
    return shlex.join([executable, "-m", module, *given])


def publish(text: str, name: str) -> None:
    """Keep the report in `bench/results/<name>` and print it."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / name).write_text(text)
    sys.stdout.write(text)
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.stores", description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--quick", action="store_true", help="2,000 events per stream, 20 repetitions, 5 runs"
    )
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL, help="a Redis on loopback")
    args = parser.parse_args(argv)
    publish(asyncio.run(run(args, command_line("bench.stores", argv))), "stores.md")


if __name__ == "__main__":
    main()
