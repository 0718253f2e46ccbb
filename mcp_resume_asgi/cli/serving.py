"""`mcp-resume proxy` and `mcp-resume serve`: an app, wrapped by `resumable`, under uvicorn.

Both build the same wrapper from the same options (store, secret, policy, features) and
differ in the app: the proxy (`mcp_resume_asgi.proxy`) in front of an upstream URL, or an app
found by its import string. The server binds its socket first, so port 0 picks a free one,
and says where it serves, one line on stdout, once the app has started. Shutdown is
uvicorn's: SIGTERM or SIGINT drains the middleware (`ResumeMiddleware.drain`).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import socket
import sys
from typing import Any

from mcp_resume_asgi.api import resumable
from mcp_resume_asgi.cli.options import OptionError, parse_pairs
from mcp_resume_asgi.policy import Policy
from mcp_resume_asgi.store.urls import store_from_url
from mcp_resume_asgi.wire.asgi import ASGIApp, Message, Receive, Scope, Send

__all__ = ["Announced", "AppNotFound", "find_app", "run", "wrapped_app"]

logger = logging.getLogger(__name__)

#: The first words of the line said once the server accepts requests.
SERVING = "mcp-resume: serving"


class AppNotFound(ValueError):
    """An import string that names no ASGI app (nor an object that makes one)."""


def find_app(target: str, *, factory: bool = False) -> ASGIApp:
    """The app `module:attribute` names: an ASGI app as it is; an `MCPServer`/FastMCP object
    (anything with `streamable_http_app()`) through that method; with `factory`, the result of
    calling the attribute first."""
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise AppNotFound(f"{target!r}: expected module:attribute, e.g. my_server:app or my_server:mcp")
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")  # the working directory, as `python -m` and uvicorn do
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise AppNotFound(f"{target!r}: cannot import {module_name!r}: {exc}") from exc
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise AppNotFound(f"{target!r}: {module_name!r} has no attribute {attribute!r}") from None
    if factory:
        if not callable(found):
            raise AppNotFound(f"{target!r}: --factory, but {attribute!r} is not callable")
        found = found()
    make = getattr(found, "streamable_http_app", None)
    if callable(make):
        found = make()
    if not callable(found):
        raise AppNotFound(
            f"{target!r} is a {type(found).__name__}, not an ASGI app (nor an MCPServer/FastMCP object)"
        )
    return found  # type: ignore[no-any-return]


def wrapped_app(app: ASGIApp, args: argparse.Namespace, path: str) -> ASGIApp:
    """`resumable(app, ...)` as the command line's options say."""
    policy_options = parse_pairs(args.policy or [], "--policy")
    try:
        policy = Policy(**policy_options)
    except TypeError as exc:
        raise OptionError(f"--policy: {exc} (see docs/reference/options.md)") from None
    except ValueError as exc:
        raise OptionError(f"--policy: {exc}") from None
    store_options: dict[str, Any] = {}
    if args.prefix:
        if not args.store.strip().lower().startswith(("redis://", "rediss://")):
            raise OptionError("--prefix is a Redis key prefix: it needs a redis:// or rediss:// --store")
        store_options["prefix"] = args.prefix
    try:
        store = store_from_url(args.store, **store_options)
    except (ValueError, ImportError) as exc:
        raise OptionError(f"--store: {exc}") from None
    options: dict[str, Any] = {"path": path, "node_timeout_s": args.node_timeout_s, "drain_s": args.drain_s}
    options.update(parse_pairs(args.option or [], "--option"))
    try:
        return resumable(
            app,
            policy=policy,
            store=store,
            secret=args.secret or None,
            encryption_key=args.encryption_key or None,
            tasks=args.tasks,
            rest=args.rest,
            resumable_requests=args.resumable_requests,
            resume_tokens=args.resume_tokens,
            **options,
        )
    except (TypeError, ValueError, ImportError) as exc:
        raise OptionError(str(exc)) from None


class Announced:
    """Says where the server serves once the app's lifespan has started (one line, stdout)."""

    def __init__(self, app: ASGIApp, line: str) -> None:
        self.app = app
        self.line = line

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def announcing(message: Message) -> None:
            await send(message)
            if message["type"] == "lifespan.startup.complete":
                sys.stdout.write(self.line + "\n")
                sys.stdout.flush()

        await self.app(scope, receive, announcing)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: a free one), IPv6 if the host is one, its
    connections without Nagle's delay."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY only on accepted sockets whose proto says TCP,
    # and a socket made with proto 0 passes 0 on. Without it every SSE answer (its head, then its
    # events) waits ~40 ms on Nagle and the peer's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OptionError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def run(app: ASGIApp, args: argparse.Namespace, path: str, what: str) -> None:
    """Serve `app` under uvicorn until SIGTERM/SIGINT."""
    try:
        import uvicorn
    except ImportError:
        raise OptionError("serving needs uvicorn: pip install 'mcp-resume-asgi[cli]'") from None
    sock = bind(args.host, args.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    line = f"{SERVING} {what} at http://{shown}:{port}{path}"
    config = uvicorn.Config(
        Announced(app, line),
        lifespan="on",
        log_level=args.log_level,
        access_log=args.access_log,
        timeout_graceful_shutdown=max(args.drain_s + 1.0, 1.0),
        proxy_headers=False,
    )
    server = uvicorn.Server(config)
    server.run(sockets=[sock])
