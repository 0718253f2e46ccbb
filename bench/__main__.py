"""`python -m bench`: every benchmark of mcp-resume-asgi, side by side, in one run.

1. HTTP overhead on a real app: a stock `MCPServer` (SSE answers) under uvicorn, one
   process per variant (bare / wrapped / SDK event store), each pinned to CPU 1; the
   load generator runs here, pinned to CPU 0, calling the `echo` tool (one event per
   answer) or the `progress` tool (two progress notifications, then the result) at
   concurrency 1, 4 and 32. Windows are interleaved (every repetition visits every
   concurrency, tool and variant), figures are medians.
2. (in 1) the SDK's own resumability: `sdk_es`.
3. The engine in process: events/s through the middleware vs the bare app, and
   replay of recorded events after a Last-Event-ID (child processes, CPU 1).
4. Memory of idle detached streams (child processes, one per measurement).
5. Scaling 1x -> 10x for each of the above.

Results: a Markdown report on stdout and in bench/results/latest.md, raw figures
in bench/results/latest.json. `--profile` adds py-spy profiles (bench/results/profiles/).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from bench import report
from bench.loadgen import TOOLS, run_load

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
VARIANTS = ("bare", "wrapped", "sdk_es")  # as in bench.apps, which this process does not import
HTTP_CONCURRENCIES = [1, 4, 32]
#: Where the child processes run (and import `mcp_resume_asgi` from): the repository,
#: or with `--at REV` a snapshot of that revision's package next to a copy of bench/.
CODE_ROOT = ROOT
LOADGEN_CPU = 0
SERVER_CPU = 1
CLK_TCK = os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- machine facts
def snapshot(rev: str) -> Path:
    """`git archive REV mcp_resume_asgi` plus a copy of bench/, in a temporary directory."""
    import shutil
    import tarfile
    import tempfile

    target = Path(tempfile.mkdtemp(prefix="mcp-resume-bench-"))
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev, "mcp_resume_asgi"],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
        tar.extractall(target)
    shutil.copytree(ROOT / "bench", target / "bench", ignore=shutil.ignore_patterns("results", "__pycache__"))
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
    def __init__(self, variant: str) -> None:
        self.variant = variant
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.serve", variant, "--cpu", str(SERVER_CPU)],
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
) -> dict[str, Any]:
    """One server per variant, serving both tools; every repetition runs one window per
    (concurrency, tool, variant), the variants' order rotated from one repetition to the next."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {LOADGEN_CPU})
    servers = {v: Server(v) for v in VARIANTS}
    samples: dict[tuple[str, str, int], list[dict[str, Any]]] = {
        (t, v, c): [] for t in tools for v in VARIANTS for c in concurrencies
    }
    try:
        for rep in range(runs):
            shift = rep % len(VARIANTS)
            order = VARIANTS[shift:] + VARIANTS[:shift]  # rotate who goes first
            for c in concurrencies:
                for t in tools:
                    for v in order:
                        sample = asyncio.run(_measure(servers[v], c, warmup_s, duration_s, t))
                        samples[(t, v, c)].append(sample)
                        print(
                            f"  http rep {rep + 1}/{runs} c={c:<3} {t:<8} {v:<8} {sample['rps']:7.0f} req/s "
                            f"p50 {sample['p50_ms']:6.1f} ms p99 {sample['p99_ms']:6.1f} ms "
                            f"server {sample['server_util']:.0%} bg {sample['background_cores']:.2f}"
                            + (f" ERRORS {sample['errors']}" if sample["errors"] else ""),
                            file=sys.stderr,
                            flush=True,
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
    return {"runs": runs, "warmup_s": warmup_s, "duration_s": duration_s, "tools": list(tools), "rows": rows}


# --------------------------------------------------------------------------- 3, 4: engine
def engine(*args: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.engine", *args, "--cpu", str(SERVER_CPU)]
    done = subprocess.run(cmd, cwd=CODE_ROOT, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run_engine(event_counts: list[int], runs: int) -> dict[str, Any]:
    throughput = []
    for n in event_counts:
        for checkpoint in (False, True):
            extra = ["--checkpoint"] if checkpoint else []
            # a live stream pays per wake-up: fewer runs for the slow mode at 10x
            r = engine("throughput", "--events", str(n), "--runs", str(runs), *extra)
            throughput.append(r)
            print(
                f"  engine {n} events checkpoint={checkpoint}: bare {r['bare_events_per_s']:,.0f}/s "
                f"wrapped {r['wrapped_events_per_s']:,.0f}/s",
                file=sys.stderr,
                flush=True,
            )
    replay = []
    for n in event_counts:
        r = engine("replay", "--events", str(n), "--runs", str(max(runs, 7)))
        replay.append(r)
        print(f"  replay {n} events: {r['replay_ms']:.1f} ms", file=sys.stderr, flush=True)
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
            print(
                f"  memory {n} streams {variant}: {row['rss_delta_per_stream']:,.0f} B/stream RSS",
                file=sys.stderr,
                flush=True,
            )
    traced = {}
    for variant in ("bare", "detached"):
        traced[variant] = engine(
            "memory", "--streams", str(traced_streams), "--variant", variant, "--tracemalloc"
        )
    print(
        f"  memory traced ({traced_streams} streams): detached "
        f"{traced['detached']['traced_delta_per_stream']:,.0f} B/stream",
        file=sys.stderr,
        flush=True,
    )
    return {"rows": rows, "traced": traced}


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (fewer, shorter runs)")
    parser.add_argument("--runs", type=int, default=None, help="repetitions per figure (default 5)")
    parser.add_argument("--duration", type=float, default=None, help="seconds per HTTP window (default 2.5)")
    parser.add_argument("--only", default="http,engine,memory", help="comma list of: http,engine,memory")
    parser.add_argument("--profile", action="store_true", help="also record py-spy profiles (about 1 min)")
    parser.add_argument("--out", default=str(RESULTS), help="where latest.json / latest.md go")
    parser.add_argument(
        "--at",
        metavar="REV",
        default=None,
        help="benchmark mcp_resume_asgi as committed at REV (e.g. HEAD) instead of the working tree",
    )
    args = parser.parse_args(argv)
    global CODE_ROOT
    if args.at:
        CODE_ROOT = snapshot(args.at)
    if not Path("/proc/stat").exists():
        print("bench needs Linux (/proc) for CPU and memory figures", file=sys.stderr)
        return 2
    only = set(args.only.split(","))
    runs = args.runs or (2 if args.quick else 5)
    duration = args.duration or (1.0 if args.quick else 2.5)
    started = time.monotonic()
    results: dict[str, Any] = {
        "command": "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine(args.at),
    }
    print(f"bench: {results['machine']['cpu_model']}, {results['machine']['nproc']} CPUs", file=sys.stderr)
    if "http" in only:
        results["http"] = run_http(HTTP_CONCURRENCIES, runs, warmup_s=0.5, duration_s=duration)
    if "engine" in only:
        results["engine"] = run_engine([1_000, 10_000], 3 if args.quick else 7)
    if "memory" in only:
        counts = [1_000] if args.quick else [1_000, 10_000]
        results["memory"] = run_memory(counts, traced_streams=200, repeats=1 if args.quick else 3)
    if args.profile:
        from bench import profiles

        results["profiles"] = profiles.run_all(Path(args.out) / "profiles")
    results["runtime_s"] = time.monotonic() - started
    if CODE_ROOT != ROOT:
        import shutil

        shutil.rmtree(CODE_ROOT, ignore_errors=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "latest.json").write_text(json.dumps(results, indent=1))
    text = report.render(results)
    (out / "latest.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
