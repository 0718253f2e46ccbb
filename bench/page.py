"""The short page of a `python -m bench` run: what BENCHMARKS.md shows.

`render(results, images)` gives the page's generated part for users: the machine and
command, the load during the run, today's tables with the plots (`images`: the plot
files by name, as paths relative to the page), how to reproduce, and where the history
is. `render_bars(results)` gives the project's own bars against what was measured, for
contributors, kept at the end of the page. `publish(path, text, bars)` puts each between
its markers, so what is kept by hand outside them survives a new run.
The full report of every figure is `bench.report`'s.

    python -m bench.page [RESULT.json] [--publish]   # the page of a saved run, printed or published
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from bench.report import (
    ENGINE_BAR,
    KIB,
    MEMORY_BAR_BYTES,
    P99_BAR,
    RPS_BAR,
    SDK_BAR,
    VARIANTS,
    bars,
    http_row,
    memory_pairs,
    replay_store,
    tool_cells,
)

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "BENCHMARKS.md"
#: The plots' files, by the names `render` takes them under (bench.plots draws them).
PLOT_FILES = {
    "http_rps": "http_rps.png",
    "http_p99": "http_p99.png",
    "memory": "memory_idle_stream.png",
    "replay": "replay.png",
}
BEGIN_MARK = "<!-- bench:begin"
BEGIN = f"{BEGIN_MARK} - written by `python -m bench` (bench/page.py); edits up to bench:end are lost on the next run -->"
END = "<!-- bench:end -->"
BARS_BEGIN_MARK = "<!-- bench:bars:begin"
BARS_BEGIN = f"{BARS_BEGIN_MARK} - written by `python -m bench` (bench/page.py); edits up to bench:bars:end are lost -->"
BARS_END = "<!-- bench:bars:end -->"
TITLE = "# Benchmarks"
#: The last commit whose BENCHMARKS.md held the whole run history, analyses and profiles.
LONG_PAGE_AT = "933c1c4"
#: Other load (cores, median over the HTTP windows) above which the page says "under load".
QUIET_CORES = 0.10
STORE_NAMES = {"memory": "memory", "redis": "Redis"}
VARIANT_NAMES = {
    "bare": "bare",
    "wrapped": "wrapped",
    "wrapped_redis": "wrapped, Redis",
    "sdk_es": "SDK event store",
    "wrapped_otel": "wrapped, OpenTelemetry SDK on",
}
#: The bar of the OpenTelemetry SDK configured (`wrapped_otel`) costs at most this share of req/s.
OTEL_BAR = 0.95


def _table(head: list[str], rows: list[list[str]], align: str) -> list[str]:
    return ["| " + " | ".join(head) + " |", align, *("| " + " | ".join(r) + " |" for r in rows)]


def _verdict(met: int, of: int) -> str:
    counted = f" ({met} of {of})" if of > 1 else ""
    return ("met" if met == of else "**missed**") + counted


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def background_cores(results: dict[str, Any]) -> tuple[float, float] | None:
    """Other processes' CPU use during the HTTP windows (median, max), in cores."""
    if "http" not in results:
        return None
    seen = [
        x for r in results["http"]["rows"] for x in r.get("background_cores_all", [r["background_cores"]])
    ]
    return (statistics.median(seen), max(seen)) if seen else None


