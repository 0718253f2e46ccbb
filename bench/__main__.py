"""`python -m bench`: the standard benchmarks of mcp-resume-asgi, side by side, in one run.

1. HTTP overhead on a real app: a stock `MCPServer` (SSE answers) under uvicorn, one
   process per variant - bare, wrapped (memory store), wrapped on a Redis store, the
   SDK's own event store, and wrapped with the OpenTelemetry SDK exporting in memory - each pinned to CPU 1; the load generator runs here, pinned to
   CPU 0, calling the `echo` tool (one event per answer) or the `progress` tool (two
   progress notifications, then the result) with 1, 4 and 32 clients. Windows are
   interleaved (every repetition visits every clients count, tool and variant), figures
   are medians.
2. (in 1) the SDK's own resumability: `sdk_es`.
3. The engine in process: events/s through the middleware vs the bare app, and the
   replay of recorded events after a Last-Event-ID, memory and Redis store, against the
   number of events (child processes, CPU 1).
4. Memory of idle detached streams (child processes, one per measurement).
5. Scaling 1x -> 10x for each of the above.

Results: the raw figures in bench/results/latest.json, the full Markdown report in
bench/results/latest.md (and on stdout), the plots and the short page (`bench.page`).
A full run publishes: BENCHMARKS.md (its generated part), bench/plots/*.png and
bench/results/benchmarks.json, all committed. `--quick` checks the machinery and
publishes nothing: its page and plots go to bench/results/. Redis: the one at
`--redis-url`, under a fresh key prefix deleted at the end (`--no-redis` to skip it).
`--profile` adds py-spy profiles (bench/results/profiles/).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import hashlib
import json
import os
import platform
import secrets
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from bench import page, report
from bench.loadgen import TOOLS, run_load

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
#: What a full run publishes (committed): the page (page.PAGE), its plots, and the figures behind them.
PLOTS = ROOT / "bench" / "plots"
PUBLISHED = RESULTS / "benchmarks.json"
#: As in bench.apps, which this process does not import (it imports mcp_resume_asgi,
#: which with `--at` only the child processes may load).
VARIANTS = ("bare", "wrapped", "wrapped_redis", "sdk_es", "wrapped_otel")
REDIS_VARIANTS = frozenset({"wrapped_redis", "persist_redis"})
HTTP_CONCURRENCIES = [1, 4, 32]
ENGINE_EVENTS = [1_000, 10_000]
REPLAY_EVENTS = [100, 300, 1_000, 3_000, 10_000]  # up to Policy.max_events_per_stream
QUICK_REPLAY_EVENTS = [100, 1_000, 10_000]
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
#: Where the child processes run (and import `mcp_resume_asgi` from): the repository,
#: or with `--at REV` a snapshot of that revision's package next to a copy of bench/.
CODE_ROOT = ROOT
LOADGEN_CPU = 0
SERVER_CPU = 1
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class LoadLog:
    """The machine's 1-minute load average, sampled at every measurement, so the page can
    say under what load its figures were taken (the bench itself keeps about 2 busy)."""

    def __init__(self) -> None:
        self.samples: list[float] = []

    def note(self) -> None:
        with contextlib.suppress(OSError, ValueError, IndexError):
            self.samples.append(float(Path("/proc/loadavg").read_text().split()[0]))

    def summary(self) -> dict[str, float | int]:
        if not self.samples:
            return {"samples": 0}
        return {
            "samples": len(self.samples),
            "min": min(self.samples),
            "median": statistics.median(self.samples),
            "max": max(self.samples),
        }


LOAD = LoadLog()


@dataclass(frozen=True)
class RedisArea:
    """The Redis the Redis-store figures use, and a fresh key prefix there: every child
    keeps its keys under it, and `clean()` deletes whatever is left at the end."""

    url: str
    prefix: str
    version: str

    @classmethod
    def open(cls, url: str) -> tuple[RedisArea | None, str]:
        """The area, or None and why the Redis figures are skipped."""
        try:
            import redis
        except ImportError:
            return None, "redis-py is not installed (pip install -e '.[bench]')"
        client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        try:
            info: dict[str, Any] = client.info("server")
        except redis.RedisError as exc:
            return None, f"no Redis at {url} ({exc})"
        finally:
            client.close()
        return cls(url, f"bench:{secrets.token_hex(6)}:", str(info.get("redis_version", "?"))), ""

    def child(self, name: str) -> list[str]:
        """The command-line options that give a child process its own part of the area."""
        return ["--redis-url", self.url, "--redis-prefix", f"{self.prefix}{name}:"]

    def clean(self) -> int:
        import redis

        client = redis.Redis.from_url(self.url, socket_timeout=30)
        try:
            keys = list(client.scan_iter(match=self.prefix + "*", count=1000))
            for i in range(0, len(keys), 1000):
                client.unlink(*keys[i : i + 1000])
            return len(keys)
        finally:
            client.close()


# --------------------------------------------------------------------------- machine facts
def snapshot(rev: str) -> Path:
    """`git archive REV mcp_resume_asgi` plus a copy of bench/, in a temporary directory."""
    import io
    import tarfile
    import tempfile

    target = Path(tempfile.mkdtemp(prefix="mcp-resume-bench-"))
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev, "mcp_resume_asgi"],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target)
    shutil.copytree(
        ROOT / "bench", target / "bench", ignore=shutil.ignore_patterns("results", "plots", "__pycache__")
    )
    return target


def machine(rev: str | None = None) -> dict[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {}
    for dist in ("mcp", "uvicorn", "anyio", "starlette", "sse-starlette", "httpx"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "-"
    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", rev or "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        dirty = (
            ""
            if rev
            else subprocess.run(
                ["git", "-C", str(ROOT), "status", "--porcelain", "mcp_resume_asgi"],
                capture_output=True,
                text=True,
            ).stdout.strip()
        )
    except OSError:
        commit, dirty = "-", ""
    digest = hashlib.sha256()
    for path in sorted((CODE_ROOT / "mcp_resume_asgi").rglob("*.py")):
        digest.update(path.relative_to(CODE_ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return {
        "source_sha256": digest.hexdigest()[:16],
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
        "commit": commit
        + (" (snapshot via --at)" if rev else " (working tree, mcp_resume_asgi/ modified)" if dirty else ""),
    }


def _jiffies(pid: int | str = "self") -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _busy_jiffies() -> int:
    cpu = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [int(x) for x in cpu]
    return sum(values) - values[3] - values[4]  # all but idle and iowait


# --------------------------------------------------------------------------- 1, 2: HTTP
class Server:
    def __init__(self, variant: str, redis: RedisArea | None = None) -> None:
        self.variant = variant
        extra = redis.child("http") if redis is not None and variant in REDIS_VARIANTS else []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.serve", variant, "--cpu", str(SERVER_CPU), *extra],
            cwd=CODE_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        if not line.startswith("READY "):
            self.stop()
            raise RuntimeError(f"server {variant} did not start: {line!r}")
        self.port = int(line.split()[1])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


async def _measure(
    server: Server, concurrency: int, warmup_s: float, duration_s: float, tool: str = "echo"
) -> dict[str, Any]:
    """One load window; server CPU and the machine's other load sampled at the window's edges."""
    loop = asyncio.get_running_loop()
    marks: dict[str, tuple[float, int, int, int]] = {}

    def mark(name: str) -> None:
        marks[name] = (time.monotonic(), _jiffies(server.proc.pid), _jiffies(), _busy_jiffies())

    loop.call_later(warmup_s, mark, "start")
    loop.call_later(warmup_s + duration_s, mark, "stop")
    result = await run_load(
        "127.0.0.1", server.port, concurrency=concurrency, warmup_s=warmup_s, duration_s=duration_s, tool=tool
    )
    LOAD.note()
    (t0, s0, g0, b0), (t1, s1, g1, b1) = marks["start"], marks["stop"]
    wall = t1 - t0
    server_cpu = (s1 - s0) / CLK_TCK
    own = (g1 - g0) / CLK_TCK
    return {
        "rps": result.rps,
        "p50_ms": result.percentile(50),
        "p99_ms": result.percentile(99),
        "errors": result.errors,
        "requests": result.requests,
        "server_util": server_cpu / wall,
        "server_cpu_us_per_req": 1e6 * server_cpu / max(result.requests, 1),
        "loadgen_util": own / wall,
        "background_cores": max(0.0, (b1 - b0) / CLK_TCK - server_cpu - own) / wall,
    }


def run_http(
    concurrencies: list[int],
    runs: int,
    warmup_s: float,
    duration_s: float,
    tools: tuple[str, ...] = TOOLS,
    variants: tuple[str, ...] = VARIANTS,
    redis: RedisArea | None = None,
) -> dict[str, Any]:
    """One server per variant, serving both tools; every repetition runs one window per
    (concurrency, tool, variant), the variants' order rotated from one repetition to the next."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {LOADGEN_CPU})
    servers: dict[str, Server] = {}
    samples: dict[tuple[str, str, int], list[dict[str, Any]]] = {
        (t, v, c): [] for t in tools for v in variants for c in concurrencies
    }
    try:
        for v in variants:
            servers[v] = Server(v, redis)
        for rep in range(runs):
            shift = rep % len(variants)
            order = variants[shift:] + variants[:shift]  # rotate who goes first
            for c in concurrencies:
                for t in tools:
                    for v in order:
                        sample = asyncio.run(_measure(servers[v], c, warmup_s, duration_s, t))
                        samples[(t, v, c)].append(sample)
                        log(
                            f"  http rep {rep + 1}/{runs} c={c:<3} {t:<8} {v:<13} {sample['rps']:7.0f} req/s "
                            f"p50 {sample['p50_ms']:6.1f} ms p99 {sample['p99_ms']:6.1f} ms "
                            f"server {sample['server_util']:.0%} bg {sample['background_cores']:.2f}"
                            + (f" ERRORS {sample['errors']}" if sample["errors"] else "")
                        )
    finally:
        for s in servers.values():
            s.stop()
    rows = []
    for (t, v, c), items in samples.items():
        row: dict[str, Any] = {"tool": t, "variant": v, "concurrency": c, "runs": len(items)}
        for key in items[0]:
            row[key] = statistics.median(x[key] for x in items)
            row[key + "_all"] = [x[key] for x in items]
        rows.append(row)
    return {
        "runs": runs,
        "warmup_s": warmup_s,
        "duration_s": duration_s,
        "tools": list(tools),
        "variants": list(variants),
        "rows": rows,
    }


