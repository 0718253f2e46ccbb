"""One Redis instance vs a 3-primary Redis Cluster under 4 wrapped processes: events/s, tasks/get/s.

    python -m bench.cluster               # ~2 min: writes its section of BENCHMARKS.md
    python -m bench.cluster --quick       # smoke run (~40 s), publishes nothing
    python -m bench.cluster --replicas 1  # the cluster's primaries with a replica each
    python -m bench.cluster --profile     # the app processes under cProfile: self time by package

Issue 24's bar: throughput on the cluster with 4 processes higher than on one instance with 4
processes, in the same run. The run starts its own Redis servers on free loopback ports (one
`redis-server`, and `--cluster-enabled` ones joined by `redis-cli --cluster create`; no
persistence), then 4 uvicorn processes per topology (`python -m bench.cluster serve`: the
benchmark's stock `MCPServer` wrapped with `resumable(..., tasks=True)` on a `RedisStore` given
the URL of one node, which finds a cluster by itself). Both fleets run side by side; their
rounds alternate (single, cluster, single, ...) so other load on the machine hits both alike.

* events/s: 16 sessions (2025-11-25), spread over the 4 processes (each session on one
  keep-alive connection to one process, as a balancer with affinity would place it), each
  calling `stream(count=20)` back to back: 20 `notifications/progress` then the result, every
  answer checked (count, order, result); events/s counts every one delivered in the window.
* tasks/get/s: 64 tasks (`echo`, 2026-07-28 with the Tasks extension, `task_after_s=0`) made
  and finished first, then 16 connections spread over the 4 processes polling them with
  `tasks/get` (each answer checked `completed`); any process answers any task from the store.

Beside each figure: the CPU seconds the app processes and the Redis servers used per 1,000
operations (`/proc/<pid>/stat`), which is where the time goes. The machine's cores are shared
with the load generator, every Redis server and whatever else runs: the figures say so.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context

from bench.loadgen import Connection, HTTPError, sse_messages

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
SECRET = "bench-cluster-shared-secret-0123456789"
PROCESSES = 4
CONCURRENCY = 16
EVENTS_PER_CALL = 20
TASKS = 64
MODERN = "2026-07-28"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
SECTION_BEGIN = "<!-- bench-cluster:begin - written by `python -m bench.cluster`; edits up to bench-cluster:end are lost -->"
SECTION_END = "<!-- bench-cluster:end -->"


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the app (child)
async def stream(count: int, ctx: Context) -> str:
    """Report `count` progress steps, then say so."""
    for step in range(1, count + 1):
        await ctx.report_progress(float(step), float(count))
    return f"streamed {count}"


def build_app(redis_url: str, prefix: str) -> Any:
    """The benchmark's stock app with a `stream` tool, wrapped with Tasks on a `RedisStore`."""
    from mcp.server.mcpserver import MCPServer

    from bench.apps import echo
    from mcp_resume_asgi import Policy, resumable
    from mcp_resume_asgi.store import RedisStore

    server = MCPServer("bench-cluster", version="0.0.1", log_level="WARNING")
    server.add_tool(echo, structured_output=False)
    server.add_tool(stream, structured_output=False)
    policy = Policy(task_after_s=0, task_ttl_s=3600, max_tasks_per_principal=None)
    return resumable(
        server.streamable_http_app(host=HOST),
        policy=policy,
        store=RedisStore(redis_url, prefix=prefix),
        secret=SECRET,
        tasks=True,
    )


async def _serve(redis_url: str, prefix: str, profile: str) -> None:
    import uvicorn

    sock = socket.socket(
        socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP
    )  # TCP_NODELAY: bench/serve.py
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, 0))
    sock.listen(1024)
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        build_app(redis_url, prefix),
        lifespan="on",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=1,
        timeout_keep_alive=60,
        backlog=1024,
    )
    server = uvicorn.Server(config)

    async def announce() -> None:
        while not server.started:  # uvicorn offers no event for it  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        sys.stdout.write(f"READY {port}\n")
        sys.stdout.flush()

    task = asyncio.create_task(announce())
    profiler = None
    if profile:
        import cProfile

        # uvicorn raises SIGTERM again once it has shut down, which would end the process
        # before the profile is written: stop it here instead.
        server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, setattr, server, "should_exit", True)

        profiler = cProfile.Profile()
        profiler.enable()
    try:
        await server.serve(sockets=[sock])
    finally:
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(f"{profile}-{os.getpid()}.prof")
        task.cancel()
        sock.close()


def _die_with_parent() -> None:
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


# --------------------------------------------------------------------------- Redis servers
def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


