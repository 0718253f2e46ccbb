"""The garbage collector's work per call in a server under uvicorn, at a number of clients.

`python -m bench.gc_http <variant> [--tool progress] [--clients 32] [--seconds 4]` serves the
benchmark's app (`bench.__main__.Server`, pinned to CPU 1) with `bench/gc_site` on its path,
which counts every collection and its time, drives it with `python -m bench`'s window
(`_measure`: `bench.loadgen` from CPU 0; 3 s of warm-up, then the measured window), and prints
collections per call by generation, the collector's time per call, the time of one full
collection and the objects each generation freed per call. `--sse` adds how the app's SSE answers
wind down: from an answer's last message to the return of its response, the milliseconds and the
collections (all, and of the older generations) that ran meanwhile. One variant per run: run
variants one after the other, on a quiet machine, and compare runs made side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

from bench.__main__ import LOADGEN_CPU, Server, _measure

SITE = Path(__file__).with_name("gc_site")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("variant")
    parser.add_argument("--tool", default="progress")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--sse", action="store_true", help="also time the end of the app's SSE answers")
    parser.add_argument(
        "--threshold", type=int, default=None, help="the server's gen-0 threshold (default 700)"
    )
    args = parser.parse_args()
    stats = Path(tempfile.mkdtemp(prefix="bench-gc-")) / "stats.json"
    # (the server inherits these: `bench/gc_site` on its path counts its collections into `stats`)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(SITE)]))
    os.environ["BENCH_GC_STATS"] = str(stats)
    if args.sse:
        os.environ["BENCH_GC_SSE"] = "1"
    if args.threshold is not None:
        os.environ["BENCH_GC_THRESHOLD"] = str(args.threshold)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {LOADGEN_CPU})
    server = Server(args.variant)
    try:
        asyncio.run(_measure(server, args.clients, 0.5, 3.0, args.tool))  # warm-up
        time.sleep(0.6)  # (the counts are written at most twice a second)
        before = json.loads(stats.read_text())
        window = asyncio.run(_measure(server, args.clients, 0.0, args.seconds, args.tool))
        time.sleep(0.6)
        after = json.loads(stats.read_text())
    finally:
        server.stop()
    calls = max(window["requests"], 1)
    counts = [b - a for a, b in zip(before["collections"], after["collections"], strict=True)]
    seconds = [b - a for a, b in zip(before["seconds"], after["seconds"], strict=True)]
    freed = [b - a for a, b in zip(before["collected"], after["collected"], strict=True)]
    result = {
        "variant": args.variant,
        "threshold": 700 if args.threshold is None else args.threshold,
        "tool": args.tool,
        "clients": args.clients,
        "rps": round(window["rps"]),
        "collections_per_call": [round(n / calls, 4) for n in counts],
        "gc_us_per_call": round(1e6 * sum(seconds) / calls),
        "gc_us_per_call_by_generation": [round(1e6 * s / calls) for s in seconds],
        "full_collection_ms": round(1000 * seconds[2] / max(counts[2], 1), 1),
        "oldest_generation_objects": after.get("oldest", 0),
        "freed_per_call_by_generation": [round(n / calls, 1) for n in freed],
    }
    if args.sse:
        answers = max(after["sse"]["answers"] - before["sse"]["answers"], 1)
        result["sse_wind_down"] = {
            "ms": round(1000 * (after["sse"]["seconds"] - before["sse"]["seconds"]) / answers, 1),
            "collections": round((after["sse"]["collections"] - before["sse"]["collections"]) / answers, 2),
            "older_collections": round((after["sse"]["older"] - before["sse"]["older"]) / answers, 3),
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
