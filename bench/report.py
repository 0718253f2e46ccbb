"""Markdown report of a `python -m bench` run (also written to bench/results/latest.md)."""

from __future__ import annotations

from typing import Any

KIB = 1024
#: The HTTP variants, in the order tables show them (bench.apps.VARIANTS).
VARIANTS = ("bare", "wrapped", "wrapped_redis", "sdk_es")
#: The bars of issue 12, kept by issue 21, per (tool, concurrency) cell of the HTTP run.
RPS_BAR = 0.90  # wrapped/bare req/s >= this
P99_BAR = 1.20  # wrapped/bare p99 <= this
SDK_BAR = 1.00  # wrapped/sdk_es req/s >= this
#: ... and for the engine: events/s when the app never yields, and an idle detached stream's
#: RSS above its payload (10,000 streams).
ENGINE_BAR = 150_000
MEMORY_BAR_BYTES = 4 * KIB


def _row(cells: list[Any]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _table(head: list[str], rows: list[list[Any]], align: str | None = None) -> str:
    sep = align or "|" + "|".join("---:" if i else "---" for i in range(len(head))) + "|"
    return "\n".join([_row(head), sep, *(_row(r) for r in rows)])


def _ok(flag: bool) -> str:
    return "met" if flag else "**MISSED**"


def _tool(row: dict[str, Any]) -> str:
    return str(row.get("tool", "echo"))  # runs saved before the progress tool measured echo only


def http_row(results: dict[str, Any], variant: str, c: int, tool: str = "echo") -> dict[str, Any]:
    for row in results["http"]["rows"]:
        if row["variant"] == variant and row["concurrency"] == c and _tool(row) == tool:
            return row  # type: ignore[no-any-return]
    raise KeyError((tool, variant, c))


def tool_cells(results: dict[str, Any]) -> list[tuple[str, int]]:
    """The HTTP run's (tool, concurrency) cells: tools in run order, concurrencies ascending."""
    rows = results["http"]["rows"]
    tools = list(dict.fromkeys(_tool(r) for r in rows))
    return [(t, c) for t in tools for c in sorted({r["concurrency"] for r in rows if _tool(r) == t})]


def bars(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The bars (issues 12, 21) for each (tool, concurrency) cell: the ratios and whether each is met."""
    out = []
    for tool, c in tool_cells(results):
        bare, wrapped, sdk = (http_row(results, v, c, tool) for v in ("bare", "wrapped", "sdk_es"))
        rps = wrapped["rps"] / bare["rps"]
        p99 = wrapped["p99_ms"] / bare["p99_ms"]
        vs_sdk = wrapped["rps"] / sdk["rps"]
        out.append(
            {
                "tool": tool,
                "concurrency": c,
                "rps_ratio": rps,
                "rps_met": rps >= RPS_BAR,
                "p99_ratio": p99,
                "p99_met": p99 <= P99_BAR,
                "sdk_ratio": vs_sdk,
                "sdk_met": vs_sdk >= SDK_BAR,
                "cpu_capacity_vs_bare": bare["server_cpu_us_per_req"] / wrapped["server_cpu_us_per_req"],
                "cpu_capacity_vs_sdk": sdk["server_cpu_us_per_req"] / wrapped["server_cpu_us_per_req"],
                "errors": int(sum(sum(r["errors_all"]) for r in (bare, wrapped, sdk))),
            }
        )
    return out


def _verdict(ratio: float, met: bool) -> str:
    return f"{ratio:.3f}x {_ok(met)}"


def targets(results: dict[str, Any]) -> list[list[Any]]:
    out: list[list[Any]] = []
    if "http" in results:
        cells = bars(results)
        n = len(cells)
        for prefix, text, key, lower_is_worse in (
            ("1", f"wrapped/bare req/s >= {RPS_BAR:.2f}x in every cell", "rps", True),
            ("1", f"wrapped/bare p99 <= {P99_BAR:.2f}x in every cell", "p99", False),
            ("2", "wrapped at least as fast as sdk_es (req/s) in every cell", "sdk", True),
        ):
            ratios = [float(b[f"{key}_ratio"]) for b in cells]
            w = cells[ratios.index(min(ratios) if lower_is_worse else max(ratios))]
            met = sum(bool(b[f"{key}_met"]) for b in cells)
            out.append(
                [
                    f"{prefix}. {text} (issues 12, 21)",
                    f"{met}/{n} cells met; worst {w[f'{key}_ratio']:.3f}x ({w['tool']} c={w['concurrency']})",
                    _ok(met == n),
                ]
            )
    if "engine" in results:
        for r in results["engine"]["throughput"]:
            if r["events"] == 10_000:
                mode = "app yields per event (live)" if r["checkpoint"] else "app never yields (batched)"
                bar = 100_000 if r["checkpoint"] else ENGINE_BAR  # issue 12 (both), 21 (batched)
                ok = r["wrapped_events_per_s"] >= bar
                out.append(
                    [
                        f"3. >= {bar:,} events/s through the engine, {mode} (issue 12)",
                        f"{r['wrapped_events_per_s']:,.0f}/s",
                        _ok(ok),
                    ]
                )
        for r in results["engine"]["replay"]:
            if r["events"] == 10_000 and replay_store(r) == "memory":
                out.append(
                    [
                        "3. replay of 10,000 events < 10 ms (issue 12)",
                        f"{r['replay_ms']:.1f} ms",
                        _ok(r["replay_ms"] < 10),
                    ]
                )
    if "memory" in results:
        for n, bare, det in memory_pairs(results):
            if n == 10_000:
                over = det["rss_delta_per_stream"] - det["payload_per_stream"]
                out.append(
                    [
                        "4. <= 4 KiB per idle detached stream above payload, RSS (issues 12, 21)",
                        f"{over / KIB:.1f} KiB",
                        _ok(over <= MEMORY_BAR_BYTES),
                    ]
                )
                net = over - bare["rss_delta_per_stream"]
                out.append(
                    [
                        "4. same, also net of the bare app's own idle stream",
                        f"{net / KIB:.1f} KiB",
                        _ok(net <= MEMORY_BAR_BYTES),
                    ]
                )
    return out


def replay_store(row: dict[str, Any]) -> str:
    return str(row.get("store", "memory"))  # runs saved before the Redis replay measured memory only


def memory_pairs(results: dict[str, Any]) -> list[tuple[int, dict[str, Any], dict[str, Any]]]:
    rows = results["memory"]["rows"]
    counts = sorted({r["streams"] for r in rows})
    pairs = []
    for n in counts:
        bare = next(r for r in rows if r["streams"] == n and r["variant"] == "bare")
        det = next(r for r in rows if r["streams"] == n and r["variant"] == "detached")
        pairs.append((n, bare, det))
    return pairs


def render(results: dict[str, Any]) -> str:
    m = results["machine"]
    parts = [
        "## Run",
        "",
        f"* command: `{results['command']}` (from the repository root, `.venv/bin/python`)",
        f"* date: {m['date']}; commit {m['commit']}; sha256 of mcp_resume_asgi/*.py: {m.get('source_sha256', '-')}",
        f"* machine: {m['nproc']} CPUs, {m['cpu_model']}; Python {m['python']}; {m['platform']}",
        "* versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()),
        f"* runtime: {results.get('runtime_s', 0):.0f} s",
        "",
        "## Targets",
        "",
        _table(["target", "measured", "verdict"], targets(results), "|---|---:|---|"),
    ]
    if "http" in results:
        h = results["http"]
        bg = [x for r in h["rows"] for x in r["background_cores_all"]]
        parts += [
            "",
            "## 1-2. tools/call over SSE on a stock MCPServer under uvicorn",
            "",
            "Tools: `echo` (the answer is one event: the result) and `progress` (the request carries "
            "`_meta.progressToken`; the answer is two `notifications/progress`, then the result; the load "
            "generator checks all three, and counts a wrong answer as an error). "
            f"Medians of {h['runs']} interleaved windows of {h['duration_s']} s (after {h['warmup_s']} s warm-up) per cell. "
            "Server pinned to CPU 1, load generator to CPU 0. `CPU/req` is the server process's CPU time per "
            "completed request (robust to other load on the machine) and `capacity` = 1 s / that: the req/s one "
            "whole core would serve; `util` is the server's CPU use in the window (below 100% = it did not get its "
            "core, or the load generator could not keep it busy). "
            f"Other load on the machine during the windows: median {sorted(bg)[len(bg) // 2]:.2f} cores, max {max(bg):.2f}.",
            "",
            "### The bars (issues 12, 21), per cell",
            "",
            f"Each cell (tool, concurrency) must have wrapped/bare req/s >= {RPS_BAR:.2f}x, wrapped/bare p99 "
            f"<= {P99_BAR:.2f}x and wrapped/sdk_es req/s >= {SDK_BAR:.2f}x. The last two columns are the same "
            "comparisons from server CPU per request (capacity of one core; not bars, but the figures least "
            "moved by other load on the machine).",
            "",
        ]
        cells = bars(results)
        parts.append(
            _table(
                [
                    "tool",
                    "conc.",
                    f"wrapped/bare req/s (>= {RPS_BAR:.2f}x)",
                    f"wrapped/bare p99 (<= {P99_BAR:.2f}x)",
                    f"wrapped/sdk_es req/s (>= {SDK_BAR:.2f}x)",
                    "all three",
                    "errors",
                    "capacity vs bare",
                    "capacity vs sdk_es",
                ],
                [
                    [
                        b["tool"],
                        b["concurrency"],
                        _verdict(b["rps_ratio"], b["rps_met"]),
                        _verdict(b["p99_ratio"], b["p99_met"]),
                        _verdict(b["sdk_ratio"], b["sdk_met"]),
                        _ok(b["rps_met"] and b["p99_met"] and b["sdk_met"]),
                        b["errors"],
                        f"{b['cpu_capacity_vs_bare']:.2f}x",
                        f"{b['cpu_capacity_vs_sdk']:.2f}x",
                    ]
                    for b in cells
                ],
                "|---|---:|---:|---:|---:|---|---:|---:|---:|",
            )
        )
        all_met = sum(b["rps_met"] and b["p99_met"] and b["sdk_met"] for b in cells)
        parts += [
            "",
            f"Cells meeting all three bars: {all_met} of {len(cells)}.",
            "",
            "### Every cell and variant",
            "",
        ]
        rows = []
        present = [v for v in VARIANTS if any(r["variant"] == v for r in h["rows"])]
        for tool, c in tool_cells(results):
            bare = http_row(results, "bare", c, tool)
            sdk = http_row(results, "sdk_es", c, tool)
            for v in present:
                r = http_row(results, v, c, tool)
                rows.append(
                    [
                        tool,
                        c,
                        v,
                        f"{r['rps']:.0f}",
                        f"{r['rps'] / bare['rps']:.2f}x",
                        f"{r['rps'] / sdk['rps']:.2f}x",
                        f"{r['p50_ms']:.1f}",
                        f"{r['p99_ms']:.1f}",
                        f"{r['p99_ms'] / bare['p99_ms']:.2f}x",
                        f"{r['server_cpu_us_per_req']:.0f}",
                        f"{1e6 / r['server_cpu_us_per_req']:.0f}",
                        f"{bare['server_cpu_us_per_req'] / r['server_cpu_us_per_req']:.2f}x",
                        f"{r['server_util']:.0%}",
                        int(sum(r["errors_all"])),
                    ]
                )
        parts.append(
            _table(
                [
                    "tool",
                    "conc.",
                    "variant",
                    "req/s",
                    "vs bare",
                    "vs sdk_es",
                    "p50 ms",
                    "p99 ms",
                    "p99 vs bare",
                    "CPU/req µs",
                    "capacity req/s",
                    "capacity vs bare",
                    "util",
                    "errors",
                ],
                rows,
                "|---|---:|---|" + "---:|" * 11,
            )
        )
    if "engine" in results:
        e = results["engine"]
        parts += [
            "",
            "## 3. The engine in process (no sockets, one core)",
            "",
            "A raw ASGI app streams N small events (N-1 `notifications/progress` + the response, "
            "~150 bytes each, one `http.response.body` per event) to an MCP-looking POST; driven through "
            "`ResumeMiddleware.__call__` with fake receive/send. *batched*: the app writes every event without "
            "yielding, so the engine forwards them in batches; *live*: the app yields to the loop after each "
            "event (what a real app producing events over time does), so each event is forwarded on its own.",
            "",
        ]
        rows = []
        for r in e["throughput"]:
            rows.append(
                [
                    f"{r['events']:,}",
                    "live" if r["checkpoint"] else "batched",
                    f"{r['bare_events_per_s']:,.0f}",
                    f"{r['wrapped_events_per_s']:,.0f}",
                    f"{r['ratio']:.3f}x",
                    f"{r['wrapped_us_per_event']:.1f}",
                    f"{r['overhead_us_per_event']:.1f}",
                    f"{r.get('bare_events_per_cpu_s', float('nan')):,.0f}",
                    f"{r.get('wrapped_events_per_cpu_s', float('nan')):,.0f}",
                ]
            )
        parts.append(
            _table(
                [
                    "events",
                    "app",
                    "bare events/s",
                    "wrapped events/s",
                    "wrapped/bare",
                    "µs/event",
                    "overhead µs/event",
                    "bare events/CPU-s",
                    "wrapped events/CPU-s",
                ],
                rows,
            )
        )
        parts += [
            "",
            "Replay: a GET with `Last-Event-ID` = the priming id (seq 0) of a completed stream, until the "
            "last event is sent; on the memory store, and on a `RedisStore` on loopback (CPU: this process's).",
            "",
        ]
        parts.append(
            _table(
                ["store", "events", "replay ms", "events/s", "CPU ms", "bytes sent"],
                [
                    [
                        replay_store(r),
                        f"{r['events']:,}",
                        f"{r['replay_ms']:.2f}",
                        f"{r['replay_events_per_s']:,.0f}",
                        f"{r.get('replay_cpu_ms', float('nan')):.2f}",
                        f"{r['bytes']:,}",
                    ]
                    for r in e["replay"]
                ],
            )
        )
    if "memory" in results:
        parts += [
            "",
            "## 4. Memory of idle streams (in process)",
            "",
            "Each stream: an MCP-looking POST, the app writes 10 small events and then idles (blocked in "
            "`receive()`). *detached*: wrapped (`Policy(max_wait_s=3600)`), the client takes its 10 events and "
            "disconnects. *bare*: the app alone with its client still connected — the app's own cost of an idle "
            "stream, paid with or without the middleware. RSS delta after `gc.collect()`, per stream; payload = "
            "event bytes in the store.",
            "",
        ]
        rows = []
        for n, bare, det in memory_pairs(results):
            over = det["rss_delta_per_stream"] - det["payload_per_stream"]
            rows.append(
                [
                    f"{n:,}",
                    f"{bare['rss_delta_per_stream'] / KIB:.1f}",
                    f"{det['rss_delta_per_stream'] / KIB:.1f}",
                    f"{det['payload_per_stream'] / KIB:.2f}",
                    f"{over / KIB:.1f}",
                    f"{(over - bare['rss_delta_per_stream']) / KIB:.1f}",
                    f"{det['tasks_per_stream']:.0f}",
                    f"{det['setup_s']:.1f}",
                ]
            )
        parts.append(
            _table(
                [
                    "streams",
                    "bare KiB/stream",
                    "detached KiB/stream",
                    "payload KiB/stream",
                    "detached - payload",
                    "... - bare",
                    "tasks/stream",
                    "setup s",
                ],
                rows,
            )
        )
        traced = results["memory"]["traced"]
        det = traced["detached"]
        parts += [
            "",
            f"tracemalloc ({det['streams']} streams, 10 frames): detached {det['traced_delta_per_stream'] / KIB:.1f} KiB/stream "
            f"traced, bare {traced['bare']['traced_delta_per_stream'] / KIB:.1f} KiB/stream. "
            "Where the detached stream's bytes come from, by the innermost `mcp_resume_asgi` line on the allocating stack:",
            "",
            _table(
                ["bytes/stream", "blocks/stream", "line"],
                [
                    [f"{x['bytes_per_stream']:,.0f}", f"{x['blocks_per_stream']:.1f}", x["where"]]
                    for x in det["top_engine_lines"][:15]
                ],
            ),
            "",
            "Objects per detached stream (gc-tracked, by type):",
            "",
            _table(
                ["objects/stream", "type"],
                [[f"{v:.1f}", k] for k, v in list(det["objects_per_stream"].items())[:15]],
            ),
        ]
    parts += ["", "## 5. Scaling (1x -> 10x)", "", scaling(results)]
    if "profiles" in results:
        parts += ["", "## Profiles (py-spy)", ""]
        for name, prof in results["profiles"].items():
            parts += [f"### {name}", "", prof["note"], "", prof["table"], ""]
    return "\n".join(parts) + "\n"


def scaling(results: dict[str, Any]) -> str:
    rows: list[list[Any]] = []

    def add(name: str, one: float, ten: float, fmt: str) -> None:
        rows.append([name, format(one, fmt), format(ten, fmt), f"{ten / one:.2f}x" if one else "-"])

    if "http" in results:
        for tool in dict.fromkeys(t for t, _ in tool_cells(results)):
            cs = sorted({c for t, c in tool_cells(results) if t == tool})
            if len(cs) < 2:
                continue
            hi = cs[-1]
            lo = min(cs[:-1], key=lambda c: abs(c - hi / 10))  # the pair nearest 10x apart (4 -> 32)
            for v in (v for v in VARIANTS if any(r["variant"] == v for r in results["http"]["rows"])):
                a, b = http_row(results, v, lo, tool), http_row(results, v, hi, tool)
                add(f"1-2. {tool}: {v} req/s (c={lo} -> {hi})", a["rps"], b["rps"], ".0f")
                add(f"1-2. {tool}: {v} p99 ms", a["p99_ms"], b["p99_ms"], ".1f")
                add(
                    f"1-2. {tool}: {v} server CPU µs/req",
                    a["server_cpu_us_per_req"],
                    b["server_cpu_us_per_req"],
                    ".0f",
                )
            add(
                f"1. {tool}: wrapped/bare req/s",
                http_row(results, "wrapped", lo, tool)["rps"] / http_row(results, "bare", lo, tool)["rps"],
                http_row(results, "wrapped", hi, tool)["rps"] / http_row(results, "bare", hi, tool)["rps"],
                ".2f",
            )
            add(
                f"2. {tool}: wrapped/sdk_es req/s",
                http_row(results, "wrapped", lo, tool)["rps"] / http_row(results, "sdk_es", lo, tool)["rps"],
                http_row(results, "wrapped", hi, tool)["rps"] / http_row(results, "sdk_es", hi, tool)["rps"],
                ".2f",
            )
    if "engine" in results:
        e = results["engine"]
        for checkpoint in (False, True):
            rs = sorted(
                (r for r in e["throughput"] if r["checkpoint"] == checkpoint), key=lambda r: r["events"]
            )
            if len(rs) >= 2:
                mode = "live" if checkpoint else "batched"
                add(
                    f"3. wrapped events/s, {mode} ({rs[0]['events']:,} -> {rs[-1]['events']:,} events)",
                    rs[0]["wrapped_events_per_s"],
                    rs[-1]["wrapped_events_per_s"],
                    ",.0f",
                )
        for store in ("memory", "redis"):
            rp = sorted((r for r in e["replay"] if replay_store(r) == store), key=lambda r: r["events"])
            tenfold = [(a, b) for a in rp for b in rp if b["events"] == 10 * a["events"]]
            if tenfold:
                a, b = tenfold[-1]  # the largest pair 10x apart (1,000 -> 10,000)
                add(
                    f"3. replay ms, {store} store ({a['events']:,} -> {b['events']:,} events)",
                    a["replay_ms"],
                    b["replay_ms"],
                    ".2f",
                )
    if "memory" in results:
        pairs = memory_pairs(results)
        if len(pairs) >= 2:
            (n1, b1, d1), (n2, b2, d2) = pairs[0], pairs[-1]
            add(
                f"4. detached KiB/stream ({n1:,} -> {n2:,} streams)",
                d1["rss_delta_per_stream"] / KIB,
                d2["rss_delta_per_stream"] / KIB,
                ".1f",
            )
            add(
                "4. bare KiB/stream",
                b1["rss_delta_per_stream"] / KIB,
                b2["rss_delta_per_stream"] / KIB,
                ".1f",
            )
            add("4. detached setup s (create + fill + detach)", d1["setup_s"], d2["setup_s"], ".2f")
            add(
                "4. detached ms per stream set up",
                1000 * d1["setup_s"] / n1,
                1000 * d2["setup_s"] / n2,
                ".2f",
            )
    if not rows:
        return "(needs both load levels)"
    return _table(["figure", "1x", "10x", "10x / 1x"], rows)


if __name__ == "__main__":  # python -m bench.report bench/results/latest.json: re-render a saved run
    import json
    import sys

    with open(sys.argv[1] if len(sys.argv) > 1 else "bench/results/latest.json") as f:
        print(render(json.load(f)))