@dataclass
class RedisProcess:
    """One `redis-server` on a free loopback port in a temporary directory, no persistence."""

    cluster: bool
    port: int = field(default_factory=_free_port)
    dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="mcp-resume-bench-redis-")))
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = ["--port", str(self.port), "--bind", HOST, "--dir", str(self.dir), "--save", ""]
        args += ["--appendonly", "no", "--logfile", "redis.log"]
        if self.cluster:
            args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
            args += ["--cluster-port", str(_free_port()), "--repl-diskless-sync-delay", "0"]
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("bench.cluster needs redis-server and redis-cli (apt-get install redis-server)")
        self.proc = subprocess.Popen(
            [binary, *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while not _ask(self.port, "ping").startswith(b"PONG"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on {self.port} did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)


def _ask(port: int, *command: str) -> bytes:
    cli = shutil.which("redis-cli") or "redis-cli"
    done = subprocess.run([cli, "-h", HOST, "-p", str(port), *command], capture_output=True, timeout=10)
    return done.stdout


@contextlib.contextmanager
def redis_servers(*, cluster: bool, primaries: int = 3, replicas: int = 0) -> Iterator[list[RedisProcess]]:
    """One instance, or a cluster of `primaries` (with `replicas` each): started, always stopped."""
    nodes = [RedisProcess(cluster) for _ in range(primaries * (1 + replicas) if cluster else 1)]
    try:
        for node in nodes:
            node.start()
        if cluster:
            cli = shutil.which("redis-cli") or "redis-cli"
            create = [cli, "--cluster", "create", *(f"{HOST}:{n.port}" for n in nodes)]
            create += ["--cluster-replicas", str(replicas), "--cluster-yes"]
            subprocess.run(create, capture_output=True, timeout=60, check=True)
            deadline = time.monotonic() + 30
            while not all(b"cluster_state:ok" in _ask(n.port, "cluster", "info") for n in nodes):
                if time.monotonic() > deadline:
                    raise RuntimeError("the Redis Cluster did not come up")
                time.sleep(0.05)
        yield nodes
    finally:
        for node in nodes:
            node.stop()


# --------------------------------------------------------------------------- app processes
@dataclass
class Fleet:
    name: str
    redis: list[RedisProcess]
    procs: list[subprocess.Popen[str]]
    ports: list[int]

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def redis_pids(self) -> list[int]:
        return [n.proc.pid for n in self.redis if n.proc is not None]


def start_fleet(name: str, redis: list[RedisProcess], prefix: str, profile_dir: str = "") -> Fleet:
    url = f"redis://{HOST}:{redis[0].port}/0"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    profile = ["--profile-to", f"{profile_dir}/{name}"] if profile_dir else []
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.cluster",
                "serve",
                "--redis-url",
                url,
                "--prefix",
                prefix,
                *profile,
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        for _ in range(PROCESSES)
    ]
    ports = []
    for proc in procs:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.match(r"READY (\d+)", line)
        if match is None:
            raise RuntimeError(f"a {name} app process did not start: {line!r}")
        ports.append(int(match.group(1)))
    return Fleet(name, redis, procs, ports)


def stop_fleet(fleet: Fleet) -> None:
    for proc in fleet.procs:
        proc.terminate()
    for proc in fleet.procs:
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of the processes, from /proc (Linux)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


# --------------------------------------------------------------------------- load
def _headers(session_id: str = "") -> dict[str, str]:
    h = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": "2025-11-25",
    }
    if session_id:
        h["mcp-session-id"] = session_id
    return h


async def _initialize(conn: Connection) -> str:
    body = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "bench-cluster", "version": "0"},
        },
    }
    status, headers, payload = await conn.post("/mcp", _headers(), json.dumps(body).encode())
    if status != 200:
        raise HTTPError(f"initialize answered {status}: {payload[:200]!r}")
    session_id = headers["mcp-session-id"]
    note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
    status, _, _ = await conn.post("/mcp", _headers(session_id), note)
    if status != 202:
        raise HTTPError(f"notifications/initialized answered {status}")
    return session_id


async def _stream_call(conn: Connection, session_id: str, request_id: int) -> int:
    """One `stream` call; the events it delivered (checked: every step in order, then the result)."""
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {
                "name": "stream",
                "arguments": {"count": EVENTS_PER_CALL},
                "_meta": {"progressToken": request_id},
            },
        }
    ).encode()
    status, _, payload = await conn.post("/mcp", _headers(session_id), body)
    messages = sse_messages(payload)
    steps = [m.get("params", {}).get("progress") for m in messages[:-1]]
    answer = messages[-1] if messages else {}
    if (
        status != 200
        or steps != [float(i) for i in range(1, EVENTS_PER_CALL + 1)]
        or answer.get("id") != request_id
        or f"streamed {EVENTS_PER_CALL}" not in json.dumps(answer.get("result"))
    ):
        raise HTTPError(f"wrong stream answer ({status}): {payload[:300]!r}")
    return len(messages)


