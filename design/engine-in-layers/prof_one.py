import asyncio, sys, pstats, cProfile, io
from plan.profile_diff import _profile, short
from plan.lean_bench import make

v = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 500
r = asyncio.run(_profile(lambda: make(v), n))
tot = sum(t for _, t in r.values())
print(f"{v}: profiled {tot:.0f} us/request")
for k, (c, t) in sorted(r.items(), key=lambda kv: -kv[1][1])[: int(sys.argv[3]) if len(sys.argv) > 3 else 40]:
    print(f"  {t:7.1f}us {c:5.1f}x  {short(k)}")
