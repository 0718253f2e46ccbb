"""`python -m bench.redis_peers`: our `RedisStore` beside `mcp-persist`'s Redis event store, in one run.

Everything runs against a private `redis-server` this module starts (a free loopback port, no
persistence, deleted at the end), so its `INFO commandstats` counts only what the servers under
test send.

1. tools/call over HTTP, as `python -m bench` measures it (`bench.__main__.run_http`: a stock
   `MCPServer` under uvicorn, one process per variant pinned to CPU 1, the load generator on
   CPU 0, windows of every variant interleaved, medians), tool `progress` (two progress
   notifications, then the result): `bare`, `wrapped` (ours, memory store), `sdk_es` (the SDK's
   event-store interface with the simplest in-memory store), `wrapped_redis` (ours, `RedisStore`)
   and `persist_redis` (`mcp_persist.with_persistence(server, backend="redis", ...)`, its
   defaults), at 1, 4 and 32 clients.
2. What one call costs Redis, per Redis variant, in a window of its own at 1 client (figures a
   loaded machine moves little): commands Redis ran and their kinds (`INFO commandstats`, the
   scripts' own commands included), bytes in and out (`INFO stats`), Redis's own CPU (`INFO cpu`),
   the server's CPU µs per call; then, in a second window, the commands the server sent (its round
   trips: `MONITOR`, the scripts' commands apart).
3. Replay of a stream of N events (10,000 by default), in this process, interleaved runs: ours
   through the middleware (GET with `Last-Event-ID`, every event sent), ours the store alone
   (`RedisStore.read` in pages of 1,000, what the engine reads), theirs the store alone
   (`RedisEventStore.replay_events_after`).

Writes `bench/results/redis_peers.json` and `bench/plots/redis_peers.png`, and prints a Markdown
table (for BENCHMARKS.md). Options: `--runs` (windows per cell, default 5), `--duration` (seconds
per window, 2.5), `--events` (10,000), `--replay-runs` (7), `--quick` (1 window of 1 s, 3 replay
runs), `--only http,count,replay`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.__main__ import (
    HTTP_CONCURRENCIES,
    LOAD,
    PLOTS,
    RESULTS,
    RedisArea,
    Server,
    _measure,
    machine,
    run_http,
)
from bench.persist_replay import filled_replayer

VARIANTS = ("bare", "wrapped", "sdk_es", "wrapped_redis", "persist_redis")
REDIS = ("wrapped_redis", "persist_redis")
LABELS = {
    "bare": "bare app",
    "wrapped": "ours, MemoryStore",
    "sdk_es": "SDK event store (in memory)",
    "wrapped_redis": "ours, RedisStore",
    "persist_redis": "mcp-persist Redis, with_persistence",
}
COLORS = {
    "bare": "#444444",
    "wrapped": "#6baed6",
    "sdk_es": "#2ca02c",
    "wrapped_redis": "#1f77b4",
    "persist_redis": "#d62728",
}
TOOL = "progress"


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- a private Redis
class PrivateRedis:
    """A `redis-server` of this run's own on a free loopback port: nothing else talks to it."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("bench.redis_peers needs redis-server on the PATH")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.folder = tempfile.mkdtemp(prefix="bench-redis-")
        self.proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.folder,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import redis

        self.client = redis.Redis(port=self.port, socket_timeout=30)
        for _ in range(500):
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.01)
        self.version = str(self.client.info("server")["redis_version"])

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def counters(self) -> dict[str, float]:
        """Calls per command, bytes in and out, Redis's CPU seconds: since the last reset."""
        out: dict[str, float] = {}
        for name, stats in self.client.info("commandstats").items():
            out["cmd:" + name.removeprefix("cmdstat_")] = float(stats["calls"])
        stats = self.client.info("stats")
        out["net_in"] = float(stats["total_net_input_bytes"])
        out["net_out"] = float(stats["total_net_output_bytes"])
        out["commands"] = float(stats["total_commands_processed"])
        cpu = self.client.info("cpu")
        out["cpu_s"] = float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])
        return out

    def monitor(self) -> Monitor:
        return Monitor(self.port)

    def close(self) -> None:
        self.client.close()
        self.proc.terminate()
        self.proc.wait(10)
        shutil.rmtree(self.folder, ignore_errors=True)


