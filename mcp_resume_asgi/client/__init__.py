"""Client side of mcp-resume-asgi: make MCP clients ride out dropped streams.

A server behind the middleware may close an SSE response stream at any time -
to free a connection, to ask the client for input (SEP-1335), or because a
proxy cut it - and expects the client to resume. Clients that do not, lose the
answer. This package supplies that behaviour where it is cheapest to add:

* :class:`ResumableTransport` - an ``httpx`` transport; any httpx-based MCP
  client that uses it sees each request's answer as one uninterrupted stream.
* :class:`ResumableSession` - a minimal MCP client on top of it, with no
  dependency beyond ``httpx``, for 2025 revisions (``initialize``, a session) and
  2026-07-28 (``server/discover``, per-request ``_meta``, multi round-trip
  requests), or either (``protocol_version="auto"``).
* Tasks (SEP-2663): both declare ``io.modelcontextprotocol/tasks`` and follow a
  tool call answered with a task to its result (:class:`ResumableSession` itself;
  the ``mcp`` SDK's ``Client`` with :func:`sdk_tasks_extension`).
* :func:`sdk_http_client` - an ``httpx2`` client for the official ``mcp`` SDK >= 2
  (optional; ``mcp``/``httpx2`` are imported only when it is called). mcp 1.x
  talks plain ``httpx`` and takes :class:`ResumableTransport` directly.
"""

try:
    import httpx as _httpx  # noqa: F401  (the whole helper is built on it)
except ModuleNotFoundError as exc:  # say which extra brings it, not only what is missing
    if exc.name != "httpx":
        raise
    raise ImportError(
        "mcp_resume_asgi.client needs httpx, which the `client` extra installs: "
        "pip install 'mcp-resume-asgi[client]'",
        name=__name__,
    ) from exc

from .declarations import RESUMABLE_STREAMS_EXTENSION
from .errors import McpError, SessionError, TaskCancelled
from .messages import STREAM_ERROR_CODE
from .sdk import sdk_http_client
from .sdk_tasks import sdk_tasks_extension
from .session import ResumableSession
from .sse_reader import DEFAULT_MAX_EVENT_BYTES, SSEError, SSEEvent, SSEEventTooLarge, SSEParser, encode_event
from .tasks import TASKS_EXTENSION, TaskPolling
from .transport import ResumableTransport

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "RESUMABLE_STREAMS_EXTENSION",
    "STREAM_ERROR_CODE",
    "TASKS_EXTENSION",
    "McpError",
    "ResumableSession",
    "ResumableTransport",
    "SSEError",
    "SSEEvent",
    "SSEEventTooLarge",
    "SSEParser",
    "SessionError",
    "TaskCancelled",
    "TaskPolling",
    "encode_event",
    "sdk_http_client",
    "sdk_tasks_extension",
]
