"""Instructions per tools/call in process under callgrind (run.sh): the measured loop only. The head hold is
raised so that the path does not depend on how slow the run is (under valgrind every head timer fired).

`ICOUNT_WITHOUT=<part>[,<part>...]` counts the wrapper with parts of its work taken out, to see
what each costs (the difference from a count without it); the answers are still checked, but a
server so cut keeps nothing for a resume: a diagnostic, never a configuration. Parts: `store`
(the `MemoryStore`'s writes: opening, appending and completing streams do nothing), `cold`
(finished streams are not packed into their cold form), `timers` (`Scheduler.arm` arms
nothing), `caller` (the request's caller is not looked up again when the app reads it)."""

import asyncio
import ctypes
import os
import sys
from typing import Any

import mcp_resume_asgi.core.stream as _cs
from bench.apps import create_app
from bench.callcounts import _call, open_session, starlette_app


def _without(parts: set[str]) -> None:
    from mcp_resume_asgi.engine import hosted, scheduler
    from mcp_resume_asgi.store import memory, memory_cold

    unknown = parts - {"store", "cold", "timers", "caller"}
    if unknown:
        raise SystemExit(f"ICOUNT_WITHOUT: unknown parts {sorted(unknown)}")

    async def kept(*args: Any, **kwargs: Any) -> bool:
        return True

    async def nothing(*args: Any, **kwargs: Any) -> None:
        return None

    if "store" in parts:
        memory.MemoryStore.open_with = kept  # type: ignore[method-assign]
        memory.MemoryStore.append_final = kept  # type: ignore[method-assign]
        memory.MemoryStore.append = nothing  # type: ignore[method-assign]
    if "cold" in parts:
        memory_cold.ColdStreams.keep = lambda self, stream_id, entry: False  # type: ignore[method-assign]
    if "timers" in parts:
        scheduler.Scheduler.arm = lambda self, timer, deadline: None  # type: ignore[method-assign]
    if "caller" in parts:
        hosted.HostedStream.request_taken = lambda self: None  # type: ignore[method-assign]


if os.environ.get("ICOUNT_WITHOUT"):
    _without(set(os.environ["ICOUNT_WITHOUT"].split(",")))

_cs.HOLD_HEAD_S = (
    2.0  # the head waits for the first event, whatever the profiler's slowdown (same path every run)
)
cg = ctypes.CDLL("/tmp/icount/cg.so")


def call(i: int, tool: str) -> bytes:
    args = b'{"text":"hi"}'
    return (
        b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"%s","arguments":%s,"_meta":{"progressToken":%d}}}'
        % (i, tool.encode(), args, i)
    )


async def main(variant: str, tool: str, n: int) -> None:
    app = (
        create_app(variant, redis_url="redis://127.0.0.1:6391/0", redis_prefix="icount:")
        if variant == "wrapped_redis"
        else create_app(variant)
    )
    inner: Any = starlette_app(app)
    async with inner.router.lifespan_context(inner):
        session = await open_session(app)
        for i in range(1, 60):
            status, _, payload = await _call(app, call(i, tool), session)
            assert status == 200 and b'"result"' in payload, payload[:300]
        if tool == "progress":
            assert payload.count(b"notifications/progress") == 2, payload
        cg.cg_start()
        for i in range(1000, 1000 + n):
            status, _, payload = await _call(app, call(i, tool), session)
            assert status == 200 and b'"result"' in payload, payload[:200]
        cg.cg_stop()


asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
