"""`python -m bench.redis_profile`: where a `tools/call` on the Redis store spends its CPU, in process.

Drives the benchmark app (`bench.apps`, tool `progress`) through plain ASGI calls (the driver of
`bench.callcounts`) on a private `redis-server` (`bench.redis_peers.PrivateRedis`): CPU µs per call
for `wrapped` (memory), `wrapped_redis` and `persist_redis`, then, with `--profile`, cProfile of
`wrapped_redis` split by where the time is spent (redis-py, hiredis, this package, the app and
the SDK, asyncio, the rest).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import statistics
import sys
import time
from typing import Any

from bench.apps import create_app
from bench.callcounts import _call, open_session, starlette_app
from bench.redis_peers import PrivateRedis

VARIANTS = ("bare", "wrapped", "sdk_es", "wrapped_redis", "persist_redis")


def _progress(i: int) -> bytes:
    return (
        b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"progress","arguments":'
        b'{"text":"hi"},"_meta":{"progressToken":"p%d"}}}' % (i, i)
    )


async def _run(variant: str, url: str, prefix: str, requests: int, profile: cProfile.Profile | None) -> float:
    app = create_app(variant, redis_url=url, redis_prefix=prefix)
    inner: Any = starlette_app(app)
    async with inner.router.lifespan_context(inner):
        session = await open_session(app)
        for i in range(1, 100):
            await _call(app, _progress(i), session)
        if profile is not None:
            profile.enable()
        started = time.process_time()
        for i in range(1000, 1000 + requests):
            status, _, payload = await _call(app, _progress(i), session)
            assert status == 200 and b'"result"' in payload, payload[:300]
        used = time.process_time() - started
        if profile is not None:
            profile.disable()
        return 1e6 * used / requests


def _where(filename: str) -> str:
    for part, name in (
        ("/redis/", "redis-py"),
        ("hiredis", "hiredis"),
        ("mcp_resume_asgi", "mcp_resume_asgi"),
        ("mcp_persist", "mcp_persist"),
        ("/mcp/", "mcp SDK"),
        ("pydantic", "pydantic"),
        ("asyncio", "asyncio"),
        ("anyio", "anyio"),
        ("starlette", "starlette"),
        ("sse_starlette", "starlette"),
    ):
        if part in filename:
            return name
    return "other" if filename != "~" else "builtins"


def split(profile: cProfile.Profile, requests: int) -> dict[str, Any]:
    stats = pstats.Stats(profile)
    by: dict[str, float] = {}
    rows = []
    for (filename, line, func), (_, _, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        by[_where(filename)] = by.get(_where(filename), 0.0) + tottime
        rows.append((tottime, cumtime, f"{filename.rsplit('site-packages/', 1)[-1]}:{line}({func})"))
    rows.sort(reverse=True)
    return {
        "tottime_us_per_call_by_package": {
            k: round(1e6 * v / requests, 1) for k, v in sorted(by.items(), key=lambda x: -x[1])
        },
        "top": [
            f"{1e6 * t / requests:7.1f} µs self {1e6 * c / requests:8.1f} µs cum  {name}"
            for t, c, name in rows[:40]
        ],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.redis_profile")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    variants = args.variants.split(",")
    redis = PrivateRedis()
    try:
        runs: dict[str, list[float]] = {v: [] for v in variants}
        for r in range(args.rounds):
            for v in variants:
                runs[v].append(asyncio.run(_run(v, redis.url, f"p{r}:{v}:", args.requests, None)))
        result: dict[str, Any] = {
            "cpu_us_per_call": {v: round(statistics.median(xs), 1) for v, xs in runs.items()},
            "runs": {v: [round(x, 1) for x in xs] for v, xs in runs.items()},
        }
        if args.profile:
            profile = cProfile.Profile(time.process_time)
            asyncio.run(_run("wrapped_redis", redis.url, "prof:", args.requests, profile))
            result["wrapped_redis_profile"] = split(profile, args.requests)
    finally:
        redis.close()
    json.dump(result, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
