"""The plots of a `python -m bench` run: PNG files drawn with matplotlib's Agg backend.

`draw_all(results, directory)` draws what the results hold and returns the files by
name; a section the run skipped (`--only`) draws nothing. Each figure carries a
footer with the commit, date and load, so a PNG seen alone still says what it shows.

    python -m bench.plots [RESULT.json [DIRECTORY]]   # redraw a saved run (default: the published one)
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # before pyplot: no display, the same pixels everywhere

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator

from bench.page import PLOT_FILES, ROOT
from bench.report import KIB, MEMORY_BAR_BYTES

LABELS = {
    "bare": "bare app",
    "wrapped": "wrapped, memory store",
    "wrapped_redis": "wrapped, Redis store",
    "sdk_es": "SDK's own event store",
    "wrapped_otel": "wrapped, OpenTelemetry SDK on",
}
COLORS = {
    "bare": "#444444",
    "wrapped": "#1f77b4",
    "wrapped_redis": "#d62728",
    "sdk_es": "#2ca02c",
    "wrapped_otel": "#9467bd",
}
MARKERS = {"bare": "o", "wrapped": "s", "wrapped_redis": "D", "sdk_es": "^", "wrapped_otel": "v"}
TOOL_TITLES = {
    "echo": "echo: one event per answer",
    "progress": "progress: 2 notifications + the result",
}
STORE_NAMES = {"memory": "memory", "redis": "Redis"}
STORE_COLORS = {"memory": COLORS["wrapped"], "redis": COLORS["wrapped_redis"]}
DPI = 110


def footer(results: dict[str, Any]) -> str:
    m = results["machine"]
    load = results.get("load", {})
    text = f"mcp-resume-asgi {m['commit']}, {m['date']}; {m['nproc']} CPUs, {m['cpu_model']}"
    if load.get("samples"):
        text += f"; load average {load['median']:.1f} (bench included)"
    if results.get("quick"):
        text += "; QUICK RUN"
    return text


def _finish(fig: Figure, results: dict[str, Any], path: Path) -> Path:
    fig.text(0.99, 0.01, footer(results), ha="right", va="bottom", fontsize=7, color="#777777")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, metadata={"Software": None})  # no version stamp: diffs show figures only
    plt.close(fig)
    return path


def _whiskers(ys: Sequence[float], spread: Sequence[Sequence[float]]) -> list[list[float]]:
    """Error bars from each point down to the least and up to the greatest of its samples."""
    below = [max(0.0, y - min(s)) for y, s in zip(ys, spread, strict=True)]
    above = [max(0.0, max(s) - y) for y, s in zip(ys, spread, strict=True)]
    return [below, above]


def _log_scale(ax: Axes, which: str) -> None:
    """A log scale on `which` axis ("x" or "y"), labelled 1, 2, 5, 10, 20, ... in plain numbers."""
    axis: Axis
    if which == "x":
        ax.set_xscale("log")
        axis = ax.xaxis
    else:
        ax.set_yscale("log")
        axis = ax.yaxis
    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,g}"))
    axis.set_minor_formatter(NullFormatter())


def _clients_axis(ax: Axes, clients: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(list(clients)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.set_xlabel("clients (concurrent sessions)")
    ax.grid(True, which="major", alpha=0.3)


def http_figure(results: dict[str, Any], key: str, ylabel: str, *, log_y: bool, path: Path) -> Path:
    """`key` (rps or p99_ms) against clients, one panel per tool, one line per variant;
    the line is the median of the windows, the whiskers their min and max."""
    http = results["http"]
    rows = http["rows"]
    tools = list(dict.fromkeys(r["tool"] for r in rows))
    variants = [v for v in LABELS if any(r["variant"] == v for r in rows)]
    fig, axes = plt.subplots(1, len(tools), figsize=(4.6 * len(tools), 3.8), squeeze=False)
    for ax, tool in zip(axes[0], tools, strict=True):
        clients = sorted({r["concurrency"] for r in rows if r["tool"] == tool})
        for variant in variants:
            cells = sorted(
                (r for r in rows if r["tool"] == tool and r["variant"] == variant),
                key=lambda r: r["concurrency"],
            )
            xs = [r["concurrency"] for r in cells]
            ys = [r[key] for r in cells]
            spread = [r.get(key + "_all", [r[key]]) for r in cells]
            ax.errorbar(
                xs,
                ys,
                yerr=_whiskers(ys, spread),
                label=LABELS[variant],
                color=COLORS[variant],
                marker=MARKERS[variant],
                capsize=3,
                linewidth=1.6,
                markersize=5,
            )
        _clients_axis(ax, clients)
        if log_y:
            _log_scale(ax, "y")
        else:
            ax.set_ylim(bottom=0)
        ax.set_title(TOOL_TITLES.get(tool, tool), fontsize=10)
        ax.set_ylabel(ylabel)
    axes[0][0].legend(fontsize=8, loc="best")
    fig.suptitle(
        f"tools/call over HTTP (uvicorn, one core): {ylabel}; "
        + (
            f"median of {http['runs']} windows of {http['duration_s']:g} s, whiskers min-max"
            if http["runs"] > 1
            else f"one window of {http['duration_s']:g} s"
        ),
        fontsize=10,
    )
    return _finish(fig, results, path)


def memory_figure(results: dict[str, Any], path: Path) -> Path:
    """RSS per idle stream: the bare app's (client attached), the wrapped detached stream's,
    and the part of it above the stream's payload, which issue 21's bar limits."""
    rows = results["memory"]["rows"]
    counts = sorted({r["streams"] for r in rows})
    by = {(r["streams"], r["variant"]): r for r in rows}
    bare = [by[(n, "bare")]["rss_delta_per_stream"] / KIB for n in counts]
    detached = [by[(n, "detached")]["rss_delta_per_stream"] / KIB for n in counts]
    above = [
        (by[(n, "detached")]["rss_delta_per_stream"] - by[(n, "detached")]["payload_per_stream"]) / KIB
        for n in counts
    ]
    bars: list[tuple[str, str, list[float]]] = [
        ("bare app, client attached", COLORS["bare"], bare),
        ("wrapped, detached", COLORS["wrapped"], detached),
        ("wrapped, detached, above its payload", "#7fb2da", above),
    ]
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    width = 0.8 / len(bars)
    for i, (label, color, values) in enumerate(bars):
        xs = [j + (i - (len(bars) - 1) / 2) * width for j in range(len(counts))]
        drawn = ax.bar(xs, values, width=width * 0.95, label=label, color=color)
        ax.bar_label(drawn, fmt="%.1f", fontsize=8, padding=2)
    ax.axhline(
        MEMORY_BAR_BYTES / KIB,
        color="#d62728",
        linestyle="--",
        linewidth=1,
        label=f"the bar: {MEMORY_BAR_BYTES // KIB} KiB above payload",
    )
    ax.set_xticks(range(len(counts)), [f"{n:,} idle streams" for n in counts])
    ax.set_ylabel("KiB per stream (RSS)")
    ax.set_xlim(-0.5, len(counts) - 0.5)
    ax.set_ylim(0, max(max(detached), MEMORY_BAR_BYTES / KIB) * 1.35)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, axis="y", alpha=0.3)
    events = rows[0].get("events_per_stream", 10)
    ax.set_title(f"Memory per idle stream ({events} small events each, then idle), RSS after gc", fontsize=10)
    return _finish(fig, results, path)


def replay_figure(results: dict[str, Any], path: Path) -> Path:
    """Time to replay a completed stream after a Last-Event-ID, against its number of events."""
    replay = results["engine"]["replay"]
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    for store in ("memory", "redis"):
        points = sorted((r for r in replay if r.get("store", "memory") == store), key=lambda r: r["events"])
        if not points:
            continue
        xs = [r["events"] for r in points]
        ys = [r["replay_ms"] for r in points]
        spread = [[1000 * t for t in r.get("times_s", [])] or [r["replay_ms"]] for r in points]
        ax.errorbar(
            xs,
            ys,
            yerr=_whiskers(ys, spread),
            label=f"{STORE_NAMES[store]} store",
            color=STORE_COLORS[store],
            marker="o",
            capsize=3,
        )
        last = points[-1]
        ax.annotate(
            f"{last['replay_ms']:.1f} ms\n({last['replay_events_per_s']:,.0f} events/s)",
            (last["events"], last["replay_ms"]),
            textcoords="offset points",
            xytext=(-10, 0),
            ha="right",
            va="center",
            fontsize=8,
            color=STORE_COLORS[store],
        )
    _log_scale(ax, "x")
    _log_scale(ax, "y")
    ax.margins(y=0.15)
    ax.set_xlabel("events in the stream (all replayed)")
    ax.set_ylabel("replay time, ms")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    runs = statistics.median(r["runs"] for r in replay)
    ax.set_title(
        f"Replay after Last-Event-ID, in process (median of {runs:g} runs, whiskers min-max)", fontsize=10
    )
    return _finish(fig, results, path)


def draw_all(results: dict[str, Any], directory: Path) -> dict[str, Path]:
    """Every plot the results allow, into `directory`; the files by name."""
    drawn: dict[str, Path] = {}
    files = {name: directory / file for name, file in PLOT_FILES.items()}
    if "http" in results:
        drawn["http_rps"] = http_figure(results, "rps", "requests/s", log_y=False, path=files["http_rps"])
        drawn["http_p99"] = http_figure(
            results, "p99_ms", "p99 latency, ms", log_y=True, path=files["http_p99"]
        )
    if "memory" in results:
        drawn["memory"] = memory_figure(results, files["memory"])
    if "engine" in results and results["engine"].get("replay"):
        drawn["replay"] = replay_figure(results, files["replay"])
    return drawn


if __name__ == "__main__":
    import json

    source = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "bench" / "results" / "benchmarks.json"
    target = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "bench" / "plots"
    for name, file in draw_all(json.loads(source.read_text()), target).items():
        print(f"{name}: {file}")
