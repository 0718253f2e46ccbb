"""What the client helper raises, in one place so every module of it can raise the same things.

Two kinds of failure stay apart because a caller treats them differently: the
server *answered* with a JSON-RPC error (:class:`McpError`: retrying the same
request will most likely fail the same way), or the exchange itself broke or
made no sense (:class:`SessionError`: a network or protocol problem). A task the
server cancelled is neither (:class:`TaskCancelled`).
"""

from __future__ import annotations

from typing import Any


class McpError(Exception):
    """The server (or the transport, code -32000, when a stream was lost) answered with an error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{message} (code {code})")
        self.code = code
        self.message = message
        self.data = data


class SessionError(Exception):
    """The exchange broke at the HTTP level or the server broke the protocol."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class TaskCancelled(Exception):
    """The call became a task (SEP-2663) that the server reports `cancelled`.

    Not an :class:`McpError`: no JSON-RPC error was ever answered - someone (an
    operator, another client holding the task id, the server's own policy) stopped
    the work. The caller's own cancellation is never reported this way: it
    propagates as anyio's cancellation, after `tasks/cancel` was sent.
    """

    def __init__(self, task_id: str, status_message: str | None = None) -> None:
        detail = f": {status_message}" if status_message else ""
        super().__init__(f"task {task_id} was cancelled{detail}")
        self.task_id = task_id
        self.status_message = status_message


class GiveUp(Exception):
    """Internal to :class:`ResumableTransport`: a request's logical stream cannot be continued.

    It never reaches the application as an exception: the transport ends the
    request's stream with an error event carrying this message (code -32000,
    ``STREAM_ERROR_CODE``), so the consumer is never left waiting.
    """
