"""`python -m bench.redis_commands VARIANT [N] [--port P] [--usec]`: Redis commands per `tools/call`, in process.

Drives the benchmark app (`bench.apps`, tool `progress`) through plain ASGI calls with the
middleware's own lifespan running (so the node machinery runs, as under a server) on a
`redis-server` on 127.0.0.1:6417 (`--port`; start one: `redis-server --port 6417 --save ""`),
and prints per call: the commands this process sent (each a round trip, counted where redis-py
writes a command to a connection, whichever path sent it), the commands Redis ran (its `INFO
commandstats`, the scripts' own included), the time Redis spent in the scripts (`EVALSHA`'s
`usec`, which includes the commands they run: summing every command's would count those twice),
the Redis server's CPU (`INFO cpu`, user + system: the commands, the scripts, the network) and
this process's CPU; `--usec` adds Redis's µs per call for each command. The counts are the
steady figures on a loaded machine; the CPU ones are not.
VARIANT: `wrapped_redis` or `persist_redis`; or `store`: the `RedisStore` writes of one `progress`
call, each alone and in a fixed order (`open_with` with the first event and the listing in the
index of running requests, `append` of the second, `append_final` of the answer unlisting it,
`detached`), N times: per write, the commands Redis ran inside it and its µs (no timing decides
how the writes batch, as it does through the app); then N more calls with no admin command
between their writes: Redis's server CPU and this process's CPU per call. (`usec` is Redis's wall
time in the command: a Redis that loses its CPU to other processes meanwhile counts more.)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import redis
import redis.asyncio.connection as redis_connection

from bench.apps import create_app
from bench.callcounts import _call, open_session
from bench.redis_profile import _progress

PORT = 6417
_sent: dict[str, int] = {}
_counting = False
_send = redis_connection.AbstractConnection.send_packed_command


async def _counted(self: Any, command: Any, *args: Any, **options: Any) -> None:
    """Counts a command as it goes out, packed (`*<n>\\r\\n$<len>\\r\\n<name>\\r\\n...`): what
    redis-py's commands and the store's own scripts (`redis_connections.pack`) both send."""
    if _counting:
        head = command if isinstance(command, bytes | str) else command[0]
        head = head.encode() if isinstance(head, str) else bytes(head)
        name = head.split(b"\r\n", 3)[2].decode().lower()
        _sent[name] = _sent.get(name, 0) + 1
    await _send(self, command, *args, **options)


def _server_cpu(admin: redis.Redis) -> float:
    cpu: dict[str, Any] = admin.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


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


async def run(variant: str, n: int, port: int = PORT, usec: bool = False) -> None:
    global _counting
    redis_connection.AbstractConnection.send_packed_command = _counted  # type: ignore[method-assign]
    admin = redis.Redis(port=port)
    app = create_app(variant, redis_url=f"redis://127.0.0.1:{port}/0", redis_prefix=f"cc{time.time()}:")
    async with lifespan(app):
        session = await open_session(app)
        for i in range(1, 60):
            await _call(app, _progress(i), session)
        await asyncio.sleep(0.3)
        admin.config_resetstat()
        server_started = _server_cpu(admin)
        started = time.process_time()
        _counting = True
        for i in range(1000, 1000 + n):
            status, _, payload = await _call(app, _progress(i), session)
            assert status == 200 and b'"result"' in payload, payload[:300]
        cpu = time.process_time() - started
        _counting = False
        server_cpu = _server_cpu(admin) - server_started
        stats: dict[str, Any] = admin.info("commandstats")
    ran = {
        k.removeprefix("cmdstat_"): v for k, v in stats.items() if k not in ("cmdstat_config", "cmdstat_info")
    }
    print(
        f"{variant}: sent per call {sum(_sent.values()) / n:.2f}",
        {k: round(v / n, 2) for k, v in sorted(_sent.items())},
    )
    scripts = sum(v["usec"] for k, v in ran.items() if k in ("evalsha", "eval", "fcall"))
    print(
        f"{variant}: Redis ran per call {sum(v['calls'] for v in ran.values()) / n:.1f}, "
        f"in scripts {scripts / n:.0f} µs, Redis server CPU {1e6 * server_cpu / n:.0f} µs, "
        f"process CPU {1e6 * cpu / n:.0f} µs",
        {k: round(v["calls"] / n, 2) for k, v in sorted(ran.items())},
    )
    if usec:
        print(f"{variant}: Redis µs per call", {k: round(v["usec"] / n, 1) for k, v in sorted(ran.items())})


async def run_store(n: int, port: int = PORT) -> None:
    """The store's writes of one call, each measured alone (`VARIANT` `store`)."""
    from mcp_resume_asgi.store import RedisStore, StreamKind, StreamMeta
    from mcp_resume_asgi.store.base import Listing

    admin = redis.Redis(port=port)
    store = RedisStore(f"redis://127.0.0.1:{port}/0", prefix=f"cs{time.time()}:")
    caps = {"max_events": 10_000, "max_bytes": 16 << 20}
    payload = b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}'
    totals: dict[str, dict[str, float]] = {}

    async def measured(name: str, write: Any) -> None:
        admin.config_resetstat()
        await write
        stats: dict[str, Any] = admin.info("commandstats")
        row = totals.setdefault(name, {"commands": 0.0, "usec": 0.0})
        for key, value in stats.items():
            if key == "cmdstat_evalsha":
                row["usec"] += value["usec"]
            elif key not in ("cmdstat_config|resetstat", "cmdstat_info"):
                row["commands"] += value["calls"]

    async def one_call(sid: str, write: Any) -> None:
        meta = StreamMeta(
            stream_id=sid,
            kind=StreamKind.REQUEST,
            session_id="sess",
            principal="p",
            protocol_version="2025-11-25",
            path="/mcp",
        )
        listing = Listing(index="running", expires_at=time.time() + 600, cap=10_000)
        await write("open_with", store.open_with(meta, 600, [(1, payload)], listing=listing, **caps))
        await write("append", store.append(sid, [(2, payload)], **caps))
        await write(
            "append_final",
            store.append_final(sid, [(3, payload)], final_seq=3, retain_s=300, unlist="running", **caps),
        )
        await write("detached", store.detached(sid, 0, last_contact=time.time(), delivered_seq=3))

    async def plain(name: str, write: Any) -> None:
        await write

    try:
        for i in range(20):  # warm: the scripts loaded, the connection open
            await one_call(f"w{i}", plain)
        for i in range(n):
            await one_call(f"c{i}", measured)
        server_started, started = _server_cpu(admin), time.process_time()
        for i in range(n):  # no admin command between the writes: Redis's CPU is theirs
            await one_call(f"d{i}", plain)
        server_cpu, cpu = _server_cpu(admin) - server_started, time.process_time() - started
    finally:
        await store.clear()
        await store.aclose()
    for name, row in totals.items():
        print(f"store {name}: Redis ran {row['commands'] / n:.1f} commands inside, {row['usec'] / n:.1f} µs")
    print(
        f"store, the four: {sum(r['commands'] for r in totals.values()) / n:.1f} commands, "
        f"{sum(r['usec'] for r in totals.values()) / n:.1f} µs; Redis server CPU {1e6 * server_cpu / n:.0f} µs, "
        f"process CPU {1e6 * cpu / n:.0f} µs"
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.redis_commands")
    parser.add_argument("variant", choices=("wrapped_redis", "persist_redis", "store"))
    parser.add_argument("n", type=int, nargs="?", default=300)
    parser.add_argument("--port", type=int, default=PORT)
    parser.add_argument("--usec", action="store_true", help="Redis's µs per call for each command")
    args = parser.parse_args()
    if args.variant == "store":
        asyncio.run(run_store(args.n, args.port))
    else:
        asyncio.run(run(args.variant, args.n, args.port, args.usec))


if __name__ == "__main__":
    main()
