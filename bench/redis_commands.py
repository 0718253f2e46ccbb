"""`python -m bench.redis_commands VARIANT [N]`: Redis commands per `tools/call`, in process.

Drives the benchmark app (`bench.apps`, tool `progress`) through plain ASGI calls with the
middleware's own lifespan running (so the node machinery runs, as under a server) on a
`redis-server` on 127.0.0.1:6417 (start one: `redis-server --port 6417 --save ""`), and
prints per call: the commands this process sent (redis-py's `execute_command`, each a round
trip), the commands Redis ran (its `INFO commandstats`, scripts' included), Redis's CPU and
this process's CPU. The counts are the steady figures on a loaded machine; the CPU ones are not.
VARIANT: `wrapped_redis` or `persist_redis`.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import redis
import redis.asyncio.client as redis_client

from bench.apps import create_app
from bench.callcounts import _call, open_session
from bench.redis_profile import _progress

PORT = 6417
_sent: dict[str, int] = {}
_counting = False
_execute = redis_client.Redis.execute_command


async def _counted(self: Any, *args: Any, **options: Any) -> Any:
    if _counting:
        name = str(args[0]).lower()
        _sent[name] = _sent.get(name, 0) + 1
    return await _execute(self, *args, **options)


@contextlib.asynccontextmanager
async def lifespan(app: Any) -> AsyncIterator[None]:
    """The app's ASGI lifespan (the middleware's: its node runs), started and, after, shut down."""
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    started = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "lifespan.startup.complete":
            started.set()
        elif message["type"] == "lifespan.startup.failed":
            raise RuntimeError(message)

    await inbox.put({"type": "lifespan.startup"})
    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    task = asyncio.ensure_future(app(scope, inbox.get, send))
    await asyncio.wait_for(started.wait(), 10)
    try:
        yield
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        await asyncio.wait_for(task, 10)


async def run(variant: str, n: int) -> None:
    global _counting
    redis_client.Redis.execute_command = _counted  # type: ignore[method-assign]
    admin = redis.Redis(port=PORT)
    app = create_app(variant, redis_url=f"redis://127.0.0.1:{PORT}/0", redis_prefix=f"cc{time.time()}:")
    async with lifespan(app):
        session = await open_session(app)
        for i in range(1, 60):
            await _call(app, _progress(i), session)
        await asyncio.sleep(0.3)
        admin.config_resetstat()
        started = time.process_time()
        _counting = True
        for i in range(1000, 1000 + n):
            status, _, payload = await _call(app, _progress(i), session)
            assert status == 200 and b'"result"' in payload, payload[:300]
        cpu = time.process_time() - started
        _counting = False
        stats: dict[str, Any] = admin.info("commandstats")
    ran = {
        k.removeprefix("cmdstat_"): v for k, v in stats.items() if k not in ("cmdstat_config", "cmdstat_info")
    }
    print(
        f"{variant}: sent per call {sum(_sent.values()) / n:.2f}",
        {k: round(v / n, 2) for k, v in sorted(_sent.items())},
    )
    print(
        f"{variant}: Redis ran per call {sum(v['calls'] for v in ran.values()) / n:.1f}, "
        f"Redis CPU {sum(v['usec'] for v in ran.values()) / n:.0f} µs, process CPU {1e6 * cpu / n:.0f} µs",
        {k: round(v["calls"] / n, 2) for k, v in sorted(ran.items())},
    )


if __name__ == "__main__":
    asyncio.run(run(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 300))
