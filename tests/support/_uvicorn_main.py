"""Child-process entry point used by :class:`tests.support.server.SubprocessServer`.

``python -m tests.support._uvicorn_main module:factory [--port N] [--factory-kwargs JSON] ...``

Binds 127.0.0.1:N (0 = free port), calls the factory, serves it with uvicorn
(lifespan "on"), prints ``MCP-TEST-SERVER-READY <port>`` on stdout once the
lifespan has started, and exits when stdin reaches EOF (the parent died or
closed it) or on SIGTERM/SIGINT (graceful, bounded by --graceful-shutdown).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import threading
import time

import uvicorn

from tests.support.server import HOST, READY_PREFIX, bind_socket, load_app


def _watch_stdin(server: uvicorn.Server, grace: float) -> None:
    """Exit when the parent goes away: stdin EOF -> graceful stop, then hard exit."""
    with contextlib.suppress(Exception):
        sys.stdin.read()
    server.should_exit = True
    time.sleep(grace + 5.0)
    os._exit(1)


async def _announce_when_started(server: uvicorn.Server, port: int) -> None:
    while not server.started:
        if server.should_exit:
            return
        await asyncio.sleep(0.01)
    sys.stdout.write(f"{READY_PREFIX} {port}\n")
    sys.stdout.flush()


async def _main(args: argparse.Namespace) -> None:
    app = load_app(args.target, json.loads(args.factory_kwargs))
    sock = bind_socket(HOST, args.port, reuse_port=args.reuse_port)
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        lifespan="on",
        log_level=args.log_level,
        access_log=False,
        timeout_graceful_shutdown=max(args.graceful_shutdown, 0.01),
        timeout_keep_alive=30,
    )
    server = uvicorn.Server(config)
    threading.Thread(target=_watch_stdin, args=(server, args.graceful_shutdown), daemon=True).start()
    announcer = asyncio.create_task(_announce_when_started(server, port))
    try:
        await server.serve(sockets=[sock])
    finally:
        announcer.cancel()
        sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("target", help="module:factory")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--factory-kwargs", default="{}")
    parser.add_argument("--graceful-shutdown", type=float, default=1.0)
    parser.add_argument("--log-level", default="warning")
    parser.add_argument("--reuse-port", action="store_true")
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
