"""Sampling profiles with py-spy, summarised as "top functions" tables.

py-spy records collapsed stacks (``-f raw``, one ``frame;frame;... count`` per
line, frames aggregated per function with ``-F``); `summarise` turns them into
self time (the function was on top of the stack) and inclusive time (anywhere on
the stack), as percentages of all CPU samples (idle samples are not recorded).
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def py_spy() -> str | None:
    candidate = Path(sys.executable).with_name("py-spy")
    if candidate.exists():
        return str(candidate)
    return shutil.which("py-spy")


def record_pid(pid: int, out: Path, seconds: float, rate: int = 250) -> bool:
    exe = py_spy()
    if exe is None:
        return False
    cmd = [
        exe,
        "record",
        "-r",
        str(rate),
        "-d",
        str(max(1, round(seconds))),
        "-F",
        "-f",
        "raw",
        "-o",
        str(out),
    ]
    cmd += ["--nonblocking", "--pid", str(pid)]
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=seconds + 60)
    return done.returncode == 0 and out.exists()


def record_command(
    argv: list[str], out: Path, rate: int = 1000, cpu: int | None = None, cwd: Path | None = None
) -> bool:
    exe = py_spy()
    if exe is None:
        return False
    cmd = [exe, "record", "-r", str(rate), "-F", "-f", "raw", "-o", str(out), "--", *argv]
    preexec = None
    if cpu is not None and hasattr(os, "sched_setaffinity"):

        def preexec() -> None:
            os.sched_setaffinity(0, {cpu})

    done = subprocess.run(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600, preexec_fn=preexec, cwd=cwd
    )
    return done.returncode == 0 and out.exists()


@dataclass
class Row:
    function: str
    where: str
    self_pct: float
    total_pct: float


def _short(path: str) -> str:
    for package in ("mcp_resume_asgi/", "bench/"):
        if package in path:
            return package + path.rsplit(package, 1)[1]
    for marker in ("site-packages/", "/work/main/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def summarise(path: Path) -> tuple[int, list[Row]]:
    self_counts: collections.Counter[tuple[str, str]] = collections.Counter()
    total_counts: collections.Counter[tuple[str, str]] = collections.Counter()
    samples = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        samples += count
        frames = []
        for raw in stack.split(";"):
            match = _FRAME.match(raw)
            if match is None:
                frames.append((raw, ""))
            else:
                frames.append((match["func"], f"{_short(match['file'])}:{match['line'] or '?'}"))
        if not frames:
            continue
        self_counts[frames[-1]] += count
        for frame in set(frames):
            total_counts[frame] += count
    rows = [
        Row(func, where, 100.0 * self_counts[(func, where)] / samples, 100.0 * total / samples)
        for (func, where), total in total_counts.items()
    ]
    return samples, rows


def table(
    rows: list[Row], *, key: str, limit: int, only: str | None = None, skip_runtime: bool = True
) -> str:
    picked = [r for r in rows if only is None or only in r.where]
    if skip_runtime:
        picked = [
            r
            for r in picked
            if not r.where.startswith(("<frozen", "asyncio/", "bench/serve", "bench/engine"))
            or key == "self_pct"
        ]
    picked.sort(key=lambda r: getattr(r, key), reverse=True)
    lines = ["| self % | incl. % | function | where |", "|---:|---:|---|---|"]
    for r in picked[:limit]:
        lines.append(f"| {r.self_pct:.1f} | {r.total_pct:.1f} | `{r.function}` | {r.where} |")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m bench.profiling FILE.raw
    n, rows = summarise(Path(sys.argv[1]))
    print(f"{n} samples\n\nby self time\n" + table(rows, key="self_pct", limit=25))
    print("\nby inclusive time\n" + table(rows, key="total_pct", limit=40))
    print("\nmcp_resume_asgi, inclusive\n" + table(rows, key="total_pct", limit=30, only="mcp_resume_asgi/"))