class Monitor:
    """`MONITOR` on a connection of its own, read by a thread: the commands clients send (round
    trips: a pipeline's commands count one each), apart from those scripts run (`[0 lua]`)."""

    def __init__(self, port: int) -> None:
        import threading

        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.sendall(b"MONITOR\r\n")
        self.top: dict[str, int] = {}
        self.lua = 0
        self.clients: set[str] = set()
        self.stopped = False
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        buffer = b""
        while not self.stopped:
            try:
                chunk = self.sock.recv(1 << 16)
            except OSError:
                return
            if not chunk:
                return
            buffer += chunk
            *lines, buffer = buffer.split(b"\r\n")
            for line in lines:
                if not line.startswith(b"+") or b"] " not in line:
                    continue
                where, _, rest = line.partition(b"] ")
                name = rest.split(b" ", 1)[0].strip(b'"').decode().lower()
                if where.endswith(b"lua"):
                    self.lua += 1
                elif name not in ("info", "monitor"):
                    self.top[name] = self.top.get(name, 0) + 1
                    self.clients.add(where.rsplit(b" ", 1)[-1].decode())

    def stop(self) -> None:
        self.stopped = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(5)


# --------------------------------------------------------------------------- 2: per call
def count_calls(redis: PrivateRedis, area: RedisArea, seconds: float) -> dict[str, Any]:
    """Per Redis variant: one window at 1 client; Redis's counters over it, per call. The few
    `initialize` calls and the bench's own INFO commands are in the counts (a handful over
    hundreds of calls)."""
    out: dict[str, Any] = {}
    for variant in REDIS:
        server = Server(variant, area)
        try:
            asyncio.run(_measure(server, 1, 0.3, 0.5, TOOL))  # sessions, scripts loaded
            before = redis.counters()
            sample = asyncio.run(_measure(server, 1, 0.0, seconds, TOOL))
            after = redis.counters()
            # Then what clients send, in a window of its own: MONITOR's feed is output of Redis's
            # (it would count in the bytes above) and costs it CPU.
            monitor = redis.monitor()
            time.sleep(0.1)
            watched = asyncio.run(_measure(server, 1, 0.0, min(seconds, 1.0), TOOL))
            monitor.stop()
        finally:
            server.stop()
        calls = max(sample["requests"], 1)
        per = {k: (after.get(k, 0.0) - before.get(k, 0.0)) / calls for k in after}
        per["commands"] -= 3 / calls  # the three INFO of `counters`
        per.pop("cmd:info", None)
        out[variant] = {
            "calls": calls,
            "server_cpu_us_per_call": sample["server_cpu_us_per_req"],
            "redis_cpu_us_per_call": 1e6 * per.pop("cpu_s"),
            "commands_per_call": per.pop("commands"),
            "bytes_in_per_call": per.pop("net_in"),
            "bytes_out_per_call": per.pop("net_out"),
            "by_command": {k.removeprefix("cmd:"): v for k, v in sorted(per.items()) if v > 0.001},
            "sent_per_call": sum(monitor.top.values()) / max(watched["requests"], 1),
            "sent_by_command": {k: n / max(watched["requests"], 1) for k, n in sorted(monitor.top.items())},
            "connections": len(monitor.clients),
        }
        log(f"  count {variant}: {json.dumps(out[variant])}")
    return out


# --------------------------------------------------------------------------- 3: replay
async def _ours(url: str, prefix: str, n_events: int) -> tuple[Any, Any, Any]:
    from bench.engine import (
        REQUEST,
        FakeClient,
        event_bodies,
        parse_events,
        post_scope,
        resume_scope,
        stream_app,
    )
    from mcp_resume_asgi import Policy, ResumeMiddleware
    from mcp_resume_asgi.store import RedisStore

    store = RedisStore(url, prefix=prefix)
    middleware = ResumeMiddleware(
        stream_app(event_bodies(n_events, final=True), checkpoint=False, idle=False),
        policy=Policy(),
        store=store,
        secret="bench-shared-secret-0123456789abcdef",
    )
    first = FakeClient(REQUEST, keep=True)
    await middleware(post_scope(), first.receive, first.send)
    priming = parse_events(b"".join(first.out))[0]
    stream_id = priming.id.split(b".")[0].decode()

    async def through_middleware() -> int:
        client = FakeClient(b"", count_data=True)
        await middleware(resume_scope(priming.id), client.receive, client.send)
        return int(client.data_events)

    async def store_alone() -> int:
        count, after = 0, 0
        while True:
            events = await store.read(stream_id, after, 1000)
            if not events:
                return count
            count += len(events)
            after = events[-1][0]

    return through_middleware, store_alone, store


