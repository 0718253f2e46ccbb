"""Issue 21's target tree, checked against today's imports.

    .venv/bin/python -m plan.target_map            # violations of the target layers, per edge
    .venv/bin/python -m plan.target_map --skeleton DIR   # writes a skeleton package of the target
                                                   # tree with today's imports remapped (minus the
                                                   # ones the plan resolves), for lint-imports

Every `from mcp_resume_asgi.X import a, b` (module level, TYPE_CHECKING block, or inside a
function) is read with `ast`; X and each name are mapped to their target module (MOVES, with
name-level SPLITS for modules cut in two); an edge is a violation when the importer's layer is
not above the imported one's (or both are in independent siblings), or when it crosses the
`engine/port` rule (faces reach the engine only through engine.port).
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "mcp_resume_asgi"

MOVES: dict[str, str] = {
    "__init__": "__init__",
    "wrap": "api",
    "policy": "policy",
    "protocol": "wire.jsonrpc",
    "sse": "wire.sse",
    "tokens": "wire.tokens",
    "header_values": "wire.headers",
    "principal": "wire.principal",
    "relay_seal": "wire.relay_seal",
    "stream_core": "core.stream",
    "stream_terms": "core.stream",
    "held_writes": "core.held_writes",
    "cancel_notices": "core.cancel_notices",
    "engine": "engine.engine",
    "hosted": "engine.hosted",
    "first_answer": "engine.hosted",
    "writer": "engine.delivery",
    "recording": "engine.recorder",
    "follower": "engine.follower",
    "expiry": "engine.cancellation",
    "connection": "engine.connection",
    "scheduler": "engine.scheduler",
    "sessions": "engine.sessions",
    "cluster": "engine.cluster",
    "relayed_caller": "engine.relayed_caller",
    "store_recovery": "engine.store_recovery",
    "admission": "engine.admission",
    "middleware": "http.middleware",
    "post_handling": "http.middleware",
    "stream_urls": "http.resume",
    "client_answers": "http.client_answers",
    "client_cancels": "http.client_cancels",
    "retried_posts": "http.retried_posts",
    "store_outage": "http.outage",
    "features": "features.seam",
    "resumable_requests": "features.resumable_requests",
    "resume_tokens": "features.resume_tokens",
    "client.sse": "client.sse_reader",
    # the importing side of modules split by name (SPLITS): where their own code goes
    "_http": "http.bodies",
    "_misconfig": "http.misconfig",
    "sse_answers": "engine.delivery",
}
#: Modules cut by concept: name -> target (names not listed follow MOVES).
SPLITS: dict[str, dict[str, str]] = {
    "_http": {
        **dict.fromkeys(
            ["header", "header_count", "media_types", "accepts_sse", "is_json", "Headers"], "wire.headers"
        ),
        **dict.fromkeys(
            ["send_bytes", "send_json", "send_jsonrpc_error", "UNAVAILABLE_HEADER"], "wire.replies"
        ),
        **dict.fromkeys(
            ["read_body", "read_body_or_refuse", "replay_receive", "BodyTooLarge", "ClientGone"],
            "http.bodies",
        ),
    },
    "_misconfig": {"check_asgi_app": "wire.asgi", "WrongPathDetector": "http.misconfig"},
    "sse_answers": {
        "frame_events": "wire.sse",
        "finish_answer": "engine.delivery",
        "note_detached": "engine.delivery",
    },
    "store_outage": {
        "StoreOutage": "http.outage",
        "STORE_RETRY_S": "store.health",
        "TrackedSend": "http.outage",
        "send_unavailable": "http.outage",
    },
    "features": {
        "FEATURES_KEY": "wire.scope_keys",
        "RequestContext": "engine.port",
        "FeatureMiddleware": "features.seam",
    },
    "cluster": {
        "RELAYED_FROM": "wire.scope_keys",
        "owner_key": "store.keys",
        "node_key": "store.keys",
        "OutageLog": "store.health",
        "describe_error": "store.health",
    },
    "recording": {"input_key": "store.keys"},
    "engine": {"STREAM_SEGMENT": "wire.scope_keys", "RetryAnswer": "engine.port", "Delivery": "engine.port"},
    "connection": {"Delivery": "engine.port"},
    "client_answers": {"nothing_to_send": "core.resume"},
    "retried_posts": {"RetryAnswer": "engine.port"},
    "writer": {"READ_BATCH": "engine.delivery"},
    "scheduler": {"spawn": "engine.scheduler"},
}
#: Layers, top to bottom; a tuple is a layer of independent siblings.
LAYERS: list[tuple[str, ...]] = [
    ("api",),
    ("rest",),
    ("tasks",),
    ("features", "http"),
    ("engine",),
    ("core", "store"),
    ("policy", "wire"),
]
FACES = ("features", "tasks", "rest")
#: Edges inside one layer that the plan removes (each replaced by engine.services / a Protocol /
#: a callback handed down), so that no cycle is left: see issue-21-plan.md section 1.
BACK_EDGES = {
    "engine.cancellation -> engine.hosted",  # takes a CancellableStream Protocol (engine.port)
    "engine.delivery -> engine.cancellation",  # returns "cancel" to its host instead
    "engine.delivery -> engine.engine",  # StreamServices
    "engine.delivery -> engine.hosted",  # owned by the host; gets core + services + callbacks
    "engine.follower -> engine.engine",  # StreamServices
    "engine.hosted -> engine.engine",  # StreamServices
    "engine.recorder -> engine.hosted",  # StreamIdentity + core + services + deliver callback
    "engine.sessions -> engine.engine",  # StreamServices
    "engine.sessions -> engine.hosted",  # remember(session_id, answer): plain values
    "engine.store_recovery -> engine.engine",  # StreamServices
    "engine.store_recovery -> engine.hosted",  # hold(HeldWriter Protocol)
    "tasks.listen -> tasks.middleware",  # a Protocol of what listen needs
}


def old_name(path: Path) -> str:
    rel = path.relative_to(PKG).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1] or ["__init__"]
    return ".".join(parts)


def target(old: str, name: str | None = None) -> str:
    if name is not None and name in SPLITS.get(old, {}):
        return SPLITS[old][name]
    if old in MOVES:
        return MOVES[old]
    return old  # tasks.*, rest.*, store.*, client.* stay where they are


def top(mod: str) -> str:
    return mod.split(".")[0]


def rank(mod: str) -> tuple[int, str] | None:
    t = top(mod)
    for i, layer in enumerate(LAYERS):
        if t in layer:
            return (len(LAYERS) - i, t)
    return None  # __init__, client


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(path: Path) -> list[tuple[str, str | None, int, str]]:
    """(imported old module, name or None, line, kind: runtime|TC|lazy) of one file."""
    tree = ast.parse(path.read_text())
    me = old_name(path)
    out: list[tuple[str, str | None, int, str]] = []

    def walk(node: ast.AST, kind: str) -> None:
        for child in ast.iter_child_nodes(node):
            k = kind
            if isinstance(child, ast.If) and _is_type_checking(child):
                k = "TC"
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and kind == "runtime":
                k = "lazy"
            if isinstance(child, ast.ImportFrom) and child.module:
                mod = child.module
                if child.level:
                    pkg_parts = (
                        me.split(".")
                        if path.name == "__init__.py" and me != "__init__"
                        else me.split(".")[:-1]
                    )
                    base = pkg_parts[: len(pkg_parts) - child.level + 1] if me != "__init__" else []
                    mod = ".".join([*base, mod]) if base else mod
                    mod = "mcp_resume_asgi." + mod
                if mod == "mcp_resume_asgi" or mod.startswith("mcp_resume_asgi."):
                    sub = mod[len("mcp_resume_asgi.") :] if mod != "mcp_resume_asgi" else ""
                    for alias in child.names:
                        if sub == "":  # from mcp_resume_asgi import protocol as p
                            out.append((alias.name, None, child.lineno, k))
                        elif (PKG / sub.replace(".", "/") / (alias.name + ".py")).exists():
                            out.append((f"{sub}.{alias.name}", None, child.lineno, k))
                        else:
                            out.append((sub, alias.name, child.lineno, k))
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.startswith("mcp_resume_asgi."):
                        out.append((alias.name[len("mcp_resume_asgi.") :], None, child.lineno, k))
            walk(child, k)

    walk(tree, "runtime")
    return out


def check() -> dict[str, list[str]]:
    """Violations per (new importer -> new imported) edge."""
    bad: dict[str, list[str]] = defaultdict(list)
    for path in sorted(PKG.rglob("*.py")):
        me_old = old_name(path)
        for imp_old, name, line, kind in imports(path):
            src = target(me_old)
            dst = target(imp_old, name)
            if top(src) == top(dst) or src == "__init__":
                continue
            rs, rd = rank(src), rank(dst)
            why = ""
            if top(src) == "client" or top(dst) == "client":
                if not (top(src) == "client" and top(dst) == "wire"):
                    why = "client may import only wire"
            elif rs is None or rd is None:
                continue
            elif rs[0] < rd[0]:
                why = f"upward: {rs[1]} imports {rd[1]}"
            elif rs[0] == rd[0]:
                why = f"independent siblings: {rs[1]} imports {rd[1]}"
            elif top(src) in FACES and top(dst) == "engine" and not dst.startswith("engine.port"):
                why = "a face reaches past engine.port"
            if why:
                what = f"{name}" if name else "(module)"
                bad[f"{src} -> {dst}"].append(f"{me_old}.py:{line} {kind} {imp_old}.{what}: {why}")
    return bad


WATCHED_EXTERNALS = ("anyio", "asyncio", "starlette", "sniffio", "trio")


def externals(path: Path) -> set[str]:
    """The event-loop / framework packages a file imports (module level, TYPE_CHECKING too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            )
        )
        for n in names:
            if n.split(".")[0] in WATCHED_EXTERNALS:
                found.add(n.split(".")[0])
    return found


