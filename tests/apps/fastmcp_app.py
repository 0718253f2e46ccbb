"""MCP server app built on ``fastmcp`` (4.x) and its ``http_app()``.

Stateful sessions, SSE responses (unless ``json_response``), no event store and
no retry interval.

Note: no ``from __future__ import annotations`` here, so that fastmcp sees the
real ``Context`` annotation on the tool functions.
"""

from dataclasses import dataclass

import anyio
from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.server.context import Context
from starlette.applications import Starlette

from tests.apps import ELICIT_MESSAGE, FAIL_MESSAGE

SERVER_NAME = "fastmcp-test-app"


@dataclass
class NameForm:
    """The form-mode elicitation schema: a single string field ``name``."""

    name: str


async def echo(text: str) -> str:
    """Return the given text."""
    return text


async def slow_progress(ctx: Context, seconds: float = 3, steps: int = 30) -> str:
    """Send `steps` progress notifications spread over `seconds`, then return 'done {steps}'."""
    delay = seconds / steps if steps > 0 else 0.0
    for i in range(1, steps + 1):
        await anyio.sleep(delay)
        await ctx.report_progress(i, steps, f"step {i}")
    return f"done {steps}"


async def ask_name(ctx: Context) -> str:
    """Elicit a name from the client and greet it."""
    # fastmcp sends the elicitation with related_request_id=ctx.request_id,
    # i.e. on this POST's SSE stream.
    result = await ctx.elicit(ELICIT_MESSAGE, NameForm)
    if result.action == "accept":
        return f"hello {result.data.name}"
    return "declined"


async def fail() -> str:
    """Always fails (fastmcp turns the ToolError into an isError result)."""
    raise ToolError(FAIL_MESSAGE)


def create_server() -> FastMCP:
    """The `FastMCP` server with the test tools (no transport)."""
    server: FastMCP = FastMCP(SERVER_NAME, version="0.0.1")
    for fn in (echo, slow_progress, ask_name, fail):
        server.tool(fn, output_schema=None)
    return server


def create_app(*, json_response: bool = False) -> Starlette:
    """A Starlette app serving the FastMCP server over Streamable HTTP at ``/mcp``."""
    server = create_server()
    app = server.http_app(
        path="/mcp",
        transport="http",
        json_response=json_response,
        stateless_http=False,
        event_store=None,
        retry_interval=None,
    )
    app.state.mcp_server = server
    return app
