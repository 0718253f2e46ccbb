"""The ASGI types the library speaks, and the check that an app is an ASGI app.

The aliases are `starlette.types`' own, written out, so that the pure layers never import
a framework for a type: mypy sees the same types on both sides.

Passing the `MCPServer` object, or its `streamable_http_app` method uncalled, is an easy
slip: Python accepts it, and the failure only comes on the first request as a `TypeError`
buried in an `ExceptionGroup`. `check_asgi_app` refuses it at construction. It runs once,
so it errs on the side of accepting: anything whose signature cannot be read (builtins,
some C callables) passes. Plain inspection, no I/O: every layer that takes an app uses it.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["ASGIApp", "Message", "Receive", "Scope", "Send", "check_asgi_app", "http_scope"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def http_scope(
    method: str, scheme: str, path: str, query_string: bytes, headers: list[tuple[bytes, bytes]]
) -> Scope:
    """The scope of an HTTP request that arrived elsewhere (relayed from another node, or kept
    to be run again), to serve it as if it had come here: no server, no client address."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": scheme,
        "path": path,
        "raw_path": path.encode(),
        "query_string": query_string,
        "root_path": "",
        "headers": headers,
        "server": None,
        "client": None,
        "state": {},
    }


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
