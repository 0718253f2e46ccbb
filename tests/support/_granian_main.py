"""Child-process entry point used by :class:`tests.support.server.GranianServer`.

``python -m tests.support._granian_main module:factory [--port N] [--factory-kwargs JSON] ...``

The granian counterpart of ``_uvicorn_main``: serves the app built by the factory
with granian (ASGI interface, one worker process, lifespan on) on 127.0.0.1:N (0 =
a free port), prints ``MCP-TEST-SERVER-READY <port>`` on stdout once the worker
answers HTTP, and stops gracefully on SIGTERM/SIGINT or when stdin reaches EOF
(the parent died or closed it).

Granian imports the app in its worker process from an import string, so the
worker builds it through :func:`create_app`, which reads the real target and its
keyword arguments from the environment this process passes down.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import signal
import sys
import threading
import time

from starlette.types import ASGIApp

from tests.support.server import HOST, READY_PREFIX, bind_socket, load_app

TARGET_ENV = "MCP_TEST_GRANIAN_TARGET"
KWARGS_ENV = "MCP_TEST_GRANIAN_FACTORY_KWARGS"


def create_app() -> ASGIApp:
    """Granian's factory, called in the worker: the app named by the parent."""
    return load_app(os.environ[TARGET_ENV], json.loads(os.environ.get(KWARGS_ENV, "{}")))


def _announce_when_answering(port: int, timeout: float = 30.0) -> None:
    """Print the ready line once the worker answers an HTTP request (any status)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        connection = http.client.HTTPConnection(HOST, port, timeout=1.0)
        try:
            connection.request("GET", "/__ready__")
            connection.getresponse().read()
        except OSError:
            time.sleep(0.05)
            continue
        finally:
            connection.close()
        sys.stdout.write(f"{READY_PREFIX} {port}\n")
        sys.stdout.flush()
        return


def _watch_stdin(grace: float) -> None:
    """Exit when the parent goes away: stdin EOF -> graceful stop, then hard exit.

    Reads the file descriptor, not `sys.stdin`: granian forks its worker, and a fork
    while this thread holds `sys.stdin`'s lock leaves the worker stuck on it for good.
    """
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
    args = parser.parse_args()

    from granian import Granian
    from granian.constants import Interfaces
    from granian.log import LogLevels

    port = args.port
    if port == 0:  # granian binds by itself: pick a free port (released just before)
        sock = bind_socket(HOST, 0)
        port = sock.getsockname()[1]
        sock.close()
    os.environ[TARGET_ENV] = args.target
    os.environ[KWARGS_ENV] = args.factory_kwargs
    threading.Thread(target=_announce_when_answering, args=(port,), daemon=True).start()
    threading.Thread(target=_watch_stdin, args=(args.graceful_shutdown,), daemon=True).start()
    Granian(
        "tests.support._granian_main:create_app",  # not __name__: that is "__main__" here
        address=HOST,
        port=port,
        interface=Interfaces.ASGI,
        workers=1,
        websockets=False,
        factory=True,
        log_level=LogLevels(args.log_level),
        workers_kill_timeout=max(1, round(args.graceful_shutdown)),
    ).serve()


if __name__ == "__main__":
    main()
