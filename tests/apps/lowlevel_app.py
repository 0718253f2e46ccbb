"""MCP server app built on the low-level ``Server`` + ``StreamableHTTPSessionManager``.

Stateful sessions, SSE responses, no event store and no retry interval: any
resumability has to come from outside (the middleware under test).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.session import ServerSession
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from starlette.applications import Starlette
from starlette.routing import Route

from tests.apps import ELICIT_MESSAGE, FAIL_MESSAGE, NOTIFY_LOGGER

logger = logging.getLogger(__name__)

SERVER_NAME = "lowlevel-test-app"


@dataclass
class AppState:
    """Lifespan state of the low-level app: a task group for background work."""

    task_group: anyio.abc.TaskGroup


TOOLS: list[types.Tool] = [
    types.Tool(
        name="echo",
        description="Return the given text.",
        input_schema={
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    ),
    types.Tool(
        name="slow_progress",
        description="Send `steps` progress notifications spread over `seconds`, then return 'done {steps}'.",
        input_schema={
            "type": "object",
            "properties": {
                "seconds": {"type": "number", "default": 3},
                "steps": {"type": "integer", "default": 30},
            },
        },
    ),
    types.Tool(
        name="ask_name",
        description="Elicit a name from the client and greet it.",
        input_schema={"type": "object", "properties": {}},
    ),
    types.Tool(
        name="fail",
        description="Always fails.",
        input_schema={"type": "object", "properties": {}},
    ),
    types.Tool(
        name="notify_later",
        description=(
            "Send `count` notifications/message log messages unrelated to this request "
            "(standalone GET stream), one every `interval` seconds. Returns immediately "
            "unless `wait` is true."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "count": {"type": "integer", "default": 3},
                "interval": {"type": "number", "default": 0.1},
                "wait": {"type": "boolean", "default": False},
            },
        },
    ),
]

NAME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string", "description": "Your name"}},
    "required": ["name"],
}


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


async def slow_progress(ctx: ServerRequestContext[AppState], seconds: float, steps: int) -> str:
    """Shared implementation: `steps` progress notifications spread evenly over `seconds`."""
    delay = seconds / steps if steps > 0 else 0.0
    for i in range(1, steps + 1):
        await anyio.sleep(delay)
        await ctx.session.report_progress(i, steps, f"step {i}")
    return f"done {steps}"


async def _send_unrelated_logs(session: ServerSession, count: int, interval: float) -> None:
    """Send `count` log notifications on the connection's standalone channel (no related request)."""
    for i in range(1, count + 1):
        await anyio.sleep(interval)
        notification = types.LoggingMessageNotification(
            params=types.LoggingMessageNotificationParams(
                level="info", logger=NOTIFY_LOGGER, data=f"tick {i}"
            )
        )
        try:
            # No related_request_id: routed to `connection.outbound`, which on
            # Streamable HTTP is the standalone GET stream.
            await session.send_notification(notification)
        except Exception:  # the session may be gone by now
            logger.debug("notify_later: could not send tick %d", i, exc_info=True)
            return


async def _list_tools(
    ctx: ServerRequestContext[AppState], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def _call_tool(
    ctx: ServerRequestContext[AppState], params: types.CallToolRequestParams
) -> types.CallToolResult:
    args: dict[str, Any] = params.arguments or {}
    match params.name:
        case "echo":
            return _text(str(args["text"]))
        case "slow_progress":
            return _text(await slow_progress(ctx, float(args.get("seconds", 3)), int(args.get("steps", 30))))
        case "ask_name":
            # related_request_id routes the elicitation onto this POST's SSE stream;
            # without it the request would go to the standalone GET stream.
            result = await ctx.session.elicit_form(
                ELICIT_MESSAGE, NAME_SCHEMA, related_request_id=ctx.request_id
            )
            if result.action == "accept" and result.content is not None:
                return _text(f"hello {result.content.get('name')}")
            return _text("declined")
        case "fail":
            # An exception from a low-level handler becomes a JSON-RPC error
            # response (the client raises MCPError), not an isError tool result.
            raise MCPError(code=types.INTERNAL_ERROR, message=FAIL_MESSAGE)
        case "notify_later":
            count = int(args.get("count", 3))
            interval = float(args.get("interval", 0.1))
            if args.get("wait", False):
                await _send_unrelated_logs(ctx.session, count, interval)
            else:
                ctx.lifespan_context.task_group.start_soon(_send_unrelated_logs, ctx.session, count, interval)
            return _text(f"scheduled {count}")
        case _:
            raise ValueError(f"unknown tool {params.name!r}")


@contextlib.asynccontextmanager
async def _server_lifespan(_: Server[AppState]) -> AsyncIterator[AppState]:
    async with anyio.create_task_group() as tg:
        try:
            yield AppState(task_group=tg)
        finally:
            tg.cancel_scope.cancel()


def create_server() -> Server[AppState]:
    """The low-level `Server` with the test tools (no transport)."""
    return Server(
        SERVER_NAME,
        version="0.0.1",
        lifespan=_server_lifespan,
        on_list_tools=_list_tools,
        on_call_tool=_call_tool,
    )


def create_app(*, json_response: bool = False) -> Starlette:
    """A Starlette app serving the low-level server over Streamable HTTP at ``/mcp``."""
    server = create_server()
    session_manager = StreamableHTTPSessionManager(
        app=server,
        event_store=None,
        retry_interval=None,
        json_response=json_response,
        stateless=False,
    )
    mcp_endpoint = StreamableHTTPASGIApp(session_manager)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with session_manager.run():
            yield

    app = Starlette(routes=[Route("/mcp", endpoint=mcp_endpoint)], lifespan=lifespan)
    app.state.session_manager = session_manager
    app.state.mcp_server = server
    return app
