"""What the OpenTelemetry SDK costs per `tools/call`, in instructions (issue 23's 5% bar).

`python -m bench.otel_cost [--requests 500] [--tools echo,progress]` runs the benchmark's
app in process (plain ASGI calls, no sockets: `bench.inprocess`'s driver), `wrapped` and
`wrapped_otel`, each under `valgrind --tool=callgrind` twice - with a few requests and with
`--requests` more - and reports the difference of the two instruction counts per request:
what one more call costs, start-up and warm-up cancelled out. Instruction counts depend
little on what else the machine runs (timers fire by wall time: repeats spread about ±1.5
points; wall-clock req/s on a shared machine moves far more), so the
ratio `wrapped_otel / wrapped` is the quick check of the bar; the HTTP benchmark
(`python -m bench`) is still the bar itself (its requests cost more, through uvicorn and a
socket, so the same absolute overhead is a smaller share there).

Both variants run on the memory store, which is not timed (`store/observed.py`): with the
SDK configured, a plain call asks it for nothing, and what is left of the bar is noise. A
shared store (Redis) is timed: each of its calls is a histogram sample (~70k instructions,
against a Redis round trip's own cost).

`--profile VARIANT` prints the top functions by cumulative time under cProfile instead,
and `--one VARIANT --count N` is the child the callgrind runs start. Needs valgrind.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import re
import subprocess
import sys
import tempfile
from typing import Any

from bench.apps import create_app
from bench.callcounts import _call, open_session, starlette_app

VARIANTS = ("wrapped", "wrapped_otel")
WARMUP = 50
BASE = 50
"""The requests of the short run (its instructions are subtracted from the long one's)."""


def _tools_call(i: int, tool: str) -> bytes:
    arguments = b'{"text":"hi"}'
    meta = b',"_meta":{"progressToken":%d}' % i if tool == "progress" else b""
    return b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"%s","arguments":%s%s}}' % (
        i,
        tool.encode(),
        arguments,
        meta,
    )


async def _drive(variant: str, tool: str, count: int, profile: cProfile.Profile | None = None) -> None:
    app = create_app(variant)
    inner: Any = starlette_app(app)
    async with inner.router.lifespan_context(inner):
        session = await open_session(app)
        for i in range(1, 1 + WARMUP):
            await _call(app, _tools_call(i, tool), session)
        if profile is not None:
            profile.enable()
        for i in range(1000, 1000 + count):
            status, _, payload = await _call(app, _tools_call(i, tool), session)
            assert status == 200 and b'"result"' in payload, payload[:200]
        if profile is not None:
            profile.disable()


def _instructions(variant: str, tool: str, count: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                "--dump-instr=no",
                "--compress-strings=no",
                sys.executable,
                "-m",
                "bench.otel_cost",
                "--one",
                variant,
                "--tool",
                tool,
                "--count",
                str(count),
            ],
            check=True,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        with open(out) as f:
            for line in f:
                match = re.match(r"(?:summary|totals):\s+(\d+)", line)
                if match:
                    return int(match[1])
    raise RuntimeError("no totals in the callgrind output")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.otel_cost")
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--tools", default="echo,progress")
    parser.add_argument("--one", choices=(*VARIANTS, "wrapped_off"))
    parser.add_argument("--tool", default="echo")
    parser.add_argument("--count", type=int, default=BASE)
    parser.add_argument("--profile", choices=(*VARIANTS, "wrapped_off"))
    args = parser.parse_args(argv)
    if args.one:
        asyncio.run(_drive(args.one, args.tool, args.count))
        return
    if args.profile:
        profile = cProfile.Profile()
        asyncio.run(_drive(args.profile, args.tool, args.requests, profile))
        pstats.Stats(profile).sort_stats("cumulative").print_stats(45)
        return
    result: dict[str, Any] = {"requests": args.requests}
    for tool in args.tools.split(","):
        per_call = {}
        for variant in VARIANTS:
            short = _instructions(variant, tool, BASE)
            long = _instructions(variant, tool, BASE + args.requests)
            per_call[variant] = (long - short) / args.requests
        result[tool] = {
            "instructions_per_call": {v: round(x) for v, x in per_call.items()},
            "otel_minus_wrapped": round(per_call["wrapped_otel"] - per_call["wrapped"]),
            "otel_over_wrapped": round(per_call["wrapped_otel"] / per_call["wrapped"], 4),
        }
        print(json.dumps({tool: result[tool]}), file=sys.stderr, flush=True)
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
