"""Python lines and function calls per tools/call in a server under uvicorn: where its work is.

`python -m bench.lines <variant> [<variant> ...] [--tool progress] [--clients 1] [--seconds 4]
[--top 40]` serves each variant of `python -m bench` (`bench.__main__.Server`, pinned to CPU 1)
with `bench/lines_site` on its path, which counts, with `sys.settrace`, every line the server's
event-loop thread executes and every function it calls, between a warm-up and the end of a
measured window of `bench.loadgen` load. Prints, per variant, the lines and calls per call in
all, by package (or standard-library module), and, for this package, by function.

A count does not move with the machine's load, where the time of a window does (a shared 2-CPU
machine moves one by ±20%), and it names where the work is, where an instruction count
(`bench/icount`) gives its sum. A line is not a unit of cost (one that calls into C may cost a
hundred simple ones), so compare counts of the same code, variant to variant or before and after
a change. The tracing slows the server tens of times: a window holds a few hundred calls.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.__main__ import LOADGEN_CPU, Server, _measure

SITE = Path(__file__).with_name("lines_site")
PACKAGE = "mcp_resume_asgi/"


def where(key: str) -> str:
    """The package (or the standard library's module) of a `file:function` key."""
    path = key.rsplit(":", 1)[0]
    if PACKAGE in path:
        return "mcp_resume_asgi." + path.split(PACKAGE)[-1].removesuffix(".py").replace("/", ".")
    if "site-packages/" in path:
        return path.split("site-packages/")[-1].split("/")[0]
    return path.rsplit("/", 1)[-1]


def count(variant: str, tool: str, clients: int, seconds: float, out: Path) -> dict[str, Any]:
    os.environ["BENCH_LINES_OUT"] = str(out)
    server = Server(variant)
    try:
        asyncio.run(_measure(server, clients, 0.5, 2.0, tool))  # warm-up, not counted
        server.proc.send_signal(signal.SIGUSR2)
        time.sleep(0.2)
        window = asyncio.run(_measure(server, clients, 0.0, seconds, tool))
        server.proc.send_signal(signal.SIGUSR2)
        for _ in range(100):  # (the server writes the counts from its signal handler)
            time.sleep(0.1)
            if out.exists():
                break
        counts = json.loads(out.read_text())
    finally:
        server.stop()
        out.unlink(missing_ok=True)
    calls = max(window["requests"], 1)
    return {"calls": calls, "lines": counts["lines"], "functions": counts["calls"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("variants", nargs="+")
    parser.add_argument("--tool", default="progress")
    parser.add_argument("--clients", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--top", type=int, default=40, help="this package's functions listed")
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(SITE)]))
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {LOADGEN_CPU})
    scratch = Path(tempfile.mkdtemp(prefix="bench-lines-"))
    for variant in args.variants:
        run = count(variant, args.tool, args.clients, args.seconds, scratch / f"{variant}.json")
        n = run["calls"]
        by_package: collections.Counter[str] = collections.Counter()
        for key, lines in run["lines"].items():
            by_package[where(key)] += lines
        total = sum(by_package.values())
        ours = {k: v for k, v in run["lines"].items() if PACKAGE in k}
        print(
            f"{variant}: {n} calls ({args.tool}, {args.clients} client(s)); per call: "
            f"{total / n:,.0f} lines, {sum(run['functions'].values()) / n:,.0f} function calls; "
            f"this package {sum(ours.values()) / n:,.0f} lines in {len(ours)} functions, "
            f"{sum(v for k, v in run['functions'].items() if PACKAGE in k) / n:,.0f} calls"
        )
        for package, lines in by_package.most_common():
            if lines / n < 3:
                break
            print(f"    {lines / n:8.1f}  {package}")
        if ours:
            print(f"  this package's functions (lines per call, calls per call), the first {args.top}:")
            for key, lines in sorted(ours.items(), key=lambda kv: -kv[1])[: args.top]:
                name = key.split(PACKAGE)[-1].replace(".py:", ":")
                print(f"    {lines / n:8.1f} {run['functions'].get(key, 0) / n:6.2f}  {name}")


if __name__ == "__main__":
    main()