async def _theirs(url: str, prefix: str, n_events: int) -> tuple[Any, Any]:
    from mcp_persist.redis import RedisEventStore

    context = RedisEventStore.create(url, key_prefix=prefix)
    store = await context.__aenter__()
    return await filled_replayer(store, n_events), context


async def run_replay(url: str, n_events: int, runs: int) -> dict[str, Any]:
    tag = secrets.token_hex(4)
    ours_http, ours_store, store = await _ours(url, f"replay:{tag}:ours:", n_events)
    theirs, context = await _theirs(url, f"replay:{tag}:theirs:", n_events)
    cases = {"ours_middleware": ours_http, "ours_store": ours_store, "theirs_store": theirs}
    times: dict[str, list[float]] = {name: [] for name in cases}
    try:
        for name, once in cases.items():  # (a check, and a warm-up)
            count = await once()
            assert count >= n_events - 1, (name, count)
        for run in range(runs):
            names = list(cases)
            shift = run % len(names)
            for name in names[shift:] + names[:shift]:
                gc.collect()
                t0 = time.perf_counter()
                await cases[name]()
                times[name].append(time.perf_counter() - t0)
                LOAD.note()
    finally:
        await context.__aexit__(None, None, None)
        await store.aclose()
    return {
        "events": n_events,
        "runs": runs,
        "cases": {
            name: {"replay_ms": 1000 * statistics.median(ts), "times_ms": [1000 * t for t in ts]}
            for name, ts in times.items()
        },
    }


