"""Child-process entry point used by :class:`tests.support.server.HypercornServer`.

``python -m tests.support._hypercorn_main module:factory [--port N] [--factory-kwargs JSON] ...``

The hypercorn counterpart of ``_uvicorn_main``: serves the app built by the factory with
hypercorn on asyncio (`hypercorn.asyncio.serve` without a shutdown trigger: hypercorn's
own SIGTERM/SIGINT handlers, as in production) on 127.0.0.1:N, prints
``MCP-TEST-SERVER-READY <port>`` once the app's lifespan has started, and exits on
SIGTERM/SIGINT or when stdin reaches EOF (the parent died or closed it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
import time
from typing import Any

from hypercorn.asyncio import serve
from hypercorn.config import Config
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tests.support.server import HOST, READY_PREFIX, bind_socket, load_app


def _announcing(app: ASGIApp, port: int) -> ASGIApp:
    """The app, printing the ready line once its lifespan startup completed."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await app(scope, receive, send)
            return

        async def announcing_send(message: Message) -> None:
            await send(message)
            if message["type"] == "lifespan.startup.complete":
                sys.stdout.write(f"{READY_PREFIX} {port}\n")
                sys.stdout.flush()

        await app(scope, receive, announcing_send)

    return wrapped


def _watch_stdin(grace: float) -> None:
    with contextlib.suppress(OSError):
        while os.read(0, 4096):
            pass
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace + 5.0)
    os._exit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("target", help="module:factory")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--factory-kwargs", default="{}")
    parser.add_argument("--graceful-shutdown", type=float, default=1.0)
    parser.add_argument("--log-level", default="warning")
    parser.add_argument("--reuse-port", action="store_true")
    args = parser.parse_args()
    app = load_app(args.target, json.loads(args.factory_kwargs))
    sock = bind_socket(HOST, args.port)
    port = sock.getsockname()[1]
    config = Config()
    config.bind = [f"fd://{sock.fileno()}"]
    config.graceful_timeout = args.graceful_shutdown
    config.loglevel = args.log_level.upper()
    threading.Thread(target=_watch_stdin, args=(args.graceful_shutdown,), daemon=True).start()
    served: Any = _announcing(app, port)
    asyncio.run(serve(served, config))


if __name__ == "__main__":
    main()
