"""Today's import graph of mcp_resume_asgi (grimp): edges runtime vs TYPE_CHECKING-only, cycles.

.venv/bin/python -m plan.graph [-v: edges inside each cycle] [-e: every module's imports]
"""

from __future__ import annotations

import sys
from collections import defaultdict

P = "mcp_resume_asgi"


def sccs(nodes, es):
    """Strongly connected components of more than one node (Tarjan)."""
    adj = defaultdict(list)
    for a, b in es:
        adj[a].append(b)
    idx, low, st, on, out, n = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        idx[v] = low[v] = n[0]
        n[0] += 1
        st.append(v)
        on.add(v)
        for w in adj[v]:
            if w not in idx:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], idx[w])
        if low[v] == idx[v]:
            c = []
            while True:
                w = st.pop()
                on.discard(w)
                c.append(w)
                if w == v:
                    break
            if len(c) > 1:
                out.append(sorted(c))

    for v in nodes:
        if v not in idx:
            visit(v)
    return out


def main() -> None:
    import grimp

    full = grimp.build_graph(P, include_external_packages=True, exclude_type_checking_imports=False)
    rt = grimp.build_graph(P, include_external_packages=True, exclude_type_checking_imports=True)
    mods = sorted(m for m in full.modules if m == P or m.startswith(P + "."))

    def edges(g):
        return {(m, t) for m in mods for t in g.find_modules_directly_imported_by(m)}

    E, R = edges(full), edges(rt)
    internal = {(a, b) for a, b in E if b.startswith(P)}
    tc_only = {(a, b) for a, b in internal if (a, b) not in R}
    short = lambda m: m[len(P) + 1 :] or "__init__"  # noqa: E731
    print(f"modules {len(mods)}  internal edges {len(internal)}  of which TYPE_CHECKING-only {len(tc_only)}")
    for label, es in (("ALL (TYPE_CHECKING incl.)", internal), ("RUNTIME only", internal - tc_only)):
        cs = sccs(mods, es)
        print(f"\n== SCCs {label}: {len(cs)}")
        for c in cs:
            inner = [(a, b) for a, b in es if a in c and b in c]
            print(f"  size {len(c)} ({len(inner)} edges): {' '.join(short(m) for m in c)}")
    if "-v" in sys.argv:
        for c in sccs(mods, internal):
            print(f"\n-- edges inside SCC of {len(c)}")
            for a, b in sorted((a, b) for a, b in internal if a in c and b in c):
                print(f"   {short(a):28s} -> {short(b):28s} {'TC' if (a, b) in tc_only else ''}")
    if "-e" in sys.argv:
        for m in mods:
            tgts = sorted(short(b) + ("(TC)" if (m, b) in tc_only else "") for a, b in internal if a == m)
            ext = sorted({b for a, b in E if a == m and not b.startswith(P)})
            print(f"{short(m)}: {' '.join(tgts)} | ext: {' '.join(ext)}")


if __name__ == "__main__":
    main()