# --------------------------------------------------------------------------- report
def table(results: dict[str, Any]) -> str:
    lines: list[str] = []
    http = results.get("http")
    if http:
        by = {(r["variant"], r["concurrency"]): r for r in http["rows"] if r["tool"] == TOOL}
        cs = sorted({c for _, c in by})
        lines += [
            f"tools/call `{TOOL}` (2 progress notifications, then the result), req/s, median of {http['runs']} "
            f"interleaved windows of {http['duration_s']} s:",
            "",
            "| variant | "
            + " | ".join(f"c={c} req/s" for c in cs)
            + " | "
            + " | ".join(f"c={c} / bare" for c in cs)
            + " | server CPU µs/call (c=1) |",
            "|---|" + "---:|" * (2 * len(cs) + 1),
        ]
        for v in http["variants"]:
            lines.append(
                f"| {LABELS[v]} | "
                + " | ".join(f"{by[(v, c)]['rps']:,.0f}" for c in cs)
                + " | "
                + " | ".join(f"{by[(v, c)]['rps'] / by[('bare', c)]['rps']:.2f}x" for c in cs)
                + f" | {by[(v, 1)]['server_cpu_us_per_req']:,.0f} |"
            )
        lines += [
            "",
            "| bar | " + " | ".join(f"c={c}" for c in cs) + " |",
            "|---|" + "---:|" * len(cs),
        ]
        for label, a, b, bar in (
            ("ours Redis / mcp-persist Redis (>= 1.00)", "wrapped_redis", "persist_redis", 1.0),
            ("ours memory / SDK event store (>= 0.95)", "wrapped", "sdk_es", 0.95),
            ("ours memory / bare (>= 0.85)", "wrapped", "bare", 0.85),
        ):
            cells = []
            for c in cs:
                ratio = by[(a, c)]["rps"] / by[(b, c)]["rps"]
                cells.append(f"{ratio:.2f}x {'met' if ratio >= bar else 'missed'}")
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        errors = sum(r["errors"] for r in http["rows"])
        lines += ["", f"Wrong answers: {errors}.", ""]
    count = results.get("count")
    if count:
        lines += [
            "Per call at 1 client (a window of its own per variant; Redis's `INFO` counters):",
            "",
            "| variant | commands sent (round trips at most) | sent, by command | commands Redis ran (scripts' included) | ran, by command | bytes to Redis | bytes from Redis | Redis CPU µs | server CPU µs |",
            "|---|---:|---|---:|---|---:|---:|---:|---:|",
        ]
        for v, row in count.items():
            kinds = ", ".join(f"{k} {n:.2f}" for k, n in row["by_command"].items())
            sent = ", ".join(f"{k} {n:.2f}" for k, n in row["sent_by_command"].items())
            lines.append(
                f"| {LABELS[v]} | {row['sent_per_call']:.2f} | {sent} | {row['commands_per_call']:.2f} | {kinds} | {row['bytes_in_per_call']:,.0f} | "
                f"{row['bytes_out_per_call']:,.0f} | {row['redis_cpu_us_per_call']:,.0f} | "
                f"{row['server_cpu_us_per_call']:,.0f} |"
            )
        lines.append("")
    replay = results.get("replay")
    if replay:
        cases = replay["cases"]
        lines += [
            f"| replay of {replay['events']:,} events on Redis (median of {replay['runs']}) | ms |",
            "|---|---:|",
            f"| ours, through the middleware (GET with Last-Event-ID, every event sent) | {cases['ours_middleware']['replay_ms']:.1f} |",
            f"| ours, the store alone (`RedisStore.read`, pages of 1,000) | {cases['ours_store']['replay_ms']:.1f} |",
            f"| mcp-persist, the store alone (`RedisEventStore.replay_events_after`) | {cases['theirs_store']['replay_ms']:.1f} |",
        ]
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    http, replay = results.get("http"), results.get("replay")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [2.2, 1]})
    if http:
        by = {(r["variant"], r["concurrency"]): r for r in http["rows"] if r["tool"] == TOOL}
        cs = sorted({c for _, c in by})
        variants = http["variants"]
        width = 0.8 / len(variants)
        ax = axes[0]
        for i, v in enumerate(variants):
            xs = [k + (i - (len(variants) - 1) / 2) * width for k in range(len(cs))]
            ax.bar(
                xs,
                [by[(v, c)]["rps"] / by[("bare", c)]["rps"] for c in cs],
                width,
                label=LABELS[v],
                color=COLORS[v],
            )
        ax.axhline(1.0, color="#999999", lw=0.8)
        ax.set_xticks(range(len(cs)), [str(c) for c in cs])
        ax.set_xlabel("clients")
        ax.set_ylabel("req/s relative to bare (median)")
        ax.set_title(f"tools/call {TOOL}")
        ax.legend(fontsize=8, loc="lower left")
    if replay:
        names = ["ours_middleware", "ours_store", "theirs_store"]
        labels = ["ours, via\nmiddleware", "ours, store", "mcp-persist,\nstore"]
        colors = [COLORS["wrapped_redis"], "#6baed6", COLORS["persist_redis"]]
        ax = axes[1]
        ax.bar(labels, [replay["cases"][n]["replay_ms"] for n in names], color=colors)
        ax.set_ylabel("ms (median)")
        ax.set_title(f"replay of {replay['events']:,} events, Redis")
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle("Redis stores: mcp-resume-asgi vs mcp-persist (interleaved windows, shared machine)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--duration", type=float, default=2.5)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--replay-runs", type=int, default=7)
    parser.add_argument("--only", default="http,count,replay")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    runs, duration, replay_runs = (1, 1.0, 3) if args.quick else (args.runs, args.duration, args.replay_runs)
    parts = set(args.only.split(","))
    started = time.time()
    redis = PrivateRedis()
    area = RedisArea(redis.url, f"bench:{secrets.token_hex(4)}:", redis.version)
    results: dict[str, Any] = {"machine": machine(), "redis": {"version": redis.version}}
    try:
        if "count" in parts:
            log("per call: Redis's counters at 1 client")
            results["count"] = count_calls(redis, area, 3.0 if not args.quick else 1.0)
        if "replay" in parts:
            log(f"replay of {args.events:,} events, {replay_runs} interleaved runs")
            results["replay"] = asyncio.run(run_replay(redis.url, args.events, replay_runs))
            for name, case in results["replay"]["cases"].items():
                log(f"  {name}: {case['replay_ms']:.1f} ms")
        if "http" in parts:
            log(f"HTTP: {', '.join(VARIANTS)}; {runs} windows of {duration} s per cell")
            results["http"] = run_http(
                HTTP_CONCURRENCIES,
                runs,
                warmup_s=0.5,
                duration_s=duration,
                tools=(TOOL,),
                variants=VARIANTS,
                redis=area,
            )
    finally:
        redis.close()
    results["load"] = LOAD.summary()
    results["seconds"] = time.time() - started
    results["command"] = " ".join(
        ["python -m bench.redis_peers", *(argv if argv is not None else sys.argv[1:])]
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    quick = args.quick or parts != {"http", "count", "replay"}
    out = RESULTS / ("redis_peers-quick.json" if quick else "redis_peers.json")
    out.write_text(json.dumps(results, indent=1))
    plot(results, (RESULTS / "plots" if quick else PLOTS) / "redis_peers.png")
    print(table(results))
    log(f"load average during the run: {LOAD.summary()}; figures in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