def _modern(method: str, params: dict[str, Any], request_id: int, name: str) -> tuple[dict[str, str], bytes]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}},
    }
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**params, "_meta": meta}}
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": MODERN,
        "mcp-method": method,
        "mcp-name": name,
    }
    return headers, json.dumps(body).encode()


def _answer(payload: bytes) -> dict[str, Any]:
    text = payload.decode()
    if text.lstrip().startswith("{"):
        found: dict[str, Any] = json.loads(text)
        return found
    messages = sse_messages(payload)
    if not messages:
        raise HTTPError(f"no answer in {payload[:300]!r}")
    last: dict[str, Any] = messages[-1]
    return last


async def make_tasks(fleet: Fleet) -> list[str]:
    """`TASKS` finished `echo` tasks, made through every process in turn."""
    ids: list[str] = []
    for n in range(TASKS):
        conn = Connection(HOST, fleet.ports[n % len(fleet.ports)])
        await conn.open()
        try:
            headers, body = _modern("tools/call", {"name": "echo", "arguments": {"text": "t"}}, n, "echo")
            status, _, payload = await conn.post("/mcp", headers, body)
            result = _answer(payload).get("result") or {}
            if status != 200 or result.get("resultType") != "task":
                raise HTTPError(f"no task ({status}): {payload[:300]!r}")
            ids.append(result["taskId"])
        finally:
            await conn.close()
    for task_id in ids:  # each finished before the timing
        for _ in range(200):
            if await _get(Connection(HOST, fleet.ports[0]), task_id, open_it=True) == "completed":
                break
            await asyncio.sleep(0.01)
    return ids


async def _get(conn: Connection, task_id: str, request_id: int = 1, *, open_it: bool = False) -> str:
    if open_it:
        await conn.open()
    try:
        headers, body = _modern("tasks/get", {"taskId": task_id}, request_id, task_id)
        status, _, payload = await conn.post("/mcp", headers, body)
        result = _answer(payload).get("result") or {}
        if status != 200 or "status" not in result:
            raise HTTPError(f"tasks/get answered {status}: {payload[:300]!r}")
        return str(result["status"])
    finally:
        if open_it:
            await conn.close()


@dataclass
class Window:
    ops: int = 0
    errors: int = 0
    seconds: float = 0.0
    app_cpu: float = 0.0
    redis_cpu: float = 0.0


