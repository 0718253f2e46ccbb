"""The proxy's overhead: `tools/call` through `mcp-resume proxy` against the same upstream called
directly, side by side in one run.

    python -m bench.proxy            # ~2 min: writes its section of BENCHMARKS.md
    python -m bench.proxy --quick    # smoke run (~30 s), publishes nothing
    python -m bench.proxy --before main   # also the proxy as it is at `main` (`-before` rows)

Upstreams, each its own process: the benchmark's stock `MCPServer` (`bench/apps.py`, `bare`,
tools `echo` and `progress`), and the TypeScript SDK server of tests/ts_server (tool `echo`;
skipped without node and its `npm ci`). In front of each, two processes on the memory store:

* `forward` - the proxy app alone under uvicorn (`ProxyApp`, no middleware): what forwarding costs;
* `proxy`   - `mcp-resume proxy --upstream URL` (the proxy wrapped by `resumable`, as shipped).

The load generator (`bench/loadgen.py`: raw HTTP/1.1 keep-alive, every answer checked) runs N
sessions calling one tool back to back, against `direct` (the upstream's own port), `forward`
and `proxy` in turn; the windows of the three are interleaved, round after round, so other load
on the machine hits them alike. Per cell: req/s, p50 and p99 (median of the rounds), and the CPU
the processes used per request (`/proc/<pid>/stat`): the upstream's, and the proxy process's.
Everything runs on one machine's shared cores (the load generator too), so a request through the
proxy pays for a second HTTP hop on the same CPUs: the figures are that, not a network's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.loadgen import run_load

ROOT = Path(__file__).resolve().parents[1]
TS_DIR = ROOT / "tests" / "ts_server"
SECTION = "## The proxy: `mcp-resume proxy` against the upstream called directly"
SECTION_END = "<!-- bench.proxy:end -->"
RESULTS = ROOT / "bench" / "results" / "proxy.json"


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _die_with_parent() -> None:
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Process:
    name: str
    proc: subprocess.Popen[str]
    port: int


def _start(
    name: str, cmd: list[str], ready_prefix: str, cwd: Path = ROOT, package_tree: Path = ROOT
) -> Process:
    """Start a process from `cwd`, `mcp_resume_asgi` imported from `package_tree` (another tree's
    process starts there: `python -m` puts its working directory first on the path)."""
    pythonpath = str(ROOT) if package_tree == ROOT else f"{package_tree}{os.pathsep}{ROOT}"
    if package_tree != ROOT:
        cwd = package_tree
    env = {**os.environ, "PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=env,
        preexec_fn=_die_with_parent,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(ready_prefix):
            port = int(line.rstrip().rsplit(":", 1)[-1].split("/")[0].split()[-1])
            return Process(name, proc, port)
    raise RuntimeError(f"{name} exited before it was ready ({proc.wait()})")


def _stop(process: Process) -> None:
    process.proc.terminate()
    try:
        process.proc.wait(5)
    except subprocess.TimeoutExpired:
        process.proc.kill()


def cpu_seconds(pid: int) -> float:
    ticks = os.sysconf("SC_CLK_TCK")
    with contextlib.suppress(OSError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / ticks
    return 0.0


def forward_main(upstream: str, *, http: str = "auto", loop: str = "auto") -> None:
    """`python -m bench.proxy forward URL`: the proxy app alone under uvicorn, no middleware."""
    import uvicorn

    from mcp_resume_asgi.cli.serving import Announced, bind
    from mcp_resume_asgi.proxy import ProxyApp

    _die_with_parent()
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    app = Announced(ProxyApp(upstream), f"FORWARDING at http://127.0.0.1:{port}/mcp")
    config = uvicorn.Config(
        app,
        lifespan="on",
        log_level="warning",
        access_log=False,
        http=http,
        loop=loop,  # type: ignore[arg-type]
    )
    uvicorn.Server(config).run(sockets=[sock])


@dataclass
class Cell:
    rps: list[float] = field(default_factory=list)
    p50: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)
    upstream_us: list[float] = field(default_factory=list)
    proxy_us: list[float] = field(default_factory=list)
    errors: int = 0

    def median(self, what: str) -> float:
        values: list[float] = getattr(self, what)
        return statistics.median(values) if values else float("nan")


async def measure(
    upstream: Process,
    fronts: dict[str, Process | None],
    tools: list[str],
    concurrencies: list[int],
    rounds: int,
    seconds: float,
) -> dict[str, Cell]:
    cells: dict[str, Cell] = {}
    names = list(fronts)
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for tool in tools:
            for c in concurrencies:
                for name in order:
                    front = fronts[name]
                    port = upstream.port if front is None else front.port
                    up0 = cpu_seconds(upstream.proc.pid)
                    px0 = cpu_seconds(front.proc.pid) if front is not None else 0.0
                    result = await run_load(
                        "127.0.0.1", port, concurrency=c, warmup_s=0.3, duration_s=seconds, tool=tool
                    )
                    up1 = cpu_seconds(upstream.proc.pid)
                    px1 = cpu_seconds(front.proc.pid) if front is not None else 0.0
                    # (the CPU counts the warm-up and the sessions' initialize too: per request,
                    # a slight overestimate, alike for every variant)
                    n = max(result.requests, 1)
                    cell = cells.setdefault(f"{tool} c={c} {name}", Cell())
                    cell.rps.append(result.rps)
                    cell.p50.append(result.percentile(50))
                    cell.p99.append(result.percentile(99))
                    cell.upstream_us.append(1e6 * (up1 - up0) / n)
                    cell.proxy_us.append(1e6 * (px1 - px0) / n)
                    cell.errors += result.errors
                    log(
                        f"round {r + 1}/{rounds} {upstream.name} {tool} c={c} {name:8}: {result.rps:7.0f} req/s "
                        f"p50 {result.percentile(50):6.2f} ms p99 {result.percentile(99):6.2f} ms errors {result.errors}"
                    )
    return cells


def render(all_cells: dict[str, dict[str, Cell]], args: argparse.Namespace, commit: str) -> str:
    lines = [
        SECTION,
        "",
        f"`python -m bench.proxy` at {commit}, {datetime.date.today()}: {args.rounds} rounds of "
        f"{args.seconds:g} s windows per cell, interleaved; medians. `direct`: the upstream's own port; "
        "`forward`: the proxy app alone (no middleware); `proxy`: `mcp-resume proxy` (memory store). "
        "CPU µs per request: the upstream process's, and the proxy process's."
        + (f" `-before` rows: the same two from the package at `{args.before}`." if args.before else ""),
        "",
        "| upstream | tool | clients | variant | req/s | vs direct | p50 ms | p99 ms | upstream CPU µs/req | proxy CPU µs/req | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for upstream, cells in all_cells.items():
        for key, cell in cells.items():
            tool, c, name = key.split(" ")
            direct = cells.get(f"{tool} {c} direct")
            ratio = cell.median("rps") / direct.median("rps") if direct else float("nan")
            proxy_cpu = "-" if name == "direct" else f"{cell.median('proxy_us'):.0f}"
            lines.append(
                f"| {upstream} | {tool} | {c.removeprefix('c=')} | {name} | {cell.median('rps'):.0f} | {ratio:.2f}x | "
                f"{cell.median('p50'):.2f} | {cell.median('p99'):.2f} | {cell.median('upstream_us'):.0f} | {proxy_cpu} | {cell.errors} |"
            )
    lines += ["", SECTION_END, ""]
    return "\n".join(lines)


def publish(section: str) -> None:
    path = ROOT / "BENCHMARKS.md"
    text = path.read_text()
    begin, end = text.find(SECTION), text.find(SECTION_END)
    if begin != -1 and end != -1:
        text = text[:begin] + section + text[end + len(SECTION_END) :].lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "mcp_resume_asgi"], capture_output=True, text=True, cwd=ROOT
    )
    return done.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _upstreams() -> list[tuple[str, list[str], str, Path, list[str]]]:
    """(name, command, ready line prefix, working directory, tools) of each upstream to run."""
    found = [("python", [sys.executable, "-m", "bench.serve", "bare"], "READY", ROOT, ["echo", "progress"])]
    node = shutil.which("node")
    if node and (TS_DIR / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        found.append(
            ("typescript", [node, str(TS_DIR / "server.mjs"), "--port", "0"], "READY", TS_DIR, ["echo"])
        )
    else:
        log("no node or no tests/ts_server/node_modules (npm ci there): the TypeScript upstream is skipped")
    return found


def _fronts(url: str, package_tree: Path, suffix: str) -> dict[str, Process]:
    """`forward` and `proxy` in front of `url`, from the package in `package_tree`."""
    fronts = {
        f"forward{suffix}": _start(
            "forward",
            [sys.executable, "-m", "bench.proxy", "forward", url],
            "FORWARDING",
            package_tree=package_tree,
        )
    }
    fronts[f"proxy{suffix}"] = _start(
        "proxy",
        [
            sys.executable,
            "-m",
            "mcp_resume_asgi.cli",
            "proxy",
            "--upstream",
            url,
            "--port",
            "0",
            "--log-level",
            "warning",
        ],
        "mcp-resume: serving",
        package_tree=package_tree,
    )
    return fronts


def _export(ref: str) -> Path:
    """The package as it is at `ref`, in a temporary directory."""
    out = Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    archive = subprocess.run(
        ["git", "archive", "--format=tar", ref, "mcp_resume_asgi"], capture_output=True, check=True, cwd=ROOT
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out


async def run(args: argparse.Namespace) -> dict[str, dict[str, Cell]]:
    results: dict[str, dict[str, Cell]] = {}
    before = _export(args.before) if args.before else None
    try:
        for name, cmd, ready, cwd, tools in _upstreams():
            upstream = _start(name, cmd, ready, cwd)
            url = f"http://127.0.0.1:{upstream.port}/mcp"
            fronts: dict[str, Process | None] = {"direct": None}
            try:
                if before is not None:
                    fronts.update(_fronts(url, before, "-before"))
                fronts.update(_fronts(url, ROOT, ""))
                results[name] = await measure(
                    upstream, fronts, tools, args.clients, args.rounds, args.seconds
                )
            finally:
                for front in fronts.values():
                    if front is not None:
                        _stop(front)
                _stop(upstream)
    finally:
        if before is not None:
            shutil.rmtree(before, ignore_errors=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", nargs="?", default="run", choices=("run", "forward"))
    parser.add_argument("url", nargs="?", default="")
    parser.add_argument("--quick", action="store_true", help="one short round; publishes nothing")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--publish", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument(
        "--before",
        default="",
        metavar="REF",
        help="also run `forward` and `proxy` from the package at this git ref (`-before` rows)",
    )
    args = parser.parse_args()
    if args.mode == "forward":
        forward_main(args.url)
        return
    if args.quick:
        args.rounds, args.seconds = 1, 1.0
    results = asyncio.run(run(args))
    section = render(results, args, _commit())
    print(section)
    raw: dict[str, Any] = {u: {k: vars(c) for k, c in cells.items()} for u, cells in results.items()}
    if args.publish if args.publish is not None else not args.quick:
        RESULTS.write_text(json.dumps(raw, indent=1) + "\n")
        publish(section)


if __name__ == "__main__":
    main()
