"""Instructions per script call (`EVALSHA` of `return 1`) by way of the client, in process under callgrind:
what a Redis round trip costs this process before any work of the store's.

    valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no --callgrind-out-file=/tmp/icount/rc.out \\
      /work/main/.venv/bin/python bench/icount/redis_call.py KIND 2000 TASKS    (then Ir / 2000)

KIND: `blocking` (redis-py's `BlockingConnectionPool`, through `Redis.execute_command`), `plain` (its
`ConnectionPool`), `turn` (`TurnPool`, through `execute_command`), `store` (`register_script` on a `TurnPool`
client: the store's own path), `raw` (one connection, `send_command` and `read_response`: no pool at all).
TASKS: how many tasks call at once. Needs a Redis on 127.0.0.1:6391 and /tmp/icount/cg.so (`run.sh` builds it).
"""

import asyncio
import ctypes
import sys
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from mcp_resume_asgi.store.redis_connections import TurnPool, register_script

URL = "redis://127.0.0.1:6391/0"
RECONNECT: dict[str, Any] = {
    "retry": Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
    "retry_on_error": [RedisConnectionError],
}


async def main(kind: str, n: int, tasks: int) -> None:
    cg = ctypes.CDLL("/tmp/icount/cg.so")
    if kind == "blocking":
        pool: Any = aioredis.BlockingConnectionPool.from_url(
            URL, max_connections=64, timeout=None, **RECONNECT
        )
    elif kind == "plain":
        pool = aioredis.ConnectionPool.from_url(URL, max_connections=64, **RECONNECT)
    else:
        pool = TurnPool.from_url(URL, max_connections=64, **RECONNECT)
    client = aioredis.Redis(connection_pool=pool)
    script: Any = (
        register_script(client, "return 1") if kind == "store" else client.register_script("return 1")
    )
    await script(keys=["k"], args=["a", "b", 3])  # loaded
    connection = await pool.get_connection() if kind == "raw" else None

    async def one() -> Any:
        if connection is not None:
            await connection.send_command("EVALSHA", script.sha, 1, "k", "a", "b", 3)
            return await connection.read_response()
        return await script(keys=["k"], args=["a", "b", 3])

    async def worker(count: int) -> None:
        for _ in range(count):
            await one()

    await asyncio.gather(*(worker(50) for _ in range(tasks)))
    cg.cg_start()
    await asyncio.gather(*(worker(n // tasks) for _ in range(tasks)))
    cg.cg_stop()
    await client.aclose()


asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
