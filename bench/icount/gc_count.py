"""GC-tracked objects per tools/call, in process (icount.py's harness, without callgrind).

    PYTHONPATH=<tree> python bench/icount/gc_count.py <variant> <tool> <n>    e.g. wrapped echo 2000

Prints, per call: the tracked objects left over with the collector off (the net change of its
generation-0 count), the cyclic garbage a collection then finds, and with the collector on, the
collections per 1000 calls."""

import asyncio
import gc
import sys
from typing import Any

import mcp_resume_asgi.core.stream as _cs
from bench.apps import create_app
from bench.callcounts import _call, open_session, starlette_app

_cs.HOLD_HEAD_S = 2.0  # (as icount.py: the same path whatever the machine's speed)


def call(i: int, tool: str) -> bytes:
    """The call icount.py measures."""
    return (
        b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"%s","arguments":{"text":"hi"},'
        b'"_meta":{"progressToken":%d}}}' % (i, tool.encode(), i)
    )


async def main(variant: str, tool: str, n: int) -> None:
    app = create_app(variant)
    inner: Any = starlette_app(app)
    async with inner.router.lifespan_context(inner):
        session = await open_session(app)
        for i in range(1, 200):
            await _call(app, call(i, tool), session)
        await asyncio.sleep(0.3)
        gc.collect()
        gc.disable()
        before = gc.get_count()[0]
        for i in range(1000, 1000 + n):
            status, _, payload = await _call(app, call(i, tool), session)
            assert status == 200 and b'"result"' in payload, payload[:200]
        net = gc.get_count()[0] - before
        cyclic = gc.collect()
        gc.enable()
        collections = 0

        def counted(phase: str, info: dict[str, Any]) -> None:
            nonlocal collections
            if phase == "start":
                collections += 1

        gc.callbacks.append(counted)
        for i in range(5000, 5000 + n):
            await _call(app, call(i, tool), session)
        gc.callbacks.remove(counted)
        print(
            f"{variant} {tool}: tracked left/call {net / n:.2f}, cyclic garbage/call {cyclic / n:.2f}, "
            f"collections/1000 calls {1000 * collections / n:.1f}"
        )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
