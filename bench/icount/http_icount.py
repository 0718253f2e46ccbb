"""Instructions per tools/call over HTTP: the app under uvicorn (bench.serve), in valgrind's callgrind.

In-process counts (icount.py) leave out what a real server adds per request and per response header
(uvicorn's h11 parsing and header validation, the garbage collector walking the server's live
objects): over HTTP the wrapper costs more than in process, and this is the comparable figure
where wall-clock windows on a shared 2-CPU machine move by ±20%. The client (bench.loadgen) runs
outside valgrind; the server's counters are zeroed after a warm-up and dumped after `n` calls
(`callgrind_control`), so the figure is the server's instructions per call, uvicorn included.

    http_icount.py <variant> <echo|progress> <n>    (run.sh's variants; prints one line)
"""

import asyncio
import glob
import os
import shutil
import subprocess
import sys
import tempfile

tree = os.getcwd()
sys.path.insert(0, tree)
from bench.loadgen import Connection, Session  # noqa: E402

SERVE = """
import sys
sys.path.insert(0, {tree!r})
import mcp_resume_asgi.core.stream as _cs
_cs.HOLD_HEAD_S = 2.0  # as in icount.py: the same path however slow valgrind makes the run
from bench import serve
sys.argv = ["serve", {variant!r}]
serve.main()
"""


async def main(variant: str, tool: str, n: int) -> None:
    out = tempfile.mkdtemp(prefix="http_icount.")
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
        conn = Connection("127.0.0.1", port)
        await conn.open()
        session = Session(conn, tool)
        await session.initialize()
        for _ in range(60):
            await session.call()
        subprocess.run(["callgrind_control", "-z", str(server.pid)], check=True, capture_output=True)
        for _ in range(n):
            await session.call()
        subprocess.run(["callgrind_control", "-d", str(server.pid)], check=True, capture_output=True)
        await conn.close()
    finally:
        server.terminate()
        server.wait()
    dumps = [p for p in glob.glob(f"{out}/cg*") if p.endswith(".1")]
    total = 0
    for line in open(dumps[0], errors="replace"):
        if line.startswith("summary:"):  # (not `totals:`, which counts again the frames live when zeroed)
            total = int(line.split()[1])
    shutil.rmtree(out)
    print(f"{tree} {variant} {tool} {n} http {round(total / n)}")


asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
