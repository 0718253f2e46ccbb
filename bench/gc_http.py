"""The garbage collector's work per call in a server under uvicorn, at a number of clients.

`python -m bench.gc_http <variant> [--tool progress] [--clients 32] [--seconds 4]` serves the
benchmark's app (`bench.serve`, pinned to CPU 1) with `bench/gc_site` on its path, which counts
every collection and its time, drives it with `bench.loadgen` from CPU 0 (3 s of warm-up, then
the measured window), and prints collections per call by generation, the collector's time per
call, and the time of one full collection. One variant per run: run variants one after the
other, on a quiet machine, and compare runs made side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SITE = Path(__file__).with_name("gc_site")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("variant")
    parser.add_argument("--tool", default="progress")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()
    stats = os.path.join(tempfile.mkdtemp(prefix="bench-gc-"), "stats.json")
    root = str(Path(__file__).resolve().parent.parent)
    server_env = dict(os.environ, PYTHONPATH=f"{root}:{SITE}", BENCH_GC_STATS=stats)
    client_env = dict(os.environ, PYTHONPATH=root)
    server = subprocess.Popen(
        ["taskset", "-c", "1", sys.executable, "-m", "bench.serve", args.variant],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=server_env,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = next(int(line.split()[1]) for line in server.stdout if line.startswith("READY"))

        def load(seconds: float) -> str:
            command = ["taskset", "-c", "0", sys.executable, "-m", "bench.loadgen", str(port)]
            command += [str(args.clients), str(seconds), args.tool]
            return subprocess.run(command, capture_output=True, text=True, env=client_env).stdout

        load(3.0)
        time.sleep(0.6)
        before = json.loads(Path(stats).read_text())
        report = load(args.seconds)
        time.sleep(0.6)
        after = json.loads(Path(stats).read_text())
    finally:
        server.terminate()
        server.wait()
    found = re.search(r"rps=(\d+)", report)
    if found is None:
        raise SystemExit(f"the load generator said: {report!r}")
    rps = float(found.group(1))
    calls = rps * (args.seconds + 0.5)  # (bench.loadgen's window: 0.5 s of its own warm-up, then the rest)
    counts = [b - a for a, b in zip(before["collections"], after["collections"], strict=True)]
    seconds = [b - a for a, b in zip(before["seconds"], after["seconds"], strict=True)]
    print(
        json.dumps(
            {
                "variant": args.variant,
                "tool": args.tool,
                "clients": args.clients,
                "rps": rps,
                "collections_per_call": [round(n / calls, 4) for n in counts],
                "gc_us_per_call": round(1e6 * sum(seconds) / calls),
                "full_collection_ms": round(1000 * seconds[2] / max(counts[2], 1), 1),
            }
        )
    )


if __name__ == "__main__":
    main()
