"""Markdown report of a `python -m bench` run (also written to bench/results/latest.md)."""

from __future__ import annotations

from typing import Any

KIB = 1024


def _row(cells: list[Any]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _table(head: list[str], rows: list[list[Any]], align: str | None = None) -> str:
    sep = align or "|" + "|".join("---:" if i else "---" for i in range(len(head))) + "|"
    return "\n".join([_row(head), sep, *(_row(r) for r in rows)])


def _ok(flag: bool) -> str:
    return "met" if flag else "**MISSED**"


def _http(results: dict[str, Any], variant: str, c: int) -> dict[str, Any]:
    for row in results["http"]["rows"]:
        if row["variant"] == variant and row["concurrency"] == c:
            return row  # type: ignore[no-any-return]
    raise KeyError((variant, c))


def targets(results: dict[str, Any]) -> list[list[Any]]:
    out: list[list[Any]] = []
    if "http" in results:
        for c in sorted({r["concurrency"] for r in results["http"]["rows"]}):
            bare, wrapped, sdk = (_http(results, v, c) for v in ("bare", "wrapped", "sdk_es"))
            ratio = wrapped["rps"] / bare["rps"]
            out.append([f"1. wrapped throughput >= 0.95x bare (c={c})", f"{ratio:.2f}x", _ok(ratio >= 0.95)])
            cap = bare["server_cpu_us_per_req"] / wrapped["server_cpu_us_per_req"]
            out.append(
                [
                    f"1. same, from server CPU per request (capacity of one core) (c={c})",
                    f"{cap:.2f}x",
                    _ok(cap >= 0.95),
                ]
            )
            p99 = wrapped["p99_ms"] / bare["p99_ms"]
            out.append([f"1. wrapped p99 <= 1.10x bare (c={c})", f"{p99:.2f}x", _ok(p99 <= 1.10)])
            vs = wrapped["rps"] / sdk["rps"]
            out.append([f"2. wrapped >= SDK event store, req/s (c={c})", f"{vs:.2f}x", _ok(vs >= 1.0)])
            cap = sdk["server_cpu_us_per_req"] / wrapped["server_cpu_us_per_req"]
            out.append([f"2. same, from server CPU per request (c={c})", f"{cap:.2f}x", _ok(cap >= 1.0)])
            lat = wrapped["p50_ms"] / sdk["p50_ms"]
            out.append([f"2. wrapped <= SDK event store, p50 (c={c})", f"{lat:.2f}x", _ok(lat <= 1.0)])
    if "engine" in results:
        for r in results["engine"]["throughput"]:
            if r["events"] == 10_000:
                mode = "app yields per event (live)" if r["checkpoint"] else "app never yields (batched)"
                ok = r["wrapped_events_per_s"] >= 100_000
                out.append(
                    [
                        f"3. >= 100,000 events/s through the engine, {mode}",
                        f"{r['wrapped_events_per_s']:,.0f}/s",
                        _ok(ok),
                    ]
                )
        for r in results["engine"]["replay"]:
            if r["events"] == 10_000:
                out.append(
                    [
                        "3. replay of 10,000 events < 50 ms",
                        f"{r['replay_ms']:.1f} ms",
                        _ok(r["replay_ms"] < 50),
                    ]
                )
    if "memory" in results:
        for n, bare, det in _memory_pairs(results):
            if n == 10_000:
                over = det["rss_delta_per_stream"] - det["payload_per_stream"]
                out.append(
                    [
                        "4. < 2 KiB per detached stream above payload (RSS)",
                        f"{over / KIB:.1f} KiB",
                        _ok(over < 2 * KIB),
                    ]
                )
                net = over - bare["rss_delta_per_stream"]
                out.append(
                    [
                        "4. same, also net of the bare app's own idle stream",
                        f"{net / KIB:.1f} KiB",
                        _ok(net < 2 * KIB),
                    ]
                )
    return out


def _memory_pairs(results: dict[str, Any]) -> list[tuple[int, dict[str, Any], dict[str, Any]]]:
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
            f"Medians of {h['runs']} interleaved windows of {h['duration_s']} s (after {h['warmup_s']} s warm-up) per cell. "
            "Server pinned to CPU 1, load generator to CPU 0. `CPU/req` is the server process's CPU time per "
            "completed request (robust to other load on the machine) and `capacity` = 1 s / that: the req/s one "
            "whole core would serve; `util` is the server's CPU use in the window (below 100% = it did not get its "
            "core, or the load generator could not keep it busy). "
            f"Other load on the machine during the windows: median {sorted(bg)[len(bg) // 2]:.2f} cores, max {max(bg):.2f}.",
            "",
        ]
        rows = []
        for c in sorted({r["concurrency"] for r in h["rows"]}):
            bare = _http(results, "bare", c)
            sdk = _http(results, "sdk_es", c)
            present = {row["variant"] for row in h["rows"]}
            for v in ("bare", "wrapped", "sdk_es", "decoupled"):
                if v not in present:
                    continue
                r = _http(results, v, c)
                rows.append(
                    [
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
            "Replay: a GET with `Last-Event-ID` = the priming id (seq 0) of a completed stream, until the last event is sent.",
            "",
        ]
        parts.append(
            _table(
                ["events", "replay ms", "events/s", "CPU ms", "bytes sent"],
                [
                    [
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
        for n, bare, det in _memory_pairs(results):
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
        cs = sorted({r["concurrency"] for r in results["http"]["rows"]})
        if len(cs) >= 2:
            lo, hi = cs[0], cs[-1]
            for v in ("bare", "wrapped", "sdk_es"):
                a, b = _http(results, v, lo), _http(results, v, hi)
                add(f"1-2. {v} req/s (c={lo} -> {hi})", a["rps"], b["rps"], ".0f")
                add(f"1-2. {v} p99 ms", a["p99_ms"], b["p99_ms"], ".1f")
                add(
                    f"1-2. {v} server CPU µs/req",
                    a["server_cpu_us_per_req"],
                    b["server_cpu_us_per_req"],
                    ".0f",
                )
            add(
                "1. wrapped/bare req/s",
                _http(results, "wrapped", lo)["rps"] / _http(results, "bare", lo)["rps"],
                _http(results, "wrapped", hi)["rps"] / _http(results, "bare", hi)["rps"],
                ".2f",
            )
            add(
                "2. wrapped/sdk_es req/s",
                _http(results, "wrapped", lo)["rps"] / _http(results, "sdk_es", lo)["rps"],
                _http(results, "wrapped", hi)["rps"] / _http(results, "sdk_es", hi)["rps"],
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
        rp = sorted(e["replay"], key=lambda r: r["events"])
        if len(rp) >= 2:
            add(
                f"3. replay ms ({rp[0]['events']:,} -> {rp[-1]['events']:,} events)",
                rp[0]["replay_ms"],
                rp[-1]["replay_ms"],
                ".2f",
            )
    if "memory" in results:
        pairs = _memory_pairs(results)
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
