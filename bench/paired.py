"""Variants side by side in paired windows: the ratio of each to a reference, window by window.

`python -m bench.paired <variant> [<variant> ...] --ref <variant> [--tool progress]
[--clients 1,4,32] [--windows 15] [--seconds 1.0]` runs `python -m bench`'s HTTP windows
(`bench.__main__.run_http`: one server per variant pinned to CPU 1, `bench.loadgen` from CPU 0,
rounds of one window per clients count and variant, the variants' order rotated each round).
Each variant's window is divided by the reference's window of the same round, and the median of
those ratios (with its quartiles) is printed beside the median req/s and server CPU µs per call.

On a shared machine whose speed drifts over minutes (other guests on the host; `steal` in
`/proc/stat`), a ratio of windows a second apart moves less than a ratio of medians taken over
a whole run: this is the figure to compare variants by on such a machine. `python -m bench`,
`bench.sqlite` and `bench.redis_peers` report medians of longer windows, as the issues' bars
are stated.
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

from bench.__main__ import run_http


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
    variants = tuple(dict.fromkeys([*args.variants, args.ref]))
    concurrencies = [int(c) for c in args.clients.split(",")]
    # (`run_http` pins this process to the load generator's CPU and runs every clients count and variant once per round, the variants' order rotated:
    # the i-th window of each cell is from the same round)
    http = run_http(concurrencies, args.windows, 0.5, args.seconds, tools=(args.tool,), variants=variants)
    cells = {(r["variant"], r["concurrency"]): r for r in http["rows"]}
    results: list[dict[str, Any]] = []
    for clients in concurrencies:
        reference = cells[(args.ref, clients)]["rps_all"]
        for v in variants:
            cell = cells[(v, clients)]
            ratios = [a / b for a, b in zip(cell["rps_all"], reference, strict=True)]
            q1, median, q3 = quartiles(ratios)
            row = {
                "variant": v,
                "clients": clients,
                "rps": round(cell["rps"]),
                "ratio": round(median, 3),
                "ratio_q1": round(q1, 3),
                "ratio_q3": round(q3, 3),
                "cpu_us_per_call": round(cell["server_cpu_us_per_req"]),
                "errors": sum(cell["errors_all"]),
            }
            results.append(row)
            print(
                f"c={clients:<3} {v:<22} {row['rps']:6} req/s  / {args.ref}: {median:.3f} "
                f"(quartiles {q1:.3f}-{q3:.3f})  server CPU {row['cpu_us_per_call']:,} µs/call"
                + (f"  errors {row['errors']}" if row["errors"] else "")
            )
    if args.json:
        print(
            json.dumps({"tool": args.tool, "windows": args.windows, "seconds": args.seconds, "rows": results})
        )


if __name__ == "__main__":
    main()
