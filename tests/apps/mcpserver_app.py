"""MCP server app built on ``mcp.server.mcpserver.MCPServer`` (mcp 2.x).

Stateful sessions, SSE responses (unless ``json_response``), no event store and
no retry interval.

Note: no ``from __future__ import annotations`` here, so that ``MCPServer``
sees the real ``Context`` annotation on the tool functions.
"""

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field
from starlette.applications import Starlette

from tests.apps import ELICIT_MESSAGE, FAIL_MESSAGE

SERVER_NAME = "mcpserver-test-app"


class NameForm(BaseModel):
    """The form-mode elicitation schema: a single string field ``name``."""

    name: str = Field(description="Your name")


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
    # Context.elicit sends the request with related_request_id=ctx.request_id,
    # i.e. on this POST's SSE stream.
    result = await ctx.elicit(ELICIT_MESSAGE, NameForm)
    if result.action == "accept":
        return f"hello {result.data.name}"
    return "declined"


async def fail() -> str:
    """Always fails (MCPServer turns the ToolError into an isError result)."""
    raise ToolError(FAIL_MESSAGE)


def create_server() -> MCPServer:
    """The `MCPServer` with the test tools (no transport)."""
    server = MCPServer(SERVER_NAME, version="0.0.1", log_level="WARNING")
    for fn in (echo, slow_progress, ask_name, fail):
        server.add_tool(fn, structured_output=False)
    return server


def create_app(*, json_response: bool = False) -> Starlette:
    """A Starlette app serving the MCPServer over Streamable HTTP at ``/mcp``.

    ``host="127.0.0.1"`` makes the SDK enable DNS-rebinding protection for
    ``127.0.0.1:*`` / ``localhost:*`` hosts, which any loopback client (or the
    test proxy, which forwards the Host header unchanged) satisfies.
    """
    server = create_server()
    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        json_response=json_response,
        stateless_http=False,
        event_store=None,
        retry_interval=None,
        host="127.0.0.1",
    )
    app.state.mcp_server = server
    return app