async def run_window(fleet: Fleet, kind: str, seconds: float, task_ids: list[str]) -> Window:
    """`CONCURRENCY` clients over the fleet's processes for `seconds` (after a short warm-up)."""
    conns = [Connection(HOST, fleet.ports[i % len(fleet.ports)]) for i in range(CONCURRENCY)]
    for conn in conns:
        await conn.open()
    sessions = (
        await asyncio.gather(*(_initialize(c) for c in conns)) if kind == "events" else [""] * len(conns)
    )
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.3
    stop = start + seconds
    window = Window(seconds=seconds)
    measuring = False
    cpu0 = (0.0, 0.0)

    async def client(i: int) -> None:
        nonlocal measuring, cpu0
        request_id = 0
        while (now := loop.time()) < stop:
            if not measuring and now >= start:
                measuring = True
                cpu0 = (cpu_seconds(fleet.pids()), cpu_seconds(fleet.redis_pids()))
            request_id += 1
            try:
                if kind == "events":
                    got = await _stream_call(conns[i], sessions[i], request_id)
                else:
                    task_id = task_ids[(i * 7 + request_id) % len(task_ids)]
                    status = await _get(conns[i], task_id, request_id)
                    if status != "completed":
                        raise HTTPError(f"task {task_id} {status}")
                    got = 1
            except (HTTPError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
                window.errors += 1
                log(f"  {fleet.name} {kind}: {exc}")
                await conns[i].close()
                conns[i] = Connection(HOST, fleet.ports[i % len(fleet.ports)])
                await conns[i].open()
                if kind == "events":
                    sessions[i] = await _initialize(conns[i])
                continue
            if start <= loop.time() <= stop:
                window.ops += got

    try:
        await asyncio.gather(*(client(i) for i in range(len(conns))))
    finally:
        window.app_cpu = cpu_seconds(fleet.pids()) - cpu0[0]
        window.redis_cpu = cpu_seconds(fleet.redis_pids()) - cpu0[1]
        for conn in conns:
            await conn.close()
    return window


# --------------------------------------------------------------------------- the run
@dataclass
class Figures:
    windows: dict[str, list[Window]] = field(default_factory=dict)

    def median(self, key: str, what: str) -> float:
        values = []
        for w in self.windows.get(key, []):
            if what == "rate":
                values.append(w.ops / w.seconds)
            elif what == "app_ms":
                values.append(1e6 * w.app_cpu / max(w.ops, 1))
            elif what == "redis_ms":
                values.append(1e6 * w.redis_cpu / max(w.ops, 1))
        return statistics.median(values) if values else float("nan")


def _loadavg() -> float:
    with contextlib.suppress(OSError):
        return float(Path("/proc/loadavg").read_text().split()[0])
    return float("nan")


async def measure(fleets: list[Fleet], rounds: int, seconds: float) -> tuple[Figures, list[float]]:
    figures = Figures()
    loads = []
    tasks = {fleet.name: await make_tasks(fleet) for fleet in fleets}
    for r in range(rounds):
        for kind in ("events", "tasks/get"):
            order = fleets if r % 2 == 0 else list(reversed(fleets))
            for fleet in order:
                window = await run_window(fleet, kind, seconds, tasks[fleet.name])
                figures.windows.setdefault(f"{fleet.name} {kind}", []).append(window)
                loads.append(_loadavg())
                log(
                    f"round {r + 1}/{rounds} {fleet.name:8} {kind:9}: {window.ops / seconds:8.0f}/s "
                    f"errors={window.errors} app {window.app_cpu:.2f}s redis {window.redis_cpu:.2f}s CPU"
                )
    return figures, loads


def render(figures: Figures, loads: list[float], args: argparse.Namespace, commit: str) -> str:
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    cpus = os.cpu_count()
    topology = f"3 primaries{f' with {args.replicas} replica(s) each' if args.replicas else ', no replicas'}"
    lines = [
        "## Redis Cluster: one instance vs 3 primaries, 4 processes (`python -m bench.cluster`)",
        "",
        SECTION_BEGIN,
        "",
        f"`.venv/bin/python -m bench.cluster` at {commit}, {date}: {PROCESSES} uvicorn processes per "
        f"topology ({topology}; no persistence), {CONCURRENCY} clients spread over them, "
        f"{args.rounds} alternating rounds of {args.seconds:g} s, medians. **{cpus} CPUs, shared** by "
        f"the load generator, all 8 app processes, every Redis server and other work on the machine "
        f"(load average during the windows: median {statistics.median(loads):.1f}).",
        "",
        "| what | one instance | cluster | cluster / one | app CPU µs per op (one / cluster) | Redis CPU µs per op (one / cluster) |",
        "|---|---|---|---|---|---|",
    ]
    bar_met = True
    for kind, unit in (("events", "events/s"), ("tasks/get", "tasks/get/s")):
        one, many = figures.median(f"single {kind}", "rate"), figures.median(f"cluster {kind}", "rate")
        bar_met = bar_met and many > one
        lines.append(
            f"| {unit} | {one:,.0f} | {many:,.0f} | {many / one:.2f}x | "
            f"{figures.median(f'single {kind}', 'app_ms'):.0f} / {figures.median(f'cluster {kind}', 'app_ms'):.0f} | "
            f"{figures.median(f'single {kind}', 'redis_ms'):.0f} / {figures.median(f'cluster {kind}', 'redis_ms'):.0f} |"
        )
    errors = sum(w.errors for ws in figures.windows.values() for w in ws)
    lines += [
        "",
        f"The bar (cluster faster than one instance, 4 processes each): **{'met' if bar_met else 'not met'}**"
        f"{'' if bar_met else ' on this machine'}. Errors: {errors}.",
        "",
        SECTION_END,
    ]
    return "\n".join(lines) + "\n"


#: Where a function's self time is counted, by the path of its file (first match wins).
BUCKETS = (
    ("mcp_resume_asgi/store", "mcp_resume_asgi.store"),
    ("mcp_resume_asgi", "mcp_resume_asgi (rest)"),
    ("/redis/", "redis-py"),
    ("/mcp/", "mcp SDK"),
    ("/pydantic", "pydantic"),
    ("/starlette/", "starlette"),
    ("/uvicorn/", "uvicorn"),
    ("/h11/", "uvicorn"),
    ("/httptools/", "uvicorn"),
    ("asyncio", "asyncio"),
    ("/anyio/", "anyio"),
)


def profile_summary(profile_dir: str) -> str:
    """Self time by package over each fleet's app processes (cProfile, `--profile`)."""
    import pstats

    rows: dict[str, dict[str, float]] = {}
    for path in sorted(Path(profile_dir).glob("*.prof")):
        fleet = path.name.split("-", 1)[0]
        stats = pstats.Stats(str(path))
        totals = rows.setdefault(fleet, {})
        for (filename, _line, name), (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
            if "poll' of 'select" in name:
                continue  # the event loop waiting: idle, not work
            bucket = next((b for needle, b in BUCKETS if needle in filename), "")
            if not bucket:
                # builtins: by what they are (sockets, json, ...)
                bucket = "builtins: " + (name.strip("{}").split(" of ")[0].replace("method ", "")[:40])
            totals[bucket] = totals.get(bucket, 0.0) + tottime
    for totals in rows.values():  # small builtins together
        for bucket in [
            b for b, t in totals.items() if b.startswith("builtins: ") and t < 0.02 * sum(totals.values())
        ]:
            totals["builtins (each < 2%)"] = totals.get("builtins (each < 2%)", 0.0) + totals.pop(bucket)
    names = sorted(
        {b for t in rows.values() for b in t}, key=lambda b: -sum(t.get(b, 0) for t in rows.values())
    )
    fleets = sorted(rows)
    lines = [
        "| self time (cProfile) | " + " | ".join(fleets) + " |",
        "|---|" + "---|" * len(fleets),
    ]
    for bucket in names:
        cells = []
        for fleet in fleets:
            total = sum(rows[fleet].values()) or 1.0
            cells.append(
                f"{rows[fleet].get(bucket, 0.0):.1f} s ({100 * rows[fleet].get(bucket, 0.0) / total:.0f}%)"
            )
        lines.append(f"| {bucket} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def publish(section: str) -> None:
    path = ROOT / "BENCHMARKS.md"
    text = path.read_text()
    begin = text.find("## Redis Cluster: one instance vs 3 primaries")
    end = text.find(SECTION_END)
    if begin != -1 and end != -1:
        tail = text[end + len(SECTION_END) :].lstrip("\n")
        notes = ""
        # Hand-written notes after the generated block (up to the next section) are kept.
        following = tail.split("\n## ", 1)
        notes, rest = following[0], ("## " + following[1] if len(following) > 1 else "")
        text = text[:begin] + section + ("\n" + notes.rstrip("\n") + "\n" if notes.strip() else "")
        text += ("\n" + rest) if rest else ""
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "mcp_resume_asgi"], capture_output=True, text=True, cwd=ROOT
    )
    return done.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", nargs="?", default="run", choices=("run", "serve"))
    parser.add_argument("--redis-url", default="")
    parser.add_argument("--prefix", default="")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--replicas", type=int, default=0)
    parser.add_argument("--publish", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument(
        "--profile", action="store_true", help="cProfile the app processes; publishes nothing"
    )
    parser.add_argument("--profile-to", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode == "serve":
        _die_with_parent()
        asyncio.run(_serve(args.redis_url, args.prefix, args.profile_to))
        return
    if args.quick:
        args.rounds, args.seconds = 1, 1.5
    publishing = (not args.quick and not args.profile) if args.publish is None else args.publish
    profile_dir = tempfile.mkdtemp(prefix="bench-cluster-prof-") if args.profile else ""
    prefix = f"bench-cluster:{secrets.token_hex(4)}:"
    with (
        redis_servers(cluster=False) as single,
        redis_servers(cluster=True, replicas=args.replicas) as cluster,
    ):
        fleets = [
            start_fleet("single", single, prefix, profile_dir),
            start_fleet("cluster", cluster, prefix, profile_dir),
        ]
        try:
            figures, loads = asyncio.run(measure(fleets, args.rounds, args.seconds))
        finally:
            for fleet in fleets:
                stop_fleet(fleet)
    section = render(figures, loads, args, _commit())
    print(section)
    if profile_dir:
        print(profile_summary(profile_dir))
        shutil.rmtree(profile_dir, ignore_errors=True)
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    raw = {
        "args": vars(args),
        "cpus": os.cpu_count(),
        "loadavg": loads,
        "windows": {k: [w.__dict__ for w in ws] for k, ws in figures.windows.items()},
    }
    (results / "cluster.json").write_text(json.dumps(raw, indent=1))
    if publishing:
        publish(section)
        log("wrote BENCHMARKS.md (its Redis Cluster section) and bench/results/cluster.json")


if __name__ == "__main__":
    main()
