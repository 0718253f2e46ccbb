"""Child process: serve one variant of the benchmark app under uvicorn on 127.0.0.1.

``python -m bench.serve VARIANT [--cpu N] [--redis-url URL --redis-prefix P]`` binds a free loopback port, prints
``READY <port>`` once the app's lifespan has started, and exits on SIGTERM
(uvicorn's graceful shutdown) or when its parent dies (Linux: PR_SET_PDEATHSIG).
No helper thread: the profiles of this process show only the server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import sys

import uvicorn

from bench.apps import VARIANTS, create_app


def _die_with_parent() -> None:
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


async def _main(variant: str, redis_url: str, redis_prefix: str) -> None:
    # proto=IPPROTO_TCP matters: asyncio only sets TCP_NODELAY on accepted sockets whose
    # proto is IPPROTO_TCP, and a socket made with proto 0 passes that on. Without
    # TCP_NODELAY every SSE answer (headers, then a body chunk) stalls ~40 ms on
    # Nagle + delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        create_app(variant, redis_url=redis_url, redis_prefix=redis_prefix),
        lifespan="on",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=1,
        timeout_keep_alive=60,
        backlog=1024,
    )
    server = uvicorn.Server(config)

    async def announce() -> None:
        while not server.started:  # uvicorn offers no event for it  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        sys.stdout.write(f"READY {port}\n")
        sys.stdout.flush()

    task = asyncio.create_task(announce())
    try:
        await server.serve(sockets=[sock])
    finally:
        task.cancel()
        sock.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("variant", choices=VARIANTS)
    parser.add_argument("--cpu", type=int, default=None, help="pin this process to one CPU")
    parser.add_argument("--redis-url", default="", help="wrapped_redis: the Redis to use")
    parser.add_argument("--redis-prefix", default="", help="wrapped_redis: the key prefix to use")
    args = parser.parse_args()
    _die_with_parent()
    if args.cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    asyncio.run(_main(args.variant, args.redis_url, args.redis_prefix))


if __name__ == "__main__":
    main()
