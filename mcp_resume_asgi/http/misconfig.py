"""Set-up mistakes that would otherwise fail far from their cause, or not at all.

* Passing something that is no ASGI app (the `MCPServer` object, or its
  `streamable_http_app` method uncalled) is refused at construction by `check_asgi_app`
  (`wire/asgi.py`).
* A `path` that does not match where the MCP endpoint is (a typo, or an app mounted
  under a prefix while the middleware wraps the outer app) turns everything off
  silently: every request passes through untouched. `WrongPathDetector` says so, once.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable

from mcp_resume_asgi.wire.asgi import Message, Receive, Scope
from mcp_resume_asgi.wire.headers import is_json

__all__ = ["PEEK_LIMIT", "WrongPathDetector"]

logger = logging.getLogger(__name__)

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
