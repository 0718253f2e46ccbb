"""Per-call counts (tasks, loop iterations, events, cancel scopes...) for any variant of plan.lean_bench."""

import asyncio, cProfile, pstats, sys
from bench.callcounts import WATCH, _call, starlette_app
from bench.inprocess import INIT
from plan.lean_bench import _body, make

WATCH = dict(
    WATCH,
    **{
        "asyncio futures/Task.__step": ("~", "<method 'run' of '_contextvars.Context' objects>"),
        "json.loads": ("json/__init__.py", "loads"),
        "hmac.new": ("hmac.py", "new"),
        "call_soon": ("base_events.py", "call_soon"),
        "gc": ("~", "<built-in method gc.collect>"),
    },
)


async def run(variant, n, tool):
    app = make(variant)
    inner = starlette_app(app)
    async with inner.router.lifespan_context(inner):
        _, h, _ = await _call(app, INIT, None)
        s = h[b"mcp-session-id"]
        await _call(app, b'{"jsonrpc":"2.0","method":"notifications/initialized"}', s)
        for i in range(1, 50):
            await _call(app, _body(i, tool), s)
        prof = cProfile.Profile()
        prof.enable()
        for i in range(1000, 1000 + n):
            await _call(app, _body(i, tool), s)
        prof.disable()
    st = pstats.Stats(prof).stats
    out = {k: 0.0 for k in WATCH}
    ours = 0
    for (f, _l, fn), (_cc, nc, tt, _ct, _c) in st.items():
        for k, (suf, name) in WATCH.items():
            if (f.endswith(suf) or suf == f) and fn == name:
                out[k] += nc / n
        if "mcp_resume_asgi" in f or "/plan/" in f:
            ours += nc / n
    out["python calls into ours"] = ours
    return out


tool = sys.argv[2] if len(sys.argv) > 2 else "echo"
vs = sys.argv[1].split(",")
res = {v: asyncio.run(run(v, 200, tool)) for v in vs}
for k in res[vs[0]]:
    print(f"{k:40s}" + "".join(f"{res[v][k]:>12.1f}" for v in vs))
print(" " * 40 + "".join(f"{v[:11]:>12s}" for v in vs))
