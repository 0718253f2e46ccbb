"""`python -m bench --profile`: where the time goes, with py-spy (sampling, CPU only).

* the wrapped and the bare HTTP server under the c=40 load (py-spy attached to the
  server process for a few seconds);
* the engine alone forwarding a live stream (`bench.engine throughput --checkpoint`).

Raw collapsed stacks go to bench/results/profiles/*.txt; tables of the top
functions by self and inclusive time, and self time by package, go in the report.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench import profiling

PROFILE_S = 5


def _package(where: str) -> str:
    path = where.rsplit(":", 1)[0]
    if path.startswith("mcp_resume_asgi/"):
        return "mcp_resume_asgi"
    if path.startswith("<frozen") or "/" not in path:
        return "python (" + path.split(".")[0] + ")"
    return path.split("/", 1)[0]


def by_package(rows: list[profiling.Row], limit: int = 12) -> list[tuple[str, float]]:
    acc: collections.Counter[str] = collections.Counter()
    for r in rows:
        acc[_package(r.where)] += r.self_pct
    return acc.most_common(limit)


def _tables(path: Path, title: str) -> dict[str, Any]:
    samples, rows = profiling.summarise(path)
    pkg = "\n".join(
        ["| self % | package |", "|---:|---|"] + [f"| {pct:.1f} | {name} |" for name, pct in by_package(rows)]
    )
    text = "\n\n".join(
        [
            f"{samples} samples. Self time by package:",
            pkg,
            "Top functions by self time:",
            profiling.table(rows, key="self_pct", limit=20),
            "`mcp_resume_asgi` functions by inclusive time (includes the app's work they call):",
            profiling.table(rows, key="total_pct", limit=25, only="mcp_resume_asgi/"),
        ]
    )
    return {"note": title, "table": text, "samples": samples, "raw": str(path)}


async def _load_and_record(server: Any, out: Path) -> float:
    """Load at c=40 while py-spy samples the server; returns the server's CPU µs per request."""
    from bench.__main__ import _measure

    pid = server.proc.pid
    load = asyncio.create_task(_measure(server, 40, 1.0, PROFILE_S + 2.0))
    await asyncio.sleep(1.5)
    exe = profiling.py_spy()
    assert exe is not None
    proc = await asyncio.create_subprocess_exec(
        exe,
        "record",
        "-r",
        "250",
        "-d",
        str(PROFILE_S),
        "-F",
        "-f",
        "raw",
        "--nonblocking",
        "-o",
        str(out),
        "--pid",
        str(pid),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    await proc.wait()
    sample = await load
    return float(sample["server_cpu_us_per_req"])


def _counts_table(counts: dict[str, Any]) -> str:
    variants = [v for v in ("bare", "wrapped", "sdk_es") if v in counts]
    lines = ["| per tools/call | " + " | ".join(variants) + " |", "|---|" + "---:|" * len(variants)]
    lines.append(
        "| profiled µs (cProfile) | "
        + " | ".join(f"{counts[v]['profiled_us_per_request']:.0f}" for v in variants)
        + " |"
    )
    for key in counts["bare"]["per_request"]:
        lines.append(
            f"| {key} | " + " | ".join(f"{counts[v]['per_request'][key]:.1f}" for v in variants) + " |"
        )
    lines += [
        "",
        "Wrapped: cumulative µs per request in `mcp_resume_asgi` functions (cProfile, includes callees):",
        "",
    ]
    lines += ["| µs/request | function |", "|---:|---|"]
    for key, us in list(counts["wrapped"]["engine_cumulative_us"].items())[:16]:
        lines.append(f"| {us:.0f} | `{key}` |")
    return "\n".join(lines)


def run_all(outdir: Path) -> dict[str, Any]:
    from bench import __main__ as orchestrator
    from bench.__main__ import LOADGEN_CPU, SERVER_CPU, Server

    if profiling.py_spy() is None:
        print("  profiles: py-spy not found (pip install py-spy)", file=sys.stderr)
        return {}
    outdir.mkdir(parents=True, exist_ok=True)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {LOADGEN_CPU})
    found: dict[str, Any] = {}
    packages: dict[str, tuple[float, dict[str, float]]] = {}
    for variant in ("wrapped", "bare"):
        server = Server(variant)
        try:
            out = outdir / f"http_{variant}.txt"
            cpu_us = asyncio.run(_load_and_record(server, out))
        finally:
            server.stop()
        if out.exists():
            _, rows = profiling.summarise(out)
            packages[variant] = (cpu_us, dict(by_package(rows, limit=40)))
            found[f"HTTP server, {variant}, c=40"] = _tables(
                out,
                f"py-spy on the `{variant}` uvicorn process for {PROFILE_S} s of tools/call load at c=40.",
            )
            print(f"  profile: {out}", file=sys.stderr, flush=True)
    if len(packages) == 2:
        (cw, pw), (cb, pb) = packages["wrapped"], packages["bare"]
        names = sorted(set(pw) | set(pb), key=lambda n: -(pw.get(n, 0) * cw - pb.get(n, 0) * cb))
        lines = [
            f"Server CPU per request in the profiled windows: bare {cb:.0f} µs, wrapped {cw:.0f} µs. "
            "Split by package (self time share x CPU per request):",
            "",
            "| package | bare µs/req | wrapped µs/req | wrapped - bare |",
            "|---|---:|---:|---:|",
        ]
        for n in names[:12]:
            b, w = pb.get(n, 0) * cb / 100, pw.get(n, 0) * cw / 100
            lines.append(f"| {n} | {b:.0f} | {w:.0f} | {w - b:+.0f} |")
        found["HTTP server, bare vs wrapped, by package"] = {
            "note": "From the two py-spy profiles below.",
            "table": "\n".join(lines),
        }
    done = subprocess.run(
        [sys.executable, "-m", "bench.callcounts", "--requests", "200"],
        cwd=orchestrator.CODE_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode == 0:
        counts = json.loads(done.stdout.strip().splitlines()[-1])
        found["per tools/call, in process (cProfile call counts)"] = {
            "note": "`python -m bench.callcounts`: the same MCPServer app driven by plain ASGI calls (no "
            "sockets), 200 tools/call under cProfile. Counts are exact per request; µs are inflated by the "
            "profiler but comparable between variants.",
            "table": _counts_table(counts),
            "data": counts,
        }
        print("  profile: call counts", file=sys.stderr, flush=True)
    else:
        print(f"  callcounts failed: {done.stderr[-2000:]}", file=sys.stderr)
    out = outdir / "engine_live.txt"
    argv = [
        sys.executable,
        "-m",
        "bench.engine",
        "throughput",
        "--events",
        "10000",
        "--runs",
        "3",
        "--checkpoint",
    ]
    if profiling.record_command(argv, out, rate=1000, cpu=SERVER_CPU, cwd=orchestrator.CODE_ROOT):
        found["engine, live stream of 10,000 events"] = _tables(
            out,
            "py-spy over `python -m bench.engine throughput --events 10000 --runs 3 --checkpoint` "
            "(the bare runs are in it too, a small share).",
        )
        print(f"  profile: {out}", file=sys.stderr, flush=True)
    return found