def run_lines(results: dict[str, Any]) -> list[str]:
    m = results["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v != "-")
    redis = results.get("redis", {})
    redis_text = (
        f"Redis {redis['version']} on loopback"
        if "version" in redis
        else f"no Redis figures ({redis.get('skipped', '-')})"
    )
    lines = [
        f"Measured **{m['date']}** at commit **{m['commit']}** (sha256 of `mcp_resume_asgi/*.py`: "
        f"{m.get('source_sha256', '-')}), by `{results['command']}` in {_duration(results.get('runtime_s', 0))}.",
        "",
        f"Machine: {m['nproc']} CPUs, {m['cpu_model']}; Python {m['python']}; {m['platform']}; {versions}; "
        f"{redis_text}.",
        "",
    ]
    if results.get("quick"):
        lines += ["**A `--quick` run: it checks the machinery; its figures are not for citing.**", ""]
    load = results.get("load", {})
    load_text = (
        f"the load average during the run was {load['median']:.1f} (from {load['min']:.1f} to {load['max']:.1f}; "
        "the bench's own processes count in it)"
        if load.get("samples")
        else "the load average was not read"
    )
    other = background_cores(results)
    if other is None:
        lines.append(f"Load: {load_text}.")
    elif other[0] > QUIET_CORES:
        lines.append(
            f"**Measured under load**: other processes used a median {other[0]:.2f} cores (max {other[1]:.2f}) "
            f"of the {m['nproc']} during the HTTP windows, and {load_text}. Absolute figures read low and "
            "noisy; the ratios, from interleaved windows, less so. A run on a quiet machine replaces them."
        )
    else:
        lines.append(
            f"Load: a quiet machine (other processes used a median {other[0]:.2f} cores, max {other[1]:.2f}, "
            f"during the HTTP windows); {load_text}."
        )
    return lines


def bar_rows(results: dict[str, Any]) -> list[list[str]]:
    """The project's bars, each with its latest measured state."""
    rows: list[list[str]] = []
    if "http" in results:
        cells = bars(results)

        def per_tool(key: str) -> str:
            tools = dict.fromkeys(b["tool"] for b in cells)
            return ", ".join(
                f"{tool} " + " / ".join(f"{b[key]:.2f}" for b in cells if b["tool"] == tool) + "x"
                for tool in tools
            )

        clients = " / ".join(str(c) for c in sorted({b["concurrency"] for b in cells}))
        for text, key, met_key in (
            (f"wrapped/bare req/s ≥ {RPS_BAR:.2f}x", "rps_ratio", "rps_met"),
            (f"wrapped/bare p99 ≤ {P99_BAR:.2f}x", "p99_ratio", "p99_met"),
            (f"wrapped/SDK event store req/s ≥ {SDK_BAR:.2f}x", "sdk_ratio", "sdk_met"),
        ):
            met = sum(bool(b[met_key]) for b in cells)
            rows.append(
                [f"{text}, every cell", f"{per_tool(key)} ({clients} clients)", _verdict(met, len(cells))]
            )
        otel = [
            (tool, c, http_row(results, "wrapped_otel", c, tool)["rps"] / wrapped["rps"])
            for tool, c in tool_cells(results)
            if any(r["variant"] == "wrapped_otel" for r in results["http"]["rows"])
            and (wrapped := http_row(results, "wrapped", c, tool))["rps"]
        ]
        if otel:
            tools = dict.fromkeys(tool for tool, _, _ in otel)
            text = ", ".join(
                f"{tool} " + " / ".join(f"{r:.2f}" for t, _, r in otel if t == tool) + "x" for tool in tools
            )
            met = sum(r >= OTEL_BAR for _, _, r in otel)
            rows.append(
                [
                    f"OpenTelemetry SDK on / wrapped req/s ≥ {OTEL_BAR:.2f}x, every cell",
                    f"{text} ({clients} clients)",
                    _verdict(met, len(otel)),
                ]
            )
    if "memory" in results:
        pairs = memory_pairs(results)
        if pairs:
            n, _bare, det = pairs[-1]
            over = det["rss_delta_per_stream"] - det["payload_per_stream"]
            waves = results["memory"].get("waves")
            if waves is None:  # a run saved before the arrivals in waves were measured
                rows.append(
                    [
                        f"idle detached stream ≤ {MEMORY_BAR_BYTES // KIB} KiB above its payload (10,000 streams)",
                        f"{over / KIB:.1f} KiB at {n:,} streams started at once",
                        _verdict(int(over <= MEMORY_BAR_BYTES), 1),
                    ]
                )
            else:
                idle = waves["rss_delta_per_stream"] - waves["payload_per_stream"]
                rows.append(
                    [
                        f"idle detached stream ≤ {MEMORY_BAR_BYTES // KIB} KiB above its payload (10,000 streams)",
                        f"{idle / KIB:.2f} KiB RSS at {waves['streams']:,} streams arriving 100 at a time "
                        f"(all {n:,} started at once: {over / KIB:.1f} KiB, the peak of them all in flight, "
                        "which the allocator keeps)",
                        _verdict(int(idle <= MEMORY_BAR_BYTES), 1),
                    ]
                )
    if "engine" in results:
        batched = [r for r in results["engine"]["throughput"] if not r["checkpoint"]]
        if batched:
            r = max(batched, key=lambda r: r["events"])
            rows.append(
                [
                    f"engine ≥ {ENGINE_BAR:,} events/s, app never yields",
                    f"{r['wrapped_events_per_s']:,.0f} events/s ({r['events']:,} events; "
                    f"{r.get('wrapped_events_per_cpu_s', float('nan')):,.0f} per CPU-second)",
                    _verdict(int(r["wrapped_events_per_s"] >= ENGINE_BAR), 1),
                ]
            )
    return rows


def http_lines(results: dict[str, Any]) -> list[str]:
    h = results["http"]
    present = [v for v in VARIANTS if any(r["variant"] == v for r in h["rows"])]
    rows = []
    for tool, c in tool_cells(results):
        cells = [tool, str(c)]
        for v in present:
            r = http_row(results, v, c, tool)
            cells.append(f"{r['rps']:,.0f} / {r['p99_ms']:.1f}")
        bare, wrapped = http_row(results, "bare", c, tool), http_row(results, "wrapped", c, tool)
        cells.append(f"{wrapped['server_cpu_us_per_req'] - bare['server_cpu_us_per_req']:+,.0f}")
        rows.append(cells)
    errors = sum(sum(r["errors_all"]) for r in h["rows"])
    return [
        "A stock `MCPServer` under uvicorn, one process per variant pinned to one core, the load generator on "
        "the other: each client is one session calling one tool back to back, every answer checked. `echo` "
        "answers with one event, `progress` with two progress notifications and the result. "
        + (
            f"Each figure is the median of {h['runs']} windows of {h['duration_s']:g} s, the windows of all "
            "variants interleaved"
            if h["runs"] > 1
            else f"Each figure is from one window of {h['duration_s']:g} s"
        )
        + f"; {errors} wrong answers."
        + (
            " The Redis store's Redis runs on the same machine, unpinned."
            if "wrapped_redis" in present
            else ""
        ),
        "",
        *_table(
            [
                "tool",
                "clients",
                *(f"{VARIANT_NAMES[v]}: req/s / p99 ms" for v in present),
                "CPU µs/call, wrapped - bare",
            ],
            rows,
            "|---|---:|" + "---:|" * (len(present) + 1),
        ),
        "",
        "The last column, the server's CPU time per call, moves least with other load on the machine.",
    ]


def memory_lines(results: dict[str, Any]) -> list[str]:
    rows = [
        [
            f"{n:,}",
            f"{bare['rss_delta_per_stream'] / KIB:.1f}",
            f"{det['rss_delta_per_stream'] / KIB:.1f}",
            f"{det['payload_per_stream'] / KIB:.2f}",
            f"{(det['rss_delta_per_stream'] - det['payload_per_stream']) / KIB:.1f}",
        ]
        for n, bare, det in memory_pairs(results)
    ]
    return [
        "N streams at once, each an MCP-looking POST whose app writes 10 small events and idles; wrapped, the "
        "client takes its events and disconnects (a *detached* stream, kept for a resume); bare, the client "
        "stays. RSS growth per stream after `gc.collect()`, each figure from fresh processes.",
        "",
        *_table(
            ["streams", "bare app KiB", "wrapped, detached KiB", "its payload KiB", "above payload KiB"],
            rows,
            "|---:|---:|---:|---:|---:|",
        ),
        *_waves_lines(results),
    ]


def _waves_lines(results: dict[str, Any]) -> list[str]:
    """The streams arriving over time: what the idle streams hold, not the peak of them all in flight."""
    waves = results["memory"].get("waves")
    if waves is None:
        return []
    idle = waves["rss_delta_per_stream"] - waves["payload_per_stream"]
    traced = results["memory"].get("traced", {}).get("detached", {})
    live = traced.get("traced_delta_per_stream")
    lines = [
        "",
        f"The same {waves['streams']:,} streams arriving 100 at a time, each wave's clients gone before the "
        f"next arrives (how idle streams pile up over a resume window): **{idle / KIB:.2f} KiB** per stream above "
        f"its payload ({waves['rss_delta_per_stream'] / KIB:.2f} KiB RSS). Started all at once, RSS follows the "
        "peak of every request in flight together (the request's frames and the bench's connected client), "
        "which pymalloc keeps in its arenas.",
    ]
    if live is not None:
        lines[-1] += (
            f" What an idle stream holds, traced (tracemalloc, {traced['streams']:,} streams): "
            f"{(live - traced['payload_per_stream']) / KIB:.2f} KiB above its payload."
        )
    return lines


def replay_lines(results: dict[str, Any]) -> list[str]:
    replay = results["engine"]["replay"]
    stores = [s for s in ("memory", "redis") if any(replay_store(r) == s for r in replay)]
    counts = sorted({r["events"] for r in replay})
    by = {(replay_store(r), r["events"]): r for r in replay}
    rows = []
    for n in counts:
        cells = [f"{n:,}"]
        for s in stores:
            r = by.get((s, n))
            cells.append(f"{r['replay_ms']:.2f} ({r['replay_events_per_s']:,.0f}/s)" if r else "-")
        rows.append(cells)
    return [
        "A completed stream of N events, then a GET with `Last-Event-ID` = its priming id: the time until its "
        "last event is sent, in process (no sockets)"
        + ("; the Redis store on loopback." if "redis" in stores else "."),
        "",
        *_table(
            ["events", *(f"{STORE_NAMES[s]} store: ms (events/s)" for s in stores)],
            rows,
            "|---:|" + "---:|" * len(stores),
        ),
    ]


def engine_lines(results: dict[str, Any]) -> list[str]:
    rows = [
        [
            f"{r['events']:,}",
            "yields per event" if r["checkpoint"] else "never yields",
            f"{r['bare_events_per_s']:,.0f}",
            f"{r['wrapped_events_per_s']:,.0f}",
            f"{r.get('wrapped_events_per_cpu_s', float('nan')):,.0f}",
        ]
        for r in results["engine"]["throughput"]
    ]
    return [
        "One stream of N small events through the middleware, in process, its client attached.",
        "",
        *_table(
            ["events", "app", "bare events/s", "wrapped events/s", "wrapped events/CPU-s"],
            rows,
            "|---:|---|---:|---:|---:|",
        ),
    ]


def _image(images: dict[str, str], name: str, alt: str) -> list[str]:
    return [f"![{alt}]({images[name]})", ""] if name in images else []


def render(results: dict[str, Any], images: dict[str, str]) -> str:
    """The generated part of the page, markers included."""
    parts = [BEGIN, "", *run_lines(results), ""]
    if "http" in results:
        parts += ["## tools/call over HTTP: req/s and p99 against clients", ""]
        parts += _image(images, "http_rps", "requests per second against clients")
        parts += _image(images, "http_p99", "p99 latency against clients")
        parts += [*http_lines(results), ""]
    if "memory" in results:
        parts += ["## Memory per idle detached stream", ""]
        parts += _image(images, "memory", "memory per idle stream")
        parts += [*memory_lines(results), ""]
    if "engine" in results:
        parts += ["## Replay time against events", ""]
        parts += _image(images, "replay", "replay time against events")
        parts += [*replay_lines(results), "", "## The engine's throughput", "", *engine_lines(results), ""]
    parts += [
        "## Reproduce",
        "",
        "```sh",
        'pip install -e ".[bench]"                    # or: source scripts/_venv.sh "test,client,redis,bench"',
        ".venv/bin/python -m bench                    # the full run: rewrites this page (up to bench:end), bench/plots/, bench/results/benchmarks.json",
        ".venv/bin/python -m bench --quick            # checks the machinery in ~1.5 min; writes bench/results/ only",
        ".venv/bin/python -m bench.report bench/results/benchmarks.json   # every figure of this run (CPU per call, tracemalloc, scaling)",
        "```",
        "",
        "Linux with 2 or more CPUs; the Redis figures use the Redis at `--redis-url` (default "
        "127.0.0.1:6379) under a fresh key prefix deleted at the end (`--no-redis` skips them). "
        "The method, in detail: [bench/README.md](bench/README.md).",
        "",
        "## History",
        "",
        "Earlier runs, with their analyses (where the time goes per call, the garbage collector at 32 clients, "
        "what an idle detached stream holds, py-spy profiles, the memory-vs-Redis store figures) are in git: "
        f"`git log -p BENCHMARKS.md`; the last page that held them all is `git show {LONG_PAGE_AT}:BENCHMARKS.md`.",
        "",
        END,
    ]
    return "\n".join(parts) + "\n"


def render_bars(results: dict[str, Any]) -> str:
    """The project's own bars against this run, for contributors (the end of the page),
    markers included; empty when the run measured none of them."""
    rows = bar_rows(results)
    if not rows:
        return ""
    parts = [
        BARS_BEGIN,
        "",
        "### The bars against the last `python -m bench` run",
        "",
        "What the project holds itself to, judged from the figures at the top of this page.",
        "",
        *_table(["bar", "measured", "verdict"], rows, "|---|---|---|"),
        "",
        BARS_END,
    ]
    return "\n".join(parts) + "\n"


def has_markers(page: str, begin: str = BEGIN_MARK, end: str = END) -> bool:
    start = page.find(begin)
    return start >= 0 and end in page[start:]


def _replace_block(page: str, begin: str, end: str, block: str) -> str:
    start = page.index(begin)
    stop = page.index(end, start) + len(end)
    return page[:start] + block.rstrip("\n") + page[stop:]


def splice(current: str, generated: str, bars: str = "") -> str:
    """`current` with its generated parts replaced, what is outside the markers kept; a page
    without markers becomes the title and the generated part. The bars' block is replaced
    where it is, or added at the end of the page."""
    page = (
        _replace_block(current, BEGIN_MARK, END, generated)
        if has_markers(current)
        else f"{TITLE}\n\n{generated}"
    )
    if not bars:
        return page
    if has_markers(page, BARS_BEGIN_MARK, BARS_END):
        return _replace_block(page, BARS_BEGIN_MARK, BARS_END, bars)
    return page.rstrip("\n") + "\n\n" + bars


def publish(path: Path, generated: str, bars: str = "") -> None:
    """Write the generated parts into the page at `path` (see `splice`)."""
    current = path.read_text() if path.exists() else ""
    if current and not has_markers(current):
        print(f"bench: {path} had no bench:begin/end markers: rewritten whole", file=sys.stderr)
    path.write_text(splice(current, generated, bars))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.page", description="The page of a saved run.")
    parser.add_argument("result", nargs="?", default=str(ROOT / "bench" / "results" / "benchmarks.json"))
    parser.add_argument("--plots", default=str(ROOT / "bench" / "plots"), help="where the run's plots are")
    parser.add_argument(
        "--publish", action="store_true", help=f"write it into {PAGE.name} instead of printing"
    )
    args = parser.parse_args(argv)
    results = json.loads(Path(args.result).read_text())
    plots = Path(args.plots)
    images = {
        name: os.path.relpath(plots / file, PAGE.parent)
        for name, file in PLOT_FILES.items()
        if (plots / file).exists()
    }
    text = render(results, images)
    bars = render_bars(results)
    if args.publish:
        publish(PAGE, text, bars)
    else:
        sys.stdout.write(text + ("\n" + bars if bars else ""))


if __name__ == "__main__":
    main()
