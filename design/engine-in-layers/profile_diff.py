"""Where the wrapped app's extra CPU per tools/call goes: a cProfile of bare and of wrapped
(same driver as bench.callcounts), diffed function by function (tottime per request).

    .venv/bin/python -m plan.profile_diff [--requests 400] [--variant wrapped] [--top 45]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
from collections import defaultdict
from typing import Any

from bench.apps import create_app
from bench.callcounts import _call, starlette_app
from bench.inprocess import INIT, _tools_call


async def _profile(factory: Any, requests: int) -> dict[tuple[str, int, str], tuple[float, float]]:
    app = factory()
    inner = starlette_app(app)
    async with inner.router.lifespan_context(inner):
        status, headers, _ = await _call(app, INIT, None)
        session = headers[b"mcp-session-id"]
        await _call(app, b'{"jsonrpc":"2.0","method":"notifications/initialized"}', session)
        for i in range(1, 100):
            await _call(app, _tools_call(i), session)
        prof = cProfile.Profile()
        prof.enable()
        for i in range(1000, 1000 + requests):
            status, _, payload = await _call(app, _tools_call(i), session)
            assert status == 200 and b'"result"' in payload
        prof.disable()
    st = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    return {k: (v[1] / requests, 1e6 * v[2] / requests) for k, v in st.items()}


def short(key: tuple[str, int, str]) -> str:
    f, line, fn = key
    for cut in ("site-packages/", "python3.11/", "engine-plan/"):
        if cut in f:
            f = f.split(cut, 1)[1]
    return f"{f}:{line}:{fn}"


def area(f: str) -> str:
    if "mcp_resume_asgi" in f or "plan/" in f:
        return "ours"
    for name in (
        "anyio",
        "starlette",
        "mcp/",
        "pydantic",
        "asyncio",
        "json",
        "hmac",
        "hashlib",
        "itsdangerous",
        "uuid",
        "sse_starlette",
        "contextlib",
        "logging",
        "typing",
        "enum",
        "base64",
        "secrets",
    ):
        if name in f:
            return name.strip("/")
    return "other"


def diff(requests: int, variant: str, top: int, factory: Any = None) -> None:
    bare = asyncio.run(_profile(lambda: create_app("bare"), requests))
    from plan.lean_bench import make

    wrapped = asyncio.run(_profile(factory or (lambda: make(variant)), requests))
    keys = set(bare) | set(wrapped)
    rows = []
    by_area: dict[str, float] = defaultdict(float)
    for k in keys:
        c0, t0 = bare.get(k, (0.0, 0.0))
        c1, t1 = wrapped.get(k, (0.0, 0.0))
        rows.append((t1 - t0, c1 - c0, k))
        by_area[area(k[0])] += t1 - t0
    tb = sum(t for _, t in bare.values())
    tw = sum(t for _, t in wrapped.values())
    print(f"profiled us/request: bare {tb:.0f}  {variant} {tw:.0f}  diff {tw - tb:.0f}")
    print("diff by area (profiled us/request):")
    for a, t in sorted(by_area.items(), key=lambda kv: -kv[1]):
        if abs(t) >= 2:
            print(f"  {t:8.1f}  {a}")
    print(f"top {top} functions by extra tottime (profiled us/request, extra calls/request):")
    for dt, dc, k in sorted(rows, reverse=True)[:top]:
        print(f"  {dt:8.1f} {dc:6.1f}  {short(k)}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--variant", default="wrapped")
    ap.add_argument("--top", type=int, default=45)
    a = ap.parse_args()
    diff(a.requests, a.variant, a.top)
