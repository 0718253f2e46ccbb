"""What one `tools/call` costs in calls, bare vs wrapped: deterministic counts, in process.

`python -m bench.callcounts [--requests 200]` drives the benchmark's `MCPServer`
app (bare and wrapped) through plain ASGI calls - initialize once, then
`tools/call echo` N times, each read to its end - under cProfile, and prints per
request: tasks spawned, cancel scopes, events, event-loop iterations, copies, store
calls, and the cumulative time per `mcp_resume_asgi` function (inflated by the
profiler, but comparable). Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import sys
from typing import Any

from bench.apps import create_app
from bench.exchange import Exchange, post_scope

HEADERS = [
    (b"host", b"127.0.0.1:8000"),
    (b"accept", b"application/json, text/event-stream"),
    (b"content-type", b"application/json"),
    (b"mcp-protocol-version", b"2025-11-25"),
]
WATCH = {
    "tasks spawned (asyncio create_task)": ("base_events.py", "create_task"),
    "anyio task-group tasks": ("_backends/_asyncio.py", "_spawn"),
    "anyio cancel scopes": ("_backends/_asyncio.py", "__enter__"),  # CancelScope.__enter__ (and TaskGroup's)
    "asyncio.Event created": ("asyncio/locks.py", "__init__"),
    "event-loop iterations (_run_once)": ("base_events.py", "_run_once"),
    "timers scheduled (call_at)": ("base_events.py", "call_at"),
    "copy.copy": ("copy.py", "copy"),
    "MemoryStore.get_stream": ("store/memory.py", "get_stream"),
    "MemoryStore.update_stream": ("store/memory.py", "update_stream"),
}


def starlette_app(app: Any) -> Any:
    """The Starlette app inside the middleware's wrappers (it holds the lifespan)."""
    for _ in range(16):
        if hasattr(app, "router"):
            return app
        app = app.app
    raise TypeError("no Starlette app inside")


async def _call(
    app: Any, body: bytes, session: bytes | None, wait_s: float | None = 10
) -> tuple[int, dict[bytes, bytes], bytes]:
    """One POST to `/mcp` in process, as a task of its own (others may run meanwhile), read to its
    end; `wait_s` (None: none, as under valgrind) bounds the answer and the app's call each."""
    headers = [*HEADERS, (b"content-length", str(len(body)).encode())]
    if session:
        headers.append((b"mcp-session-id", session))
    exchange = Exchange(body)
    task = asyncio.ensure_future(app(post_scope(headers), exchange.receive, exchange.send))
    await asyncio.wait_for(exchange.done.wait(), wait_s)
    await asyncio.wait_for(task, wait_s)
    return exchange.status, exchange.headers, exchange.payload


INIT = (
    b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
    b'"capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}'
)


async def open_session(app: Any, wait_s: float | None = 10) -> bytes:
    """`initialize` and `notifications/initialized`, in process: the session's id."""
    status, headers, _ = await _call(app, INIT, None, wait_s)
    assert status == 200, status
    session = headers[b"mcp-session-id"]
    await _call(app, b'{"jsonrpc":"2.0","method":"notifications/initialized"}', session, wait_s)
    return session


async def _run(variant: str, requests: int) -> dict[str, Any]:
    app = create_app(variant)
    inner = starlette_app(app)
    async with inner.router.lifespan_context(inner):
        session = await open_session(app)

        def body(i: int) -> bytes:
            return (
                b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}'
                % i
            )

        for i in range(1, 21):  # warm-up
            await _call(app, body(i), session)
        profile = cProfile.Profile()
        profile.enable()
        for i in range(100, 100 + requests):
            status, _, payload = await _call(app, body(i), session)
            assert status == 200 and b'"result"' in payload, payload[:200]
        profile.disable()
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    counts = {name: 0.0 for name in WATCH}
    engine: dict[str, float] = {}
    total = 0.0
    for (filename, _line, func), (_cc, ncalls, tottime, cumtime, _callers) in stats.items():
        total += tottime
        for name, (suffix, fname) in WATCH.items():
            if filename.endswith(suffix) and func == fname:
                counts[name] += ncalls / requests
        if "mcp_resume_asgi" in filename:
            key = f"{filename.split('mcp_resume_asgi/')[-1]}:{func}"
            engine[key] = engine.get(key, 0.0) + 1e6 * cumtime / requests
    return {
        "variant": variant,
        "requests": requests,
        "profiled_us_per_request": 1e6 * total / requests,
        "per_request": counts,
        "engine_cumulative_us": dict(sorted(engine.items(), key=lambda kv: kv[1], reverse=True)[:20]),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.callcounts")
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args(argv)
    result = {v: asyncio.run(_run(v, args.requests)) for v in ("bare", "wrapped", "sdk_es")}
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
