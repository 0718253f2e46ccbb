"""`mcp-resume`: the command line, a thin shell over the public API.

* `mcp-resume proxy --upstream URL`: any MCP server reachable over HTTP, in any language,
  behind the middleware (`mcp_resume_asgi.proxy`), served under uvicorn at the upstream
  URL's own path;
* `mcp-resume serve module:app`: a Python app found by import string (an ASGI app, or an
  `MCPServer`/FastMCP object), wrapped and served;
* `mcp-resume inspect --store URL`: what a store holds, read-only.

Every option also comes from the environment (`options.py`). Errors in what was given (a
bad URL, an app not found, a policy the `Policy` class refuses) end the command with one
line on stderr and exit status 2. It needs the `cli` extra (uvicorn, httpx; httptools and uvloop, which
uvicorn picks up).
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import socket
import sys
from collections.abc import Sequence

from mcp_resume_asgi.cli.options import OptionError, with_environment
from mcp_resume_asgi.http.middleware import DEFAULT_DRAIN_S

__all__ = ["build_parser", "main"]

logger = logging.getLogger(__name__)

_DESCRIPTION = """\
Make an MCP Streamable HTTP server's work survive dropped connections, restarts and load
balancers: resumable streams, Tasks, a REST face, Idempotency-Key, several nodes on Redis.

  mcp-resume proxy --upstream http://127.0.0.1:3000/mcp     any server, any language
  mcp-resume serve my_server:mcp                            a Python app, no wrapper to write
  mcp-resume inspect --store redis://localhost:6379/0       what a store holds

