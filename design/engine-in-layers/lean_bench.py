"""CPU per call in process, interleaved: bare, wrapped (main), the lean prototype, the SDK's store.

    .venv/bin/python -m plan.lean_bench [--requests 1000] [--rounds 5] [--tool echo|progress]
        [--variants bare,wrapped,lean,sdk_es]

Same driver as bench.inprocess (plain ASGI calls, no server), the variants interleaved
round by round, process CPU time (not wall) per call, medians. Also checks that the lean
variant's answer carries the priming event, signed ids and the Link header.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from bench.apps import create_app
from bench.callcounts import _call, starlette_app
from bench.inprocess import INIT


def _body(i: int, tool: str) -> bytes:
    meta = b',"_meta":{"progressToken":%d}' % i if tool == "progress" else b""
    return (
        b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"%s","arguments":{"text":"hi"}%s}}'
        % (i, tool.encode(), meta)
    )


GC: dict[str, list[float]] = {}


class FakeMCP:
    """A pure-ASGI stand-in for the SDK's server (`fake:` variants): it answers a tools/call the
    way the SDK does - SSE start, `progress` notifications, the result event, an empty end, with a
    disconnect listener on `receive` meanwhile - at ~1/50 of the SDK's CPU, so that what a wrapper
    adds per call stands out of the noise of a loaded machine."""

    def __init__(self) -> None:
        self.router = self  # (the benchmark driver enters `router.lifespan_context`)

    def lifespan_context(self, app: Any) -> Any:
        import contextlib

        @contextlib.asynccontextmanager
        async def nothing() -> Any:
            yield

        return nothing()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            m = await receive()
            body += m.get("body", b"")
            if not m.get("more_body", False):
                break
        msg = json.loads(body)
        if "id" not in msg:
            await send({"type": "http.response.start", "status": 202, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        if msg["method"] == "initialize":
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"mcp-session-id", b"s1")],
                }
            )
            await send({"type": "http.response.body", "body": b'{"jsonrpc":"2.0","id":0,"result":{}}'})
            return

        async def listen() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        listener = asyncio.get_running_loop().create_task(listen())
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-store"),
                    (b"mcp-session-id", b"s1"),
                ],
            }
        )
        if msg["params"]["name"] == "progress":
            for step in (1, 2):
                note = (
                    b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":%d,"progress":%d}}'
                    % (msg["id"], step)
                )
                await send(
                    {
                        "type": "http.response.body",
                        "body": b"event: message\r\ndata: " + note + b"\r\n\r\n",
                        "more_body": True,
                    }
                )
        result = (
            b'{"jsonrpc":"2.0","id":%d,"result":{"content":[{"text":"hi","type":"text"}],"isError":false}}'
            % msg["id"]
        )
        await send(
            {
                "type": "http.response.body",
                "body": b"event: message\r\ndata: " + result + b"\r\n\r\n",
                "more_body": True,
            }
        )
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        listener.cancel()
        try:
            await listener
        except asyncio.CancelledError:
            pass


def make(variant: str) -> Any:
    if variant.startswith("fake:"):
        return _make(variant[5:], FakeMCP)
    return _make(variant, lambda: create_app("bare"))


def _make(variant: str, bare: Any) -> Any:
    from mcp_resume_asgi import Policy, resumable

    if variant == "wrapped" and bare is not None:
        return resumable(bare(), policy=Policy())
    if variant == "bare":
        return bare()
    if variant.startswith("bare"):
        return bare()
    if variant.startswith("lean"):
        from plan.lean import LeanMiddleware

        return LeanMiddleware(bare(), flags=variant)
    if variant == "null":
        inner = bare()

        async def null(scope: Any, receive: Any, send: Any) -> None:
            await inner(scope, receive, send)

        null.app = inner  # type: ignore[attr-defined]
        return null
    if variant == "tee":
        inner = bare()

        async def tee(scope: Any, receive: Any, send: Any) -> None:
            async def tee_send(message: Any) -> None:
                await send(message)

            await inner(scope, receive, tee_send)

        tee.app = inner  # type: ignore[attr-defined]
        return tee
    return create_app(variant)


async def cpu_us(variant: str, requests: int, tool: str, check: bool = False) -> float:
    app = make(variant)
    inner: Any = starlette_app(app)
    async with inner.router.lifespan_context(inner):
        status, headers, _ = await _call(app, INIT, None)
        assert status == 200, status
        session = headers[b"mcp-session-id"]
        await _call(app, b'{"jsonrpc":"2.0","method":"notifications/initialized"}', session)
        for i in range(1, 200):
            await _call(app, _body(i, tool), session)
        if check:
            status, headers, payload = await _call(app, _body(999, tool), session)
            print(variant, status, headers.get(b"link"), payload[:400], file=sys.stderr)
        gc_spent = [0.0, 0.0, 0]

        def on_gc(phase: str, info: dict[str, Any]) -> None:
            if phase == "start":
                gc_spent[1] = time.process_time()
            else:
                gc_spent[0] += time.process_time() - gc_spent[1]
                gc_spent[2] += 1

        gc.callbacks.append(on_gc)
        started = time.process_time()
        for i in range(1000, 1000 + requests):
            status, _, payload = await _call(app, _body(i, tool), session)
            assert status == 200 and b'"result"' in payload, payload[:300]
        spent = time.process_time() - started
        gc.callbacks.remove(on_gc)
        GC[variant].append(1e6 * gc_spent[0] / requests)
        if "lean" in variant and app.engine.store_kind == "memory":
            engine = app.engine
            await asyncio.sleep(0.01)
            assert not engine.tasks, len(engine.tasks)  # every app task ended
            assert engine.store.stream_count >= requests, engine.store.stream_count
        return 1e6 * spent / requests


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tool", default="echo")
    ap.add_argument("--variants", default="bare,wrapped,lean,sdk_es")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--one", default="", help="(internal) measure one variant in this process")
    ap.add_argument("--same-process", action="store_true", help="all runs in one process (order effects)")
    a = ap.parse_args()
    if a.one:
        GC[a.one] = []
        us = asyncio.run(cpu_us(a.one, a.requests, a.tool, a.check))
        print(json.dumps([us, GC[a.one][0]]))
        return
    variants = a.variants.split(",")
    runs: dict[str, list[float]] = {v: [] for v in variants}
    GC.update({v: [] for v in variants})
    load = os.getloadavg()
    for _ in range(a.rounds):
        for v in variants:
            if a.same_process:
                runs[v].append(asyncio.run(cpu_us(v, a.requests, a.tool, a.check)))
                continue
            # A fresh process per run: what one variant leaves in the heap must not bill the next.
            cmd = [
                sys.executable,
                "-m",
                "plan.lean_bench",
                "--one",
                v,
                "--requests",
                str(a.requests),
                "--tool",
                a.tool,
            ]
            us, gc_us = json.loads(subprocess.run(cmd, check=True, capture_output=True).stdout)
            runs[v].append(us)
            GC[v].append(gc_us)
    med = {v: statistics.median(xs) for v, xs in runs.items()}
    out = {
        "tool": a.tool,
        "loadavg_before_after": [round(load[0], 2), round(os.getloadavg()[0], 2)],
        "lean_env": {k: v for k, v in os.environ.items() if k.startswith("LEAN_")},
        "cpu_us_per_call_median": {v: round(m, 1) for v, m in med.items()},
        "over_bare_us": {v: round(m - med["bare"], 1) for v, m in med.items() if "bare" in med},
        "ratio_to_bare": {v: round(m / med["bare"], 3) for v, m in med.items() if "bare" in med},
        "gc_us_per_call_median": {v: round(statistics.median(xs), 1) for v, xs in GC.items()},
        "runs": {v: [round(x, 1) for x in xs] for v, xs in runs.items()},
    }
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
