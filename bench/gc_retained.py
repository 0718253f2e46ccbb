"""What the garbage collector costs per call once a server holds its finished streams, in process.

`python -m bench.gc_retained <variant> [--calls 25600] [--clients 32] [--tool echo]` drives the
benchmark's app (`bench.apps` variants) with plain ASGI calls, `clients` at a time, `calls` calls,
twice: the first pass fills what the store keeps for its retention window (60 s by default, which
these calls stay within), the second is measured. It prints one JSON line:

- `tracked_objects`, `referents`: what a full collection walks once the calls are done (objects the
  collector tracks, and the references they hold);
- `full_collection_ms`: the quickest of 7 `gc.collect()` calls then (load moves it up, never down);
- `collections_per_call` by generation and `gc_us_per_call` (the time of every collection in the
  measured pass, through `gc.callbacks`), `us_per_call` (the pass's wall time per call: with
  other load on the machine, compare only runs made side by side).

The counts are deterministic up to the loop's timing; the times are not.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import time
from typing import Any

from bench.apps import create_app
from bench.callcounts import _call, open_session, starlette_app


def _body(i: int, tool: str) -> bytes:
    return (
        b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"%s",'
        b'"arguments":{"text":"hi"},"_meta":{"progressToken":%d}}}' % (i, tool.encode(), i)
    )


async def run(variant: str, calls: int, clients: int, tool: str, redis_url: str) -> dict[str, Any]:
    app = (
        create_app(variant, redis_url=redis_url, redis_prefix=f"gc-retained-{time.time_ns()}:")
        if "redis" in variant
        else create_app(variant)
    )
    inner: Any = starlette_app(app)
    spent = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}
    started = [0.0]

    def on_collection(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            counts = spent[info["generation"]]
            counts[0] += 1
            counts[1] += time.perf_counter() - started[0]

    async with inner.router.lifespan_context(inner):
        sessions = [await open_session(app, wait_s=None) for _ in range(clients)]
        each = calls // clients

        async def client(k: int, first: int) -> None:
            for i in range(first, first + each):
                status, _, payload = await _call(app, _body(i, tool), sessions[k], wait_s=None)
                if status != 200 or b'"result"' not in payload:
                    raise RuntimeError(f"call {i}: {status} {payload[:200]!r}")

        await asyncio.gather(*(client(k, 1 + k * 1_000_000) for k in range(clients)))
        gc.callbacks.append(on_collection)
        began = time.perf_counter()
        await asyncio.gather(*(client(k, 500_000 + k * 1_000_000) for k in range(clients)))
        wall = time.perf_counter() - began
        gc.callbacks.remove(on_collection)
        quickest = min(_timed_collection() for _ in range(7))
        tracked = gc.get_objects()
        referents = sum(len(gc.get_referents(item)) for item in tracked)
    measured = each * clients
    return {
        "variant": variant,
        "tool": tool,
        "clients": clients,
        "calls": measured,
        "tracked_objects": len(tracked),
        "referents": referents,
        "full_collection_ms": round(quickest * 1000, 1),
        "collections_per_call": [round(spent[g][0] / measured, 4) for g in (0, 1, 2)],
        "gc_us_per_call": round(1e6 * sum(s[1] for s in spent.values()) / measured),
        "us_per_call": round(1e6 * wall / measured),
    }


def _timed_collection() -> float:
    began = time.perf_counter()
    gc.collect()
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("variant")
    parser.add_argument("--calls", type=int, default=25_600)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--tool", default="echo")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    result = asyncio.run(run(args.variant, args.calls, args.clients, args.tool, args.redis_url))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
