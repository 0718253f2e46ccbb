"""Instructions per tools/call over HTTP: the app under uvicorn (bench.serve), in valgrind's callgrind.

In-process counts (icount.py) leave out what a real server adds per request and per response header
(uvicorn's h11 parsing and header validation, the garbage collector walking the server's live
objects): over HTTP the wrapper costs more than in process, and this is the comparable figure
where wall-clock windows on a shared 2-CPU machine move by ±20%. The client (bench.loadgen) runs
outside valgrind; the server's counters are zeroed after a warm-up and dumped after the measured
calls (`callgrind_control`), so the figure is the server's instructions per call, uvicorn included.

    http_icount.py <variant> <echo|progress> <n>    (run.sh's variants; prints one line)

One client makes `n` calls, one at a time, after 60 of warm-up. With many clients in flight a
server does other work per call (more live objects for each collection to walk, fuller rounds of
the event loop):

    http_icount.py <variant> <echo|progress> --clients 32 [--warmup 20] [--seconds 40]

keeps that many sessions calling (`bench.loadgen.run_load`), the server saturated, and divides by
the calls completed in the measured window; it also prints the garbage collector's instructions
per call (`gc_collect_main`, inclusive). Valgrind runs the server about 50x slower: a window of
40 s holds a few hundred calls, and two runs agree within a few percent.
"""

import argparse
import asyncio
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

tree = os.getcwd()
sys.path.insert(0, tree)
from bench.loadgen import Connection, Session, run_load  # noqa: E402

SERVE = """
import sys
sys.path.insert(0, {tree!r})
import mcp_resume_asgi.core.stream as _cs
_cs.HOLD_HEAD_S = 2.0  # as in icount.py: the same path however slow valgrind makes the run
from bench import serve
sys.argv = ["serve", {variant!r}]
serve.main()
"""


def _collector(dump: str) -> int:
    """`gc_collect_main`'s inclusive instructions in a callgrind dump."""
    out = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", dump], capture_output=True, text=True, check=True
    ).stdout
    for line in out.splitlines():
        if "gc_collect_main" in line:
            match = re.match(r"\s*([\d,]+)", line)
            if match:
                return int(match.group(1).replace(",", ""))
    return 0


async def _one_client(port: int, tool: str, n: int, zero: list[str], dump: list[str]) -> int:
    conn = Connection("127.0.0.1", port)
    await conn.open()
    session = Session(conn, tool)
    await session.initialize()
    for _ in range(60):
        await session.call()
    subprocess.run(zero, check=True, capture_output=True)
    for _ in range(n):
        await session.call()
    subprocess.run(dump, check=True, capture_output=True)
    await conn.close()
    return n


async def _many_clients(
    port: int, tool: str, clients: int, warmup: float, seconds: float, zero: list[str], dump: list[str]
) -> int:
    await run_load("127.0.0.1", port, concurrency=clients, warmup_s=0.0, duration_s=warmup, tool=tool)
    subprocess.run(zero, check=True, capture_output=True)
    window = await run_load(
        "127.0.0.1", port, concurrency=clients, warmup_s=0.0, duration_s=seconds, tool=tool
    )
    subprocess.run(dump, check=True, capture_output=True)
    return max(window.requests, 1)


async def main(args: argparse.Namespace) -> None:
    out = tempfile.mkdtemp(prefix="http_icount.")
    script = os.path.join(out, "serve.py")
    with open(script, "w") as f:
        f.write(SERVE.format(tree=tree, variant=args.variant))
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg", sys.executable, script],
        cwd=tree,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    zero = ["callgrind_control", "-z", str(server.pid)]
    dump = ["callgrind_control", "-d", str(server.pid)]
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline().decode().split()[1])
        if args.clients is None:
            calls = await _one_client(port, args.tool, args.n, zero, dump)
        else:
            calls = await _many_clients(port, args.tool, args.clients, args.warmup, args.seconds, zero, dump)
    finally:
        server.terminate()
        server.wait()
    dumped = next(p for p in glob.glob(f"{out}/cg*") if p.endswith(".1"))
    total = 0
    for line in open(dumped, errors="replace"):
        if line.startswith("summary:"):  # (not `totals:`, which counts again the frames live when zeroed)
            total = int(line.split()[1])
    if args.clients is None:
        print(f"{tree} {args.variant} {args.tool} {calls} http {round(total / calls)}")
    else:
        print(
            f"{tree} {args.variant} {args.tool} clients={args.clients} calls={calls} "
            f"instructions/call={round(total / calls)} collector/call={round(_collector(dumped) / calls)}"
        )
    shutil.rmtree(out)


parser = argparse.ArgumentParser()
parser.add_argument("variant")
parser.add_argument("tool", choices=("echo", "progress"))
parser.add_argument("n", type=int, nargs="?", default=200, help="calls of one client")
parser.add_argument("--clients", type=int, default=None, help="this many clients at once instead")
parser.add_argument("--warmup", type=float, default=20.0)
parser.add_argument("--seconds", type=float, default=40.0)
asyncio.run(main(parser.parse_args()))
