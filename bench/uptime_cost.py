"""How a server's cost per call moves with its uptime: windows of load one after the other on one server.

`python -m bench.uptime_cost <variant> [--tool progress] [--clients 32] [--seconds 5] [--windows 8]`
serves the benchmark's app on one server (`bench.__main__.Server`, pinned to CPU 1) and runs
`python -m bench`'s window (`_measure`: `bench.loadgen` from CPU 0, its own sessions each time, as
the side-by-side benches' windows do) `windows` times in a row, and prints, per window: req/s, the
server's CPU per call over the window and its resident memory after it. The side-by-side benches
keep one server per variant for all their windows, so what grows here grows there too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path

from bench.__main__ import LOADGEN_CPU, Server, _measure


def _rss_mib(pid: int) -> float:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("variant")
    parser.add_argument("--tool", default="progress")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--windows", type=int, default=8)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {LOADGEN_CPU})
    server = Server(args.variant)
    windows = []
    try:
        for _ in range(args.windows):
            window = asyncio.run(_measure(server, args.clients, 0.5, args.seconds, args.tool))
            windows.append(
                {
                    "rps": round(window["rps"]),
                    "cpu_us_per_call": round(window["server_cpu_us_per_req"]),
                    "rss_mib": round(_rss_mib(server.proc.pid)),
                }
            )
    finally:
        server.stop()
    print(
        json.dumps({"variant": args.variant, "tool": args.tool, "clients": args.clients, "windows": windows})
    )


if __name__ == "__main__":
    main()
