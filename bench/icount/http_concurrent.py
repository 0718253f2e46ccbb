"""Instructions per tools/call over HTTP with many clients: the server saturated under callgrind.

`http_icount.py` counts one client's calls, one at a time; with many clients in flight a server
does other work per call (more live objects for each collection to walk, fuller event-loop
rounds). Here the load generator (`bench.loadgen`, outside valgrind) keeps `clients` sessions
calling; the server's counters are zeroed after a warm-up of `warmup` seconds and dumped after
`seconds` more, and the count is divided by the calls completed in that window. Prints the
instructions per call, and those of the garbage collector (`gc_collect_main`, inclusive).

    http_concurrent.py <variant> <echo|progress> [clients=32] [warmup=20] [seconds=40]

Run from the tree to measure (it is put first on the path). Slow: valgrind runs the server about
50x slower, so a window of 40 s holds a few hundred calls; a run counts within a few percent.
"""

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
from bench.loadgen import run_load  # noqa: E402

SERVE = """
import sys
sys.path.insert(0, {tree!r})
import mcp_resume_asgi.core.stream as _cs
_cs.HOLD_HEAD_S = 2.0  # (as http_icount.py: the same path however slow valgrind makes the run)
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


async def main(variant: str, tool: str, clients: int, warmup: float, seconds: float) -> None:
    out = tempfile.mkdtemp(prefix="http_concurrent.")
    script = os.path.join(out, "serve.py")
    with open(script, "w") as f:
        f.write(SERVE.format(tree=tree, variant=variant))
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg", sys.executable, script],
        cwd=tree,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline().decode().split()[1])
        await run_load("127.0.0.1", port, concurrency=clients, warmup_s=0.0, duration_s=warmup, tool=tool)
        subprocess.run(["callgrind_control", "-z", str(server.pid)], check=True, capture_output=True)
        window = await run_load(
            "127.0.0.1", port, concurrency=clients, warmup_s=0.0, duration_s=seconds, tool=tool
        )
        subprocess.run(["callgrind_control", "-d", str(server.pid)], check=True, capture_output=True)
    finally:
        server.terminate()
        server.wait()
    dump = next(p for p in glob.glob(f"{out}/cg*") if p.endswith(".1"))
    total = 0
    for line in open(dump, errors="replace"):
        if line.startswith("summary:"):  # (not `totals:`, which counts again the frames live when zeroed)
            total = int(line.split()[1])
    calls = max(window.requests, 1)
    collector = _collector(dump)
    shutil.rmtree(out)
    print(
        f"{tree} {variant} {tool} clients={clients} calls={calls} "
        f"instructions/call={round(total / calls)} collector/call={round(collector / calls)}"
    )


args = sys.argv[1:]
asyncio.run(
    main(
        args[0],
        args[1],
        int(args[2]) if len(args) > 2 else 32,
        float(args[3]) if len(args) > 3 else 20.0,
        float(args[4]) if len(args) > 4 else 40.0,
    )
)
