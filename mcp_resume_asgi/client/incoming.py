"""What `ResumableSession` does with the messages a server sends it besides the awaited response.

Why apart from the session: reading an answer (`reading.py`) meets notifications,
progress and - on 2025 revisions - the server's own requests on the way to the
response it waits for, and the same handler answers the input requests of a
task (`tasks.py`) and of a multi round-trip request (`mrtr.py`). One object owns
the application's callbacks and how each kind of message reaches them:

* notifications go to `on_notification`, progress to the handler registered for
  its token;
* a server-to-client request is answered by `on_request` (`ping` by itself) in
  the background and the answer POSTed - on 2025 revisions only: from 2026-07-28
  a server asks through `InputRequiredResult` and a client must not POST
  responses, so such a request is logged and left unanswered;
* an `McpError` from `on_request` is the answer's error; any other exception is
  an internal error, logged.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio.abc
import httpx

from .errors import McpError, SessionError

logger = logging.getLogger(__name__)

METHOD_NOT_FOUND: Final = -32601
INTERNAL_ERROR: Final = -32603

JSONObject = dict[str, Any]
RequestHandler = Callable[[str, JSONObject], Awaitable[JSONObject] | JSONObject]
NotificationHandler = Callable[[str, JSONObject], Awaitable[None] | None]
ProgressHandler = Callable[[float, float | None, str | None], Awaitable[None] | None]
#: Sends one JSON-RPC message that expects no answer (an answer to a server request).
PostMessage = Callable[[JSONObject], Awaitable[None]]


async def maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class Incoming:
    """Routes incoming messages to the application's callbacks.

    `task_group` (set while the session is open) runs the answers to server
    requests; `answers_requests` is False on 2026-07-28, where there are none.
    """

    def __init__(
        self,
        on_request: RequestHandler | None,
        on_notification: NotificationHandler | None,
        post: PostMessage,
    ) -> None:
        self.on_request = on_request
        self.on_notification = on_notification
        self.post = post
        self.progress: dict[str, ProgressHandler] = {}
        self.task_group: anyio.abc.TaskGroup | None = None
        self.answers_requests = True

    async def dispatch(self, message: Any, request_id: int) -> JSONObject | None:
        """Route one incoming message; return it if it is the answer to ``request_id``."""
        if not isinstance(message, dict):
            logger.warning("ignoring a message that is not a JSON object")
            return None
        method = message.get("method")
        if isinstance(method, str):
            params = message.get("params")
            params = params if isinstance(params, dict) else {}
            if "id" not in message:
                await self.notification(method, params)
            elif not self.answers_requests:
                logger.warning("server request %r on a 2026-07-28 stream: not answered", method)
            elif self.task_group is None:
                logger.warning("server request %r outside the session context: not answered", method)
            else:
                self.task_group.start_soon(self.answer, message["id"], method, params)
            return None
        if message.get("id") == request_id and not isinstance(message.get("id"), bool):
            return message
        logger.debug("ignoring a response to another request (id %r)", message.get("id"))
        return None

    async def notification(self, method: str, params: JSONObject) -> None:
        try:
            if method == "notifications/progress":
                handler = self.progress.get(str(params.get("progressToken")))
                progress = params.get("progress")
                if handler is not None and isinstance(progress, int | float):
                    total = params.get("total")
                    text = params.get("message")
                    await maybe_await(
                        handler(
                            float(progress),
                            float(total) if isinstance(total, int | float) else None,
                            text if isinstance(text, str) else None,
                        )
                    )
            if self.on_notification is not None:
                await maybe_await(self.on_notification(method, params))
        except Exception:
            logger.exception("notification handler failed for %r", method)

    async def answer(self, server_request_id: Any, method: str, params: JSONObject) -> None:
        reply: JSONObject = {"jsonrpc": "2.0", "id": server_request_id}
        try:
            reply["result"] = await self.handle(method, params)
        except McpError as exc:
            reply["error"] = {"code": exc.code, "message": exc.message}
            if exc.data is not None:
                reply["error"]["data"] = exc.data
        except Exception as exc:
            logger.exception("on_request failed for %r", method)
            reply["error"] = {"code": INTERNAL_ERROR, "message": f"client failed to handle {method!r}: {exc}"}
        try:
            await self.post(reply)
        except (SessionError, httpx.HTTPError) as exc:
            logger.warning("could not deliver the answer to server request %r: %r", server_request_id, exc)

    async def handle(self, method: str, params: JSONObject) -> JSONObject:
        """The result of a server-to-client request; :class:`McpError` to refuse it."""
        if method == "ping":
            return {}
        if self.on_request is None:
            raise McpError(METHOD_NOT_FOUND, f"client does not handle {method!r}")
        result = await maybe_await(self.on_request(method, params))
        if not isinstance(result, dict):
            raise TypeError(f"on_request returned {type(result).__name__}, not a dict")
        return result

    async def answer_input(self, key: str, method: str, params: JSONObject) -> JSONObject:
        """An entry of `inputRequests` (a task's, or an `InputRequiredResult`'s): answered by
        `on_request`, as if the server had sent it as a request."""
        return await self.handle(method, params)
