"""Cumulative profiled µs per call of the prototype's functions (profiler-inflated; compare only)."""

import asyncio, cProfile, pstats, sys
from bench.callcounts import _call, starlette_app
from bench.inprocess import INIT
from plan.lean_bench import _body, make

v = sys.argv[1]
tool = sys.argv[2] if len(sys.argv) > 2 else "echo"
n = 1000


async def main():
    app = make(v)
    inner = starlette_app(app)
    async with inner.router.lifespan_context(inner):
        _, h, _ = await _call(app, INIT, None)
        s = h[b"mcp-session-id"]
        for i in range(1, 100):
            await _call(app, _body(i, tool), s)
        pr = cProfile.Profile()
        pr.enable()
        for i in range(1000, 1000 + n):
            await _call(app, _body(i, tool), s)
        pr.disable()
    return pstats.Stats(pr).stats


st = asyncio.run(main())
tot = sum(x[2] for x in st.values()) * 1e6 / n
print(f"{v} {tool}: profiled total {tot:.0f} us/call")
rows = [
    (x[3] * 1e6 / n, x[2] * 1e6 / n, x[1] / n, k)
    for k, x in st.items()
    if "/plan/lean" in k[0] or "mcp_resume_asgi" in k[0]
]
for cum, tt, nc, k in sorted(rows, reverse=True)[:30]:
    print(f"  cum {cum:7.1f} self {tt:6.1f} {nc:4.1f}x {k[0].split('/')[-1]}:{k[1]}:{k[2]}")
