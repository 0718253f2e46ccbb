"""CPU per `tools/call` in process: bare vs wrapped vs the SDK's own event store.

`python -m bench.inprocess [--requests 2000] [--rounds 3]` drives the benchmark's
`MCPServer` app through plain ASGI calls (no sockets, no HTTP server: the same
driver as `bench.callcounts`) and prints the process CPU time per request, the
median of `rounds` interleaved rounds. No profiler: it is the quick A/B check for
a change to the per-request path (a few µs of noise on ~1 ms requests).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from typing import Any

from bench.apps import create_app
from bench.callcounts import _call, open_session, starlette_app

VARIANTS = ("bare", "wrapped", "sdk_es", "wrapped_off", "wrapped_otel", "wrapped_sqlite")


def _tools_call(i: int) -> bytes:
    return (
        b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}'
        % i
    )


async def _cpu_us_per_request(variant: str, requests: int) -> float:
    app = create_app(variant)
    inner: Any = starlette_app(app)
    async with inner.router.lifespan_context(inner):
        session = await open_session(app)
        for i in range(1, 200):  # warm-up
            await _call(app, _tools_call(i), session)
        started = time.process_time()
        for i in range(1000, 1000 + requests):
            status, _, payload = await _call(app, _tools_call(i), session)
            assert status == 200 and b'"result"' in payload, payload[:200]
        return 1e6 * (time.process_time() - started) / requests


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.inprocess")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    runs: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for _ in range(args.rounds):
        for variant in VARIANTS:
            runs[variant].append(asyncio.run(_cpu_us_per_request(variant, args.requests)))
    medians = {v: statistics.median(xs) for v, xs in runs.items()}
    result = {
        "cpu_us_per_request": {v: round(m, 1) for v, m in medians.items()},
        "runs": {v: [round(x, 1) for x in xs] for v, xs in runs.items()},
        "wrapped_minus_bare_us": round(medians["wrapped"] - medians["bare"], 1),
        "wrapped_over_bare": round(medians["wrapped"] / medians["bare"], 3),
        "wrapped_over_sdk_es": round(medians["wrapped"] / medians["sdk_es"], 3),
        # Telemetry: on through the API with no SDK (`wrapped`, the default) and with the SDK.
        "wrapped_minus_telemetry_off_us": round(medians["wrapped"] - medians["wrapped_off"], 1),
        "otel_sdk_over_wrapped": round(medians["wrapped_otel"] / medians["wrapped"], 3),
    }
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
