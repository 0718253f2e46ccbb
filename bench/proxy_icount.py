"""The proxy's own cost per `tools/call`, in instructions (callgrind) or a profile (cProfile).

Wall-clock windows on a shared, loaded machine move by tens of percent; the instructions a
process executes per request do not. The upstream (`bench.serve bare`) and the client
(`bench.loadgen`) run outside; only the front runs under the tool, its counters zeroed after a
warm-up and dumped after `n` calls, so the figure is the front's instructions per call, uvicorn
included.

    python -m bench.proxy_icount forward echo 200            # the proxy app alone, in callgrind
    python -m bench.proxy_icount proxy echo 200              # `mcp-resume proxy`, in callgrind
    python -m bench.proxy_icount forward echo 2000 --profile # cProfile instead: top functions

`--tree DIR` runs the front with the package from DIR (a `git archive` of another commit, say).
`--http h11|httptools` and `--loop asyncio|uvloop` pass on to the `forward` front's uvicorn (the
`proxy` front is `mcp-resume proxy` as shipped: uvicorn's `auto`, httptools and uvloop if installed).
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.loadgen import Connection, Session

ROOT = Path(__file__).resolve().parents[1]

FRONT = """
import sys, signal
sys.path.insert(0, {root!r})
sys.path.insert(0, {tree!r})
sys.argv = {argv!r}
profile = {profile!r}
if profile:
    import cProfile, pstats
    prof = cProfile.Profile()
    def on_usr1(*_):
        prof.enable()
    def on_usr2(*_):
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").dump_stats(profile)
    signal.signal(signal.SIGUSR1, on_usr1)
    signal.signal(signal.SIGUSR2, on_usr2)
{run}
"""

RUN_FORWARD = """
from bench.proxy import forward_main
forward_main(sys.argv[1], http=sys.argv[2], loop=sys.argv[3])
"""

RUN_PROXY = """
from mcp_resume_asgi.cli import main
main()
"""


def _ready_port(stream: object, prefix: str) -> int:
    for raw in stream:  # type: ignore[attr-defined]
        line = raw.decode() if isinstance(raw, bytes) else raw
        if line.startswith(prefix):
            return int(line.rstrip().rsplit(":", 1)[-1].split("/")[0].split()[-1])
    raise RuntimeError(f"no line starting {prefix!r}")


async def main(args: argparse.Namespace) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "0", "PYTHONUNBUFFERED": "1"}
    upstream = subprocess.Popen(
        [sys.executable, "-m", "bench.serve", "bare"], stdout=subprocess.PIPE, env=env, cwd=ROOT
    )
    out = tempfile.mkdtemp(prefix="proxy_icount.")
    try:
        assert upstream.stdout is not None
        up_port = int(upstream.stdout.readline().decode().split()[1])
        url = f"http://127.0.0.1:{up_port}/mcp"
        if args.variant == "forward":
            argv = ["forward", url, args.http, args.loop]
            run, ready = RUN_FORWARD, "FORWARDING"
        else:
            argv = ["mcp-resume", "proxy", "--upstream", url, "--port", "0", "--log-level", "warning"]
            run, ready = RUN_PROXY, "mcp-resume: serving"
        profile = f"{out}/profile" if args.profile else ""
        script = os.path.join(out, "front.py")
        Path(script).write_text(
            FRONT.format(root=str(ROOT), tree=args.tree or str(ROOT), argv=argv, profile=profile, run=run)
        )
        cmd = [sys.executable, script]
        if not args.profile:
            cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg", *cmd]
        front = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
        try:
            assert front.stdout is not None
            port = _ready_port(front.stdout, ready)
            conn = Connection("127.0.0.1", port)
            await conn.open()
            session = Session(conn, args.tool)
            await session.initialize()
            for _ in range(60):
                await session.call()
            if args.profile:
                front.send_signal(signal.SIGUSR1)
                await asyncio.sleep(0.2)
            else:
                subprocess.run(["callgrind_control", "-z", str(front.pid)], check=True, capture_output=True)
            for _ in range(args.n):
                await session.call()
            if args.profile:
                front.send_signal(signal.SIGUSR2)
                await asyncio.sleep(1.0)
            else:
                subprocess.run(["callgrind_control", "-d", str(front.pid)], check=True, capture_output=True)
            await conn.close()
        finally:
            front.terminate()
            front.wait()
        if args.profile:
            import pstats

            stats = pstats.Stats(profile)
            stats.sort_stats("tottime").print_stats(args.top)
            stats.sort_stats("cumulative").print_stats(args.top)
            return
        dumps = [p for p in glob.glob(f"{out}/cg*") if p.endswith(".1")]
        total = 0
        for line in open(dumps[0], errors="replace"):
            if line.startswith("summary:"):
                total = int(line.split()[1])
        print(
            f"{args.variant} {args.tool} http={args.http} loop={args.loop} n={args.n}: {round(total / args.n)} instructions/call"
        )
    finally:
        upstream.terminate()
        upstream.wait()
        if args.keep_profile and args.profile:
            shutil.copy(f"{out}/profile", args.keep_profile)
        shutil.rmtree(out, ignore_errors=True)


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("variant", choices=("forward", "proxy"))
    parser.add_argument("tool", choices=("echo", "progress"))
    parser.add_argument("n", type=int)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--tree", default="", help="import mcp_resume_asgi in the front from this directory")
    parser.add_argument("--keep-profile", default="", help="copy the profile there")
    parser.add_argument("--http", default="h11")
    parser.add_argument("--loop", default="asyncio")
    parser.add_argument(
        "--uvicorn-options", action="store_true", help="pass --http/--loop to mcp-resume proxy"
    )
    asyncio.run(main(parser.parse_args()))


if __name__ == "__main__":
    cli()
