"""`python -m bench.sqlite`: our `SQLiteStore` beside `mcp-persist`'s SQLite event store, in one run.

1. tools/call over HTTP, as `python -m bench` measures it (`bench.__main__.run_http`: a stock
   `MCPServer` under uvicorn, one process per variant pinned to CPU 1, the load generator on
   CPU 0, windows of every variant interleaved, medians): `bare`, `wrapped_sqlite` (the app
   in `resumable(..., store=SQLiteStore(file))`) and `persist_sqlite` (the app through
   `mcp_persist.with_persistence(server, backend="sqlite", url=file)`, its defaults), at
   1, 4 and 32 clients, tools `echo` and `progress`.
2. Replay of a stream of N events (10,000 by default), in this process, interleaved runs:
   - ours through the middleware: a GET with `Last-Event-ID` = the stream's priming id, until
     its last event is sent (`bench.engine`'s replay, on a `SQLiteStore`);
   - ours, the store alone: `SQLiteStore.read` in pages of 1,000 (what the engine reads);
   - theirs, the store alone: `SQLiteEventStore.replay_events_after(first id, callback)` (their
     published 27 ms figure is of this call), the callback collecting what it is given.
   Each stream is written first through its store's own write path (ours: the middleware
   recording an app that sends N events; theirs: `store_event` N times).

Writes `bench/results/sqlite.json` and `bench/plots/sqlite_rps.png`, and prints a Markdown
table (for BENCHMARKS.md). Options: `--runs` (windows per cell, default 5), `--duration`
(seconds per window, 2.5), `--events` (10,000), `--replay-runs` (7), `--quick` (1 window of 1 s,
3 replay runs).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.__main__ import HTTP_CONCURRENCIES, LOAD, PLOTS, RESULTS, machine, run_http
from bench.persist_replay import filled_replayer

VARIANTS = ("bare", "wrapped_sqlite", "persist_sqlite")
LABELS = {
    "bare": "bare app",
    "wrapped_sqlite": "wrapped, SQLiteStore (ours)",
    "persist_sqlite": "mcp-persist SQLite, with_persistence",
}
COLORS = {"bare": "#444444", "wrapped_sqlite": "#1f77b4", "persist_sqlite": "#d62728"}


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- replay
async def _ours(folder: str, n_events: int) -> tuple[Any, Any, Any]:
    """Our stream of `n_events`, recorded through the middleware; (through the middleware, the store
    alone, the store) as callables of one run each."""
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
    from mcp_resume_asgi.store.sqlite import SQLiteStore

    store = SQLiteStore(os.path.join(folder, "ours.db"))
    middleware = ResumeMiddleware(
        stream_app(event_bodies(n_events, final=True), checkpoint=False, idle=False),
        policy=Policy(),
        store=store,
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


async def _theirs(folder: str, n_events: int) -> tuple[Any, Any]:
    from mcp_persist.sqlite import SQLiteEventStore

    context = SQLiteEventStore.create(os.path.join(folder, "theirs.db"))
    store = await context.__aenter__()
    return await filled_replayer(store, n_events), context


async def run_replay(n_events: int, runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-sqlite-replay-") as folder:
        ours_http, ours_store, store = await _ours(folder, n_events)
        theirs, context = await _theirs(folder, n_events)
        cases = {"ours_middleware": ours_http, "ours_store": ours_store, "theirs_store": theirs}
        times: dict[str, list[float]] = {name: [] for name in cases}
        try:
            for name, once in cases.items():  # (a check, and a warm-up)
                count = await once()
                assert count == n_events, (name, count)
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
def table(http: dict[str, Any], replay: dict[str, Any]) -> str:
    by = {(r["tool"], r["variant"], r["concurrency"]): r for r in http["rows"]}
    lines = [
        "| tool | clients | bare req/s | ours (SQLiteStore) req/s | mcp-persist SQLite req/s | ours / theirs | ours / bare | theirs / bare | p99 ms: bare / ours / theirs | server CPU µs/call: bare / ours / theirs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for tool in http["tools"]:
        for c in sorted({r["concurrency"] for r in http["rows"]}):
            bare, ours, theirs = (by[(tool, v, c)] for v in VARIANTS)
            lines.append(
                f"| {tool} | {c} | {bare['rps']:,.0f} | {ours['rps']:,.0f} | {theirs['rps']:,.0f} | "
                f"{ours['rps'] / theirs['rps']:.2f}x | {ours['rps'] / bare['rps']:.2f}x | "
                f"{theirs['rps'] / bare['rps']:.2f}x | {bare['p99_ms']:.1f} / {ours['p99_ms']:.1f} / "
                f"{theirs['p99_ms']:.1f} | {bare['server_cpu_us_per_req']:,.0f} / "
                f"{ours['server_cpu_us_per_req']:,.0f} / {theirs['server_cpu_us_per_req']:,.0f} |"
            )
    cases = replay["cases"]
    lines += [
        "",
        f"| replay of {replay['events']:,} events (median of {replay['runs']}) | ms |",
        "|---|---:|",
        f"| ours, through the middleware (GET with Last-Event-ID, every event sent) | {cases['ours_middleware']['replay_ms']:.1f} |",
        f"| ours, the store alone (`SQLiteStore.read`, pages of 1,000) | {cases['ours_store']['replay_ms']:.1f} |",
        f"| mcp-persist, the store alone (`SQLiteEventStore.replay_events_after`) | {cases['theirs_store']['replay_ms']:.1f} |",
    ]
    errors = sum(r["errors"] for r in http["rows"])
    lines.append("")
    lines.append(f"Wrong answers: {errors}.")
    return "\n".join(lines)


def plot(http: dict[str, Any], replay: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tools = http["tools"]
    concurrencies = sorted({r["concurrency"] for r in http["rows"]})
    by = {(r["tool"], r["variant"], r["concurrency"]): r for r in http["rows"]}
    fig, axes = plt.subplots(1, len(tools) + 1, figsize=(5 * (len(tools) + 1), 4.2))
    width = 0.8 / len(VARIANTS)
    for ax, tool in zip(axes, tools, strict=False):
        for i, v in enumerate(VARIANTS):
            xs = [k + (i - 1) * width for k in range(len(concurrencies))]
            ax.bar(
                xs, [by[(tool, v, c)]["rps"] for c in concurrencies], width, label=LABELS[v], color=COLORS[v]
            )
        ax.set_xticks(range(len(concurrencies)), [str(c) for c in concurrencies])
        ax.set_xlabel("clients")
        ax.set_ylabel("req/s (median)")
        ax.set_title(f"tools/call {tool}")
    axes[0].legend(fontsize=8, loc="lower left")
    names = ["ours_middleware", "ours_store", "theirs_store"]
    labels = ["ours, via middleware", "ours, store", "mcp-persist, store"]
    colors = [COLORS["wrapped_sqlite"], "#6baed6", COLORS["persist_sqlite"]]
    ax = axes[-1]
    ax.bar(labels, [replay["cases"][n]["replay_ms"] for n in names], color=colors)
    ax.set_ylabel("ms (median)")
    ax.set_title(f"replay of {replay['events']:,} events")
    ax.tick_params(axis="x", labelsize=8)
    fig.suptitle("SQLite stores: mcp-resume-asgi vs mcp-persist (interleaved windows, shared machine)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--duration", type=float, default=2.5)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--replay-runs", type=int, default=7)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    runs, duration, replay_runs = (1, 1.0, 3) if args.quick else (args.runs, args.duration, args.replay_runs)
    started = time.time()
    log(f"replay of {args.events:,} events, {replay_runs} interleaved runs")
    replay = asyncio.run(run_replay(args.events, replay_runs))
    for name, case in replay["cases"].items():
        log(f"  {name}: {case['replay_ms']:.1f} ms")
    log(f"HTTP: {', '.join(VARIANTS)}; {runs} windows of {duration} s per cell")
    http = run_http(HTTP_CONCURRENCIES, runs, warmup_s=0.5, duration_s=duration, variants=VARIANTS)
    results = {
        "machine": machine(),
        "load": LOAD.summary(),
        "seconds": time.time() - started,
        "http": http,
        "replay": replay,
        "command": " ".join(["python -m bench.sqlite", *(argv if argv is not None else sys.argv[1:])]),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / ("sqlite-quick.json" if args.quick else "sqlite.json")
    out.write_text(json.dumps(results, indent=1))
    plot(http, replay, (RESULTS / "plots" if args.quick else PLOTS) / "sqlite_rps.png")
    print(table(http, replay))
    log(f"load average during the run: {LOAD.summary()}; figures in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