def skeleton(out_dir: Path, resolved: set[str]) -> None:
    """A package of empty modules at the target paths, importing what they would import
    (today's edges remapped, minus `resolved` edges), for `lint-imports` to check."""
    edges: dict[str, set[tuple[str, str]]] = defaultdict(set)
    mods: set[str] = set()
    for path in sorted(PKG.rglob("*.py")):
        me_old = old_name(path)
        src = target(me_old)
        mods.add(src)
        for ext in externals(path):
            # the plan: wire and core use wire.asgi's own ASGI aliases, no loop, no starlette
            if not (resolved and top(src) in ("wire", "core")):
                edges[src].add(("!" + ext, "runtime"))
        for imp_old, name, _line, kind in imports(path):
            dst = target(imp_old, name)
            mods.add(dst)
            if dst != src and f"{src} -> {dst}" not in resolved:
                edges[src].add((dst, kind))
    root = out_dir / "mcp_resume_asgi"
    for mod in sorted(mods):
        parts = mod.split(".") if mod != "__init__" else []
        if parts and (PKG / "/".join(parts) / "__init__.py").exists():
            parts = [*parts, "__init__"]  # a package (client, rest, store, tasks)
        d = root
        for part in parts[:-1]:
            d = d / part
            d.mkdir(parents=True, exist_ok=True)
            (d / "__init__.py").touch()
        f = (d / (parts[-1] + ".py")) if parts else root / "__init__.py"
        root.mkdir(parents=True, exist_ok=True)
        lines = ["from typing import TYPE_CHECKING"]
        for dst, kind in sorted(edges.get(mod, ())):
            stmt = f"import {dst[1:]}" if dst.startswith("!") else f"import mcp_resume_asgi.{dst}"
            lines.append(f"if TYPE_CHECKING:\n    {stmt}" if kind == "TC" else stmt)
        if f.exists() and f.name == "__init__.py" and f.read_text():
            continue
        f.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    if "--skeleton" in sys.argv:
        resolved = set(check()) | BACK_EDGES
        skeleton(
            Path(sys.argv[sys.argv.index("--skeleton") + 1]), resolved if "--resolved" in sys.argv else set()
        )
    else:
        bad = check()
        n = sum(len(v) for v in bad.values())
        print(f"{n} imports violate the target layers, on {len(bad)} module edges")
        for edge in sorted(bad):
            print(edge)
            for item in bad[edge]:
                print("   ", item)


def remapped_sccs(drop: set[str]) -> list[tuple[list[str], list[str]]]:
    """Cycles left in the target tree once the `drop` edges are resolved: (modules, edges)."""
    from plan.graph import sccs  # (Tarjan)

    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(PKG.rglob("*.py")):
        me_old = old_name(path)
        src = target(me_old)
        for imp_old, name, line, kind in imports(path):
            dst = target(imp_old, name)
            if dst != src and f"{src} -> {dst}" not in drop and src != "__init__":
                edges[(src, dst)].append(
                    f"{me_old}.py:{line}{' TC' if kind == 'TC' else ''}{' lazy' if kind == 'lazy' else ''} {imp_old}.{name or '*'}"
                )
    nodes = sorted({a for a, _ in edges} | {b for _, b in edges})
    out = []
    for comp in sccs(nodes, set(edges)):
        inner = [
            f"{a} -> {b}: {'; '.join(edges[(a, b)])}" for (a, b) in sorted(edges) if a in comp and b in comp
        ]
        out.append((comp, inner))
    return out