def log_otel_cost(http: dict[str, Any]) -> None:
    """Issue 23's bar: the SDK configured (`wrapped_otel`) costs <= 5% req/s against `wrapped`."""
    by = {(r["tool"], r["variant"], r["concurrency"]): r for r in http["rows"]}
    for (tool, variant, c), row in sorted(by.items()):
        base = by.get((tool, "wrapped", c))
        if variant == "wrapped_otel" and base is not None and base["rps"]:
            ratio = row["rps"] / base["rps"]
            log(
                f"  otel c={c:<3} {tool:<8} wrapped_otel/wrapped req/s {ratio:.3f} ({'ok' if ratio >= 0.95 else 'OVER 5%'})"
            )


# --------------------------------------------------------------------------- 3, 4: engine
def engine(*args: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.engine", *args, "--cpu", str(SERVER_CPU)]
    done = subprocess.run(cmd, cwd=CODE_ROOT, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    LOAD.note()
    return result


def run_engine(
    event_counts: list[int], runs: int, replay_counts: list[int], redis: RedisArea | None
) -> dict[str, Any]:
    throughput = []
    for n in event_counts:
        for checkpoint in (False, True):
            extra = ["--checkpoint"] if checkpoint else []
            # a live stream pays per wake-up: fewer runs for the slow mode at 10x
            r = engine("throughput", "--events", str(n), "--runs", str(runs), *extra)
            throughput.append(r)
            log(
                f"  engine {n} events checkpoint={checkpoint}: bare {r['bare_events_per_s']:,.0f}/s "
                f"wrapped {r['wrapped_events_per_s']:,.0f}/s"
            )
    replay = []
    for n in replay_counts:
        for store in ("memory", "redis") if redis is not None else ("memory",):
            extra = redis.child(f"replay-{n}") if redis is not None and store == "redis" else []
            r = engine("replay", "--events", str(n), "--runs", str(max(runs, 7)), *extra)
            replay.append(r)
            log(f"  replay {n} events, {store} store: {r['replay_ms']:.1f} ms")
    return {"throughput": throughput, "replay": replay}


def run_memory(stream_counts: list[int], traced_streams: int, repeats: int) -> dict[str, Any]:
    rows = []
    for n in stream_counts:
        for variant in ("bare", "detached"):
            samples = [engine("memory", "--streams", str(n), "--variant", variant) for _ in range(repeats)]
            row = dict(samples[0])
            for key in ("rss_delta_per_stream", "setup_s"):
                row[key] = statistics.median(s[key] for s in samples)
                row[key + "_all"] = [s[key] for s in samples]
            rows.append(row)
            log(f"  memory {n} streams {variant}: {row['rss_delta_per_stream']:,.0f} B/stream RSS")
    # The same streams arriving 100 at a time, each wave's clients gone before the next: what idle
    # streams left over time hold. Started all at once (the rows above), RSS follows the peak of every
    # request in flight together, which pymalloc keeps.
    largest = max(stream_counts)
    samples = [
        engine("memory", "--streams", str(largest), "--variant", "detached", "--wave", "100")
        for _ in range(repeats)
    ]
    waves = dict(samples[0])
    waves["rss_delta_per_stream"] = statistics.median(s["rss_delta_per_stream"] for s in samples)
    waves["rss_delta_per_stream_all"] = [s["rss_delta_per_stream"] for s in samples]
    log(
        f"  memory {largest} streams detached, 100 at a time: {waves['rss_delta_per_stream']:,.0f} B/stream RSS"
    )
    traced = {}
    for variant in ("bare", "detached"):
        traced[variant] = engine(
            "memory", "--streams", str(traced_streams), "--variant", variant, "--tracemalloc"
        )
    log(
        f"  memory traced ({traced_streams} streams): detached "
        f"{traced['detached']['traced_delta_per_stream']:,.0f} B/stream live, "
        f"{traced['detached']['traced_peak_per_stream']:,.0f} at the peak (what RSS follows)"
    )
    return {"rows": rows, "waves": waves, "traced": traced}


# --------------------------------------------------------------------------- main
def command_line(argv: list[str]) -> str:
    """How this run was started, to print beside its figures."""
    exe = Path(sys.executable)
    shown = os.path.relpath(exe, ROOT) if exe.is_relative_to(ROOT) else "python"
    return shlex.join([shown, "-m", "bench", *argv])


def plotting_missing() -> str:
    """Why the plots cannot be drawn here, or "" when they can (checked before measuring)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[bench]'; or --no-plots)"
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="check the machinery: fewer, shorter runs (~1.5 min)"
    )
    parser.add_argument("--runs", type=int, default=None, help="repetitions per HTTP cell (default 5)")
    parser.add_argument("--duration", type=float, default=None, help="seconds per HTTP window (default 2.5)")
    parser.add_argument("--only", default="http,engine,memory", help="comma list of: http,engine,memory")
    parser.add_argument("--profile", action="store_true", help="also record py-spy profiles (about 1 min)")
    parser.add_argument("--out", default=str(RESULTS), help="where latest.json / latest.md go")
    parser.add_argument(
        "--redis-url", default=DEFAULT_REDIS_URL, help="the Redis for the Redis-store figures"
    )
    parser.add_argument("--no-redis", action="store_true", help="skip the Redis-store figures")
    parser.add_argument("--no-plots", action="store_true", help="draw no plots (no matplotlib needed)")
    parser.add_argument(
        "--publish",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="rewrite BENCHMARKS.md, bench/plots/ and bench/results/benchmarks.json "
        "(default: for a full run of everything, not for --quick or --only)",
    )
    parser.add_argument(
        "--at",
        metavar="REV",
        default=None,
        help="benchmark mcp_resume_asgi as committed at REV (e.g. HEAD) instead of the working tree",
    )
    given = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(given)
    if not Path("/proc/stat").exists():
        log("bench needs Linux (/proc) for CPU and memory figures")
        return 2
    only = set(args.only.split(","))
    publish = (
        args.publish if args.publish is not None else not args.quick and only >= {"http", "engine", "memory"}
    )
    if publish and args.no_plots:
        log("--publish needs the plots: drop --no-plots")
        return 2
    missing = "" if args.no_plots else plotting_missing()
    if missing:
        log(f"bench: {missing}")
        return 2
    redis: RedisArea | None = None
    redis_skipped = "--no-redis"
    if not args.no_redis:
        redis, redis_skipped = RedisArea.open(args.redis_url)
        if redis is None:
            log(f"bench: the Redis-store figures are skipped: {redis_skipped}")
    global CODE_ROOT
    if args.at:
        CODE_ROOT = snapshot(args.at)
    runs = args.runs or (1 if args.quick else 5)
    duration = args.duration or (1.0 if args.quick else 2.5)
    started = time.monotonic()
    LOAD.note()
    results: dict[str, Any] = {
        "command": command_line(given),
        "quick": args.quick,
        "machine": machine(args.at),
        "redis": {"url": redis.url, "version": redis.version}
        if redis is not None
        else {"skipped": redis_skipped},
    }
    log(f"bench: {results['machine']['cpu_model']}, {results['machine']['nproc']} CPUs")
    try:
        if "http" in only:
            variants = tuple(v for v in VARIANTS if redis is not None or v not in REDIS_VARIANTS)
            results["http"] = run_http(
                HTTP_CONCURRENCIES, runs, warmup_s=0.5, duration_s=duration, variants=variants, redis=redis
            )
            log_otel_cost(results["http"])
        if "engine" in only:
            replay_counts = QUICK_REPLAY_EVENTS if args.quick else REPLAY_EVENTS
            results["engine"] = run_engine(ENGINE_EVENTS, 3 if args.quick else 7, replay_counts, redis)
        if "memory" in only:
            counts = [1_000] if args.quick else [1_000, 10_000]
            results["memory"] = run_memory(counts, traced_streams=2000, repeats=1 if args.quick else 3)
        if args.profile:
            from bench import profiles

            results["profiles"] = profiles.run_all(Path(args.out) / "profiles")
    finally:
        if redis is not None:
            left = redis.clean()
            if left:
                log(f"  redis: deleted {left} keys left under {redis.prefix}")
        if CODE_ROOT != ROOT:
            shutil.rmtree(CODE_ROOT, ignore_errors=True)
    results["runtime_s"] = time.monotonic() - started
    results["load"] = LOAD.summary()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "latest.json").write_text(json.dumps(results, indent=1) + "\n")
    text = report.render(results)
    (out / "latest.md").write_text(text)
    print(text)
    if not args.no_plots:
        from bench import plots

        page_file = page.PAGE if publish else out / "page.md"
        drawn = plots.draw_all(results, PLOTS if publish else out / "plots")
        short = page.render(
            results, {name: os.path.relpath(path, page_file.parent) for name, path in drawn.items()}
        )
        bars = page.render_bars(results)
        if publish:
            page.publish(page_file, short, bars)
            PUBLISHED.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(out / "latest.json", PUBLISHED)
        else:
            page_file.write_text(short + ("\n" + bars if bars else ""))
        log(
            f"bench: the page is {page_file}, its plots are in {next(iter(drawn.values())).parent}"
            if drawn
            else f"bench: the page is {page_file}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
