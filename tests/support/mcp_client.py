"""Helpers to drive the stock ``mcp`` (2.3) client in tests.

``stock_session`` opens ``streamable_http_client`` + ``ClientSession`` and runs
the legacy ``initialize`` handshake, i.e. a *stateful* session (Mcp-Session-Id,
protocol 2025-11-25, SSE responses, standalone GET stream). Note that the
high-level ``mcp.client.Client(url)`` defaults to ``mode="auto"``, which probes
``server/discover`` and, against an mcp 2.3 server, settles on the stateless
2026-07-28 protocol instead (no session, no GET stream, no server->client
requests); use ``Client(url, mode="legacy")`` if you want that API.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
import mcp.types as types
from mcp.client.session import (
    ClientRequestContext,
    ClientSession,
    ElicitationFnT,
    LoggingFnT,
    MessageHandlerFnT,
)
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

ProgressTuple = tuple[float, float | None, str | None]
"""``(progress, total, message)`` as received by a progress callback."""

DEFAULT_READ_TIMEOUT = 30.0
"""Per-request timeout of the sessions opened here, so a hang fails a test instead of stalling it."""


def name_elicitation(name: str | None = "alice") -> ElicitationFnT:
    """An elicitation callback answering any form with ``{"name": name}`` (``None``: decline)."""

    async def callback(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        if name is None:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"name": name})

    return callback


class LogCollector:
    """A ``logging_callback`` that records ``notifications/message`` params (e.g. from the GET stream)."""

    def __init__(self) -> None:
        self.messages: list[types.LoggingMessageNotificationParams] = []
        self._changed: anyio.Event | None = None

    async def __call__(self, params: types.LoggingMessageNotificationParams) -> None:
        self.messages.append(params)
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    @property
    def data(self) -> list[Any]:
        """The ``data`` field of every message received, in order."""
        return [m.data for m in self.messages]

    async def wait_for(self, count: int) -> list[types.LoggingMessageNotificationParams]:
        """Wait until at least ``count`` messages arrived; returns them all (bound it with fail_after)."""
        while len(self.messages) < count:
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()
        return list(self.messages)


@contextlib.asynccontextmanager
async def stock_session(
    url: str,
    *,
    elicit_name: str | None = "alice",
    elicitation_callback: ElicitationFnT | None = None,
    logging_callback: LoggingFnT | None = None,
    message_handler: MessageHandlerFnT | None = None,
    read_timeout_seconds: float | None = DEFAULT_READ_TIMEOUT,
    http_client: httpx2.AsyncClient | None = None,
    terminate_on_close: bool = True,
    initialize: bool = True,
) -> AsyncIterator[ClientSession]:
    """An initialized stock ``ClientSession`` over Streamable HTTP at ``url`` (e.g. ``server.mcp_url``).

    Elicitations are answered with ``name=elicit_name`` (``None``: declined)
    unless ``elicitation_callback`` is given. ``initialize=False`` skips the
    handshake (call ``session.initialize()`` yourself).
    """
    transport = streamable_http_client(url, http_client=http_client, terminate_on_close=terminate_on_close)
    async with transport as (read_stream, write_stream):
        session = ClientSession(
            read_stream,
            write_stream,
            read_timeout_seconds=read_timeout_seconds,
            elicitation_callback=elicitation_callback or name_elicitation(elicit_name),
            logging_callback=logging_callback,
            message_handler=message_handler,
        )
        async with session:
            if initialize:
                await session.initialize()
            yield session


async def call_with_progress(
    session: ClientSession,
    tool: str,
    args: dict[str, Any] | None = None,
    *,
    read_timeout_seconds: float | None = None,
) -> tuple[types.CallToolResult, list[ProgressTuple]]:
    """Call ``tool`` with a progress callback; returns the result and every ``(progress, total, message)``."""
    updates: list[ProgressTuple] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append((progress, total, message))

    result = await session.call_tool(
        tool, args or {}, read_timeout_seconds=read_timeout_seconds, progress_callback=on_progress
    )
    return result, updates


def result_text(result: types.CallToolResult) -> str:
    """The concatenated text content of a tool result."""
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def tool_error_message(
    session: ClientSession, tool: str = "fail", args: dict[str, Any] | None = None
) -> str:
    """Call a tool that must fail and return its error text, whichever way the server reports it.

    The low-level app answers with a JSON-RPC error (the client raises
    ``MCPError``); ``MCPServer`` and fastmcp answer with ``isError: true``.
    Raises ``AssertionError`` if the call succeeded.
    """
    try:
        result = await session.call_tool(tool, args or {})
    except MCPError as exc:
        return exc.error.message
    if not result.is_error:
        raise AssertionError(f"{tool} unexpectedly succeeded: {result_text(result)!r}")
    return result_text(result)


def text(result: dict[str, Any]) -> str:
    """The text of a result as the client helper returns it (a dict)."""
    return "".join(block.get("text", "") for block in result.get("content", []))
