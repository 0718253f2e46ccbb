"""Set-up mistakes that would otherwise fail far from their cause, or not at all.

* Passing the `MCPServer` object, or its `streamable_http_app` method uncalled, is an
  easy slip: Python accepts it, and the failure only comes on the first request as a
  `TypeError` buried in an `ExceptionGroup`. `check_asgi_app` refuses it at
  construction. It runs once, so it errs on the side of accepting: anything whose
  signature cannot be read (builtins, some C callables) passes.
* A `path` that does not match where the MCP endpoint is (a typo, or an app mounted
  under a prefix while the middleware wraps the outer app) turns everything off
  silently: every request passes through untouched. `WrongPathDetector` says so, once.
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Callable, Iterable
from typing import Any

from starlette.types import Message, Receive, Scope

from mcp_resume_asgi._http import is_json

logger = logging.getLogger(__name__)

#: Methods of MCP server objects that build the ASGI app; naming them says what to call.
_APP_FACTORIES = ("streamable_http_app", "http_app")


def _factory_name(obj: Any) -> str | None:
    """The ASGI-app factory `obj` is, or the one it has as an attribute."""
    name = getattr(obj, "__name__", None)
    if name in _APP_FACTORIES and (inspect.isfunction(obj) or inspect.ismethod(obj)):
        return str(name)
    for factory in _APP_FACTORIES:
        if callable(getattr(type(obj), factory, None)):
            return factory
    return None


def _takes_scope_receive_send(app: Any) -> bool:
    """False only when `app`'s readable signature cannot bind three positional arguments."""
    try:
        signature = inspect.signature(app)
    except (TypeError, ValueError):  # no signature to read: give it the benefit of the doubt
        return True
    try:
        signature.bind(None, None, None)
    except TypeError:
        return False
    return True


def check_asgi_app(app: Any, *, wrapper: str = "resumable") -> None:
    """Raise `TypeError` naming the fix when `app` cannot be an ASGI app."""
    if callable(app) and _takes_scope_receive_send(app):
        return
    factory = _factory_name(app)
    if factory is not None:
        if inspect.isfunction(app) or inspect.ismethod(app):
            raise TypeError(
                f"{wrapper}() got the method {factory} itself, not the app it builds: "
                f"call {factory}() first, e.g. {wrapper}(mcp.{factory}())"
            )
        raise TypeError(
            f"{wrapper}() needs the ASGI app, not the {type(app).__name__} object: "
            f"pass {wrapper}(mcp.{factory}())"
        )
    if not callable(app):
        raise TypeError(f"{wrapper}() needs an ASGI app, got {type(app).__name__} (not callable)")
    raise TypeError(
        f"{wrapper}() needs an ASGI app, callable as app(scope, receive, send); "
        f"{app!r} cannot take those three arguments"
    )


#: A JSON-RPC `initialize` request: what every MCP client sends first.
_INITIALIZE = re.compile(rb'"method"\s*:\s*"initialize"')
#: How much of a body is looked at; an `initialize` request is a few hundred bytes.
PEEK_LIMIT = 16 * 1024


class WrongPathDetector:
    """Warns once when MCP traffic reaches the middleware on a path it does not handle.

    Only JSON POSTs to paths the middleware passes through are looked at, and only
    until one turns out to be an `initialize` request: after the warning, `watch`
    returns `receive` itself, so the detector costs nothing more. The app receives
    every message exactly as it came.
    """

    def __init__(self, paths: Iterable[str], local_path: Callable[[Scope], str]) -> None:
        self.paths = sorted(paths)
        self.local_path = local_path
        self.warned = False

    def watch(self, scope: Scope, receive: Receive) -> Receive:
        """`receive` for a request the middleware passes through untouched."""
        if self.warned or scope.get("method") != "POST" or not is_json(scope):
            return receive
        # As the middleware saw it: routing inside the app (a Mount) rewrites the scope in place.
        where = {"path": scope.get("path", ""), "root_path": scope.get("root_path", "")}
        seen = bytearray()
        deciding = True

        async def peeking() -> Message:
            nonlocal deciding
            message = await receive()
            if deciding and message["type"] == "http.request":
                seen.extend(message.get("body", b""))
                if self.warned:
                    deciding = False
                elif _INITIALIZE.search(seen):
                    deciding = False
                    self._warn(where)
                elif not message.get("more_body", False) or len(seen) > PEEK_LIMIT:
                    deciding = False
                if not deciding:
                    seen.clear()
            return message

        return peeking

    def _warn(self, scope: Scope) -> None:
        self.warned = True
        local = self.local_path(scope)
        root = scope.get("root_path", "") or ""
        seen = f"{local!r} (root_path {root!r})" if root else repr(local)
        logger.warning(
            "an MCP initialize request reached ResumeMiddleware on path %s, which it does not handle "
            "(configured: %s), so this MCP traffic passes through untouched and nothing is resumable. "
            "Fix: ResumeMiddleware(..., path=%r) / resumable(..., path=%r), or wrap the mounted MCP app "
            "itself rather than the app that mounts it (a mount sets root_path, and path= is relative "
            "to it). Logged once.",
            seen,
            ", ".join(map(repr, self.paths)),
            local,
            local,
        )