Every option can also be set in the environment: MCP_RESUME_<OPTION>, e.g. MCP_RESUME_STORE.
"""

_PROXY = """\
Forward MCP Streamable HTTP to an upstream server and give it every feature of the
middleware. The endpoint is served at the upstream URL's own path (/mcp for
http://127.0.0.1:3000/mcp). Credentials (Authorization, Cookie, X-API-Key) pass up: the
upstream authenticates every request, and what one caller started is served only to a
request the upstream accepts with the same credentials.
"""

_SERVE = """\
Serve a Python MCP app, wrapped, with no wrapper module to write. TARGET is module:attribute:
an ASGI app (Starlette, FastAPI, the mcp SDK's streamable_http_app()) or an MCPServer/FastMCP
object, whose streamable_http_app() is called.
"""

_INSPECT = """\
Show what a store holds: nodes and their liveness, sessions, streams, tasks and REST calls,
counts and the newest. Read-only. Principals and payloads are left out unless asked.
"""


def _serving_options(parser: argparse.ArgumentParser) -> None:
    net = parser.add_argument_group("serving")
    net.add_argument("--host", default="127.0.0.1", help="interface to listen on (default %(default)s)")
    net.add_argument(
        "--port", type=int, default=8000, help="port to listen on; 0 picks a free one (default %(default)s)"
    )
    net.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug"],
        help="(default %(default)s)",
    )
    net.add_argument("--access-log", action="store_true", help="log every request (uvicorn's access log)")
    store = parser.add_argument_group("store and nodes")
    store.add_argument(
        "--store",
        default="memory://",
        help="store URL: memory://, sqlite:///path.db, redis://host:6379/0 (default %(default)s)",
    )
    store.add_argument("--prefix", default="", help="key prefix in a Redis store (default mcp-resume:)")
    store.add_argument(
        "--secret",
        default="",
        help="signing secret, the same on every node (needed with a shared store; >= 16 chars)",
    )
    store.add_argument(
        "--encryption-key",
        default="",
        help="encrypt what the store and its pub/sub carry (answers, stored requests, relays) with "
        "this key, the same on every node (>= 16 chars; the encryption extra)",
    )
    store.add_argument(
        "--node-timeout-s",
        type=float,
        default=5.0,
        help="a node silent this long is gone (default %(default)s)",
    )
    store.add_argument(
        "--drain-s",
        type=float,
        default=DEFAULT_DRAIN_S,
        help="on SIGTERM, how long running work goes on (default %(default)s)",
    )
    features = parser.add_argument_group("features")
    features.add_argument(
        "--tasks",
        action="store_true",
        help="the Tasks extension for 2026-07-28 clients (with --policy task_after_s=N)",
    )
    features.add_argument(
        "--rest", action="store_true", help="the REST face: PUT/GET <path>/tools/{name}/calls/{id}"
    )
    features.add_argument("--resumable-requests", action="store_true", help="SEP-975 requests/resume")
    features.add_argument(
        "--resume-tokens", action="store_true", help="_meta.nextResumeToken interim results"
    )
    features.add_argument(
        "--policy",
        action="append",
        metavar="NAME=VALUE",
        help="a Policy field, repeatable: --policy retry_ms=500 --policy task_after_s=2 (or one JSON object)",
    )
    features.add_argument(
        "--option",
        action="append",
        metavar="NAME=VALUE",
        help="another keyword of resumable(), repeatable: --option session_ttl_s=3600",
    )


def build_parser() -> argparse.ArgumentParser:
    """The `mcp-resume` parser, every option defaulting to its environment variable."""
    parser = argparse.ArgumentParser(
        prog="mcp-resume", description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    proxy = commands.add_parser(
        "proxy",
        help="put the middleware in front of any MCP server (any language)",
        description=_PROXY,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    proxy.add_argument(
        "--upstream",
        default="",
        metavar="URL",
        help="the upstream MCP endpoint, e.g. http://127.0.0.1:3000/mcp (required)",
    )
    up = proxy.add_argument_group("upstream")
    up.add_argument(
        "--connect-timeout-s",
        type=float,
        default=10.0,
        help="connecting to the upstream (default %(default)s)",
    )
    up.add_argument(
        "--read-timeout-s",
        type=float,
        default=None,
        help="how long the upstream may stay silent (default: as long as the work takes)",
    )
    up.add_argument(
        "--credential-headers",
        action="append",
        metavar="NAME",
        help="request headers that carry credentials (default authorization, cookie, x-api-key)",
    )
    _serving_options(proxy)

    serve = commands.add_parser(
        "serve",
        help="wrap and serve a Python app found by import string",
        description=_SERVE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument(
        "target",
        metavar="TARGET",
        nargs="?",
        default=None,
        help="module:attribute, e.g. my_server:mcp [env: MCP_RESUME_TARGET]",
    )
    serve.add_argument("--factory", action="store_true", help="TARGET is a function that returns the app")
    serve.add_argument("--path", default="/mcp", help="the app's MCP endpoint (default %(default)s)")
    _serving_options(serve)

    inspect = commands.add_parser(
        "inspect",
        help="show what a store holds (read-only)",
        description=_INSPECT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    inspect.add_argument("--store", default="", help="store URL, e.g. redis://localhost:6379/0 (required)")
    inspect.add_argument("--prefix", default="", help="key prefix in a Redis store (default mcp-resume:)")
    inspect.add_argument("--json", action="store_true", help="print JSON instead of a table")
    inspect.add_argument(
        "--show-principals", action="store_true", help="include principals (who started what)"
    )
    inspect.add_argument(
        "--show-payloads", action="store_true", help="include recorded payloads (events, results)"
    )
    inspect.add_argument(
        "--limit", type=int, default=10, help="how many of the newest to list per kind (default %(default)s)"
    )
    return parser


def _configure(parser: argparse.ArgumentParser) -> None:
    with_environment(parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                with_environment(sub)


def _warn_if_down(upstream: str, timeout_s: float) -> None:
    from urllib.parse import urlsplit

    parts = urlsplit(upstream)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname or "", port), timeout=min(timeout_s, 2.0)).close()
    except OSError as exc:
        logger.warning(
            "the upstream %s does not accept connections now (%s): requests get a 502 until it does",
            upstream,
            exc.strerror or exc,
        )


def _proxy(args: argparse.Namespace) -> None:
    from mcp_resume_asgi.cli.serving import run, wrapped_app
    from mcp_resume_asgi.proxy import DEFAULT_CREDENTIAL_HEADERS, ProxyApp

    if not args.upstream:
        raise OptionError(
            "--upstream URL is required (or MCP_RESUME_UPSTREAM), e.g. http://127.0.0.1:3000/mcp"
        )
    app = ProxyApp(
        args.upstream,
        connect_timeout_s=args.connect_timeout_s,
        read_timeout_s=args.read_timeout_s,
        credential_headers=args.credential_headers or DEFAULT_CREDENTIAL_HEADERS,
        principal_key=args.secret or secrets.token_bytes(32),
    )
    wrapped = wrapped_app(app, args, app.path)
    _warn_if_down(args.upstream, args.connect_timeout_s)
    run(wrapped, args, app.path, f"{app.upstream}")


def _serve(args: argparse.Namespace) -> None:

    from mcp_resume_asgi.cli.serving import find_app, run, wrapped_app

    target = args.target or os.environ.get("MCP_RESUME_TARGET", "")
    if not target:
        raise OptionError("TARGET is required (or MCP_RESUME_TARGET), e.g. mcp-resume serve my_server:mcp")
    app = find_app(target, factory=args.factory)
    run(wrapped_app(app, args, args.path), args, args.path, target)


def _inspect(args: argparse.Namespace) -> int:
    from mcp_resume_asgi.cli.inspect_store import inspect_command

    return inspect_command(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Run `mcp-resume` with `argv` (the process's arguments by default); the exit status."""
    parser = build_parser()
    try:
        _configure(parser)
    except OptionError as exc:
        parser.exit(2, f"mcp-resume: error: {exc}\n")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(args, "log_level", "warning").upper(),
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        if args.command == "proxy":
            _proxy(args)
        elif args.command == "serve":
            _serve(args)
        else:
            return _inspect(args)
    except (OptionError, ValueError, ImportError) as exc:
        parser.exit(2, f"mcp-resume {args.command}: error: {exc}\n")
    return 0
