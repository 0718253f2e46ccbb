"""Instructions per tools/call in process under callgrind (run_concurrent.sh), <c> sessions calling at once;
no timeouts (valgrind is slow). `wrapped_redis` needs a Redis on 127.0.0.1:6391, as `icount.py`."""

import asyncio
import ctypes
import sys
import time
from typing import Any

import mcp_resume_asgi.core.stream as _cs
from bench.apps import create_app
from bench.callcounts import _call, open_session, starlette_app

_cs.HOLD_HEAD_S = 2.0
cg = ctypes.CDLL("/tmp/icount/cg.so")


def call(i: int, tool: str) -> bytes:
    return (
        b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"%s","arguments":{"text":"hi"},'
        b'"_meta":{"progressToken":%d}}}' % (i, tool.encode(), i)
    )


async def main(variant: str, tool: str, n: int, c: int) -> None:
    app = (
        create_app(variant, redis_url="redis://127.0.0.1:6391/0", redis_prefix=f"icc{time.time()}:")
        if variant == "wrapped_redis"
        else create_app(variant)
    )
    inner: Any = starlette_app(app)
    async with inner.router.lifespan_context(inner):
        sessions = [await open_session(app, wait_s=None) for _ in range(c)]

        async def client(k: int, start: int, count: int) -> None:
            for i in range(start, start + count):
                status, _, payload = await _call(app, call(i, tool), sessions[k], wait_s=None)
                assert status == 200 and b'"result"' in payload, payload[:300]

        await asyncio.gather(*(client(k, 1 + k * 1000, 3) for k in range(c)))
        cg.cg_start()
        await asyncio.gather(*(client(k, 100000 + k * 1000, n // c) for k in range(c)))
        cg.cg_stop()


asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
