"""Function-by-function CALL COUNT differences per request between two variants (deterministic)."""

import asyncio, sys
from plan.profile_diff import _profile, short
from plan.lean_bench import make

a, b = sys.argv[1], sys.argv[2]
pa = asyncio.run(_profile(lambda: make(a), 300))
pb = asyncio.run(_profile(lambda: make(b), 300))
rows = []
for k in set(pa) | set(pb):
    ca, ta = pa.get(k, (0, 0))
    cb, tb = pb.get(k, (0, 0))
    if abs(cb - ca) >= 0.5:
        rows.append((cb - ca, tb - ta, k))
for dc, dt, k in sorted(rows, key=lambda r: -abs(r[0]))[:60]:
    print(f"{dc:+7.1f} calls {dt:+8.1f}us  {short(k)}")
