"""Instructions per tools/call in process under callgrind (run.sh): the measured loop only. The head hold is
raised so that the path does not depend on how slow the run is (under valgrind every head timer fired)."""

import asyncio
import ctypes
import sys
from typing import Any

import mcp_resume_asgi.core.stream as _cs
from bench.apps import create_app
from bench.callcounts import _call, open_session, starlette_app

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
