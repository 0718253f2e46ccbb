"""Variants side by side in paired windows: the ratio of each to a reference, window by window.

`python -m bench.paired <variant> [<variant> ...] --ref <variant> [--tool progress]
[--clients 1,4,32] [--windows 15] [--seconds 1.0]` starts one server per variant
(`bench.__main__.Server`, pinned to CPU 1) and, for each clients count, runs rounds of one
window per variant (`bench.loadgen` from CPU 0), the order rotated each round. Each variant's
window is divided by the reference's window of the same round, and the median of those ratios
(with its quartiles) is printed beside the median req/s and server CPU µs per call.

On a shared machine whose speed drifts over minutes (other guests on the host; `steal` in
`/proc/stat`), a ratio of windows a second apart moves less than a ratio of medians taken over
a whole run: this is the figure to compare variants by on such a machine. `python -m bench`,
`bench.sqlite` and `bench.redis_peers` report medians of longer windows, as the issues' bars
are stated.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
from typing import Any

from bench.__main__ import LOADGEN_CPU, Server, _measure


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("variants", nargs="+")
    parser.add_argument("--ref", required=True, help="the variant the others are divided by")
    parser.add_argument("--tool", default="progress")
    parser.add_argument("--clients", default="1,4,32")
    parser.add_argument("--windows", type=int, default=15)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--json", action="store_true", help="print the results as JSON too")
    args = parser.parse_args()
    variants = list(dict.fromkeys([*args.variants, args.ref]))
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {LOADGEN_CPU})
    servers = {v: Server(v) for v in variants}
    results: list[dict[str, Any]] = []
    try:
        for clients in (int(c) for c in args.clients.split(",")):
            for server in servers.values():
                asyncio.run(_measure(server, clients, 0.5, 1.0, args.tool))  # warm-up
            windows: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
            for round_ in range(args.windows):
                shift = round_ % len(variants)
                for v in variants[shift:] + variants[:shift]:
                    windows[v].append(
                        asyncio.run(_measure(servers[v], clients, 0.2, args.seconds, args.tool))
                    )
            for v in variants:
                ratios = [a["rps"] / b["rps"] for a, b in zip(windows[v], windows[args.ref], strict=True)]
                q1, median, q3 = quartiles(ratios)
                row = {
                    "variant": v,
                    "clients": clients,
                    "rps": round(statistics.median(w["rps"] for w in windows[v])),
                    "ratio": round(median, 3),
                    "ratio_q1": round(q1, 3),
                    "ratio_q3": round(q3, 3),
                    "cpu_us_per_call": round(
                        statistics.median(w["server_cpu_us_per_req"] for w in windows[v])
                    ),
                    "errors": sum(w["errors"] for w in windows[v]),
                }
                results.append(row)
                print(
                    f"c={clients:<3} {v:<22} {row['rps']:6} req/s  / {args.ref}: {median:.3f} "
                    f"(quartiles {q1:.3f}-{q3:.3f})  server CPU {row['cpu_us_per_call']:,} µs/call"
                    + (f"  errors {row['errors']}" if row["errors"] else "")
                )
    finally:
        for server in servers.values():
            server.stop()
    if args.json:
        print(
            json.dumps({"tool": args.tool, "windows": args.windows, "seconds": args.seconds, "rows": results})
        )


if __name__ == "__main__":
    main()
