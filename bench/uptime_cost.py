"""How a server's cost per call moves with its uptime: windows of load one after the other on one server.

`python -m bench.uptime_cost <variant> [--tool progress] [--clients 32] [--seconds 5] [--windows 8]`
serves the benchmark's app (`bench.serve`, pinned to CPU 1) and runs `bench.loadgen` (CPU 0) against
it `windows` times in a row (each run opens its own sessions, as the side-by-side benches do), and
prints, per window: req/s, the server's CPU per call (its `/proc` user and system time over the
window, divided by the calls) and its resident memory after the window. The side-by-side benches
keep one server per variant for all their windows, so what grows here grows there too.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path


def _cpu_and_rss(pid: int) -> tuple[float, float]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    rss = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return cpu, rss / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("variant")
    parser.add_argument("--tool", default="progress")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--windows", type=int, default=8)
    args = parser.parse_args()
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=root)
    server = subprocess.Popen(
        ["taskset", "-c", "1", sys.executable, "-m", "bench.serve", args.variant],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    windows = []
    try:
        assert server.stdout is not None
        port = next(int(line.split()[1]) for line in server.stdout if line.startswith("READY"))
        for _ in range(args.windows):
            before, _ = _cpu_and_rss(server.pid)
            command = ["taskset", "-c", "0", sys.executable, "-m", "bench.loadgen", str(port)]
            command += [str(args.clients), str(args.seconds), args.tool]
            report = subprocess.run(command, capture_output=True, text=True, env=env).stdout
            after, rss = _cpu_and_rss(server.pid)
            found = re.search(r"rps=(\d+)", report)
            if found is None:
                raise SystemExit(f"the load generator said: {report!r}")
            rps = float(found.group(1))
            calls = rps * (args.seconds + 0.5)  # (bench.loadgen: 0.5 s of warm-up, then the window)
            windows.append(
                {"rps": rps, "cpu_us_per_call": round(1e6 * (after - before) / calls), "rss_mib": round(rss)}
            )
    finally:
        server.terminate()
        server.wait()
    print(
        json.dumps({"variant": args.variant, "tool": args.tool, "clients": args.clients, "windows": windows})
    )


if __name__ == "__main__":
    main()
