"""A low-level MCP app that reports what happened to its requests.

The engine tests need to see from the app's side whether work was cancelled,
finished or never started, and need tools that produce many events quickly;
`PROBE` records that, and is read by tests running the app in-process.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from starlette.applications import Starlette
from starlette.routing import Route

NAME_SCHEMA: types.ElicitRequestedSchema = {
    "type": "object",
    "properties": {"name": {"type": "string"}},
    "required": ["name"],
}


@dataclass
class Probe:
    started: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    changed: anyio.Event | None = None

    def clear(self) -> None:
        self.started.clear()
        self.finished.clear()
        self.cancelled.clear()


PROBE = Probe()


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


async def _list_tools(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    schema: dict[str, Any] = {"type": "object"}
    names = ["sleep", "burst", "ask", "progress", "echo", "fail", "pages"]
    return types.ListToolsResult(tools=[types.Tool(name=n, input_schema=schema) for n in names])


async def _call_tool(
    ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    args: dict[str, Any] = params.arguments or {}
    tag = str(args.get("tag", params.name))
    match params.name:
        case "echo":
            return _text(str(args.get("text", "")))
        case "pages":
            # The app's own use of resume tokens (pagination): must pass through the middleware untouched.
            meta: Any = params.meta
            token = meta.get("resumeToken") if isinstance(meta, dict) else getattr(meta, "resumeToken", None)
            if token is None:
                return types.CallToolResult(
                    content=[types.TextContent(type="text", text="page 1")],
                    _meta={"nextResumeToken": "app-2"},
                )
            return _text(f"page after {token}")
        case "fail":
            await anyio.sleep(float(args.get("seconds", 0.0)))
            raise MCPError(code=types.INTERNAL_ERROR, message="probe failure")
        case "sleep":
            PROBE.started.append(tag)
            try:
                if args.get(
                    "notify"
                ):  # opens the stock server's SSE answer (a 2026-07-28 one is JSON until then)
                    await ctx.session.report_progress(0, 1, "sleeping")
                await anyio.sleep(float(args.get("seconds", 1.0)))
            except anyio.get_cancelled_exc_class():
                PROBE.cancelled.append(tag)
                raise
            PROBE.finished.append(tag)
            return _text(f"slept {tag}")
        case "burst":
            count = int(args.get("count", 10))
            size = int(args.get("size", 10))
            delay = float(args.get("delay", 0.0))
            PROBE.started.append(tag)
            for i in range(count):
                await ctx.session.send_log_message(
                    "info", {"i": i, "pad": "x" * size}, logger="burst", related_request_id=ctx.request_id
                )
                if delay:
                    await anyio.sleep(delay)
            PROBE.finished.append(tag)
            return _text(f"burst {count}")
        case "progress":
            steps = int(args.get("steps", 5))
            seconds = float(args.get("seconds", 0.5))
            for i in range(1, steps + 1):
                await anyio.sleep(seconds / steps)
                await ctx.session.report_progress(i, steps, f"step {i}")
            return _text(f"done {steps}")
        case "ask":
            result = await ctx.session.elicit_form("name?", NAME_SCHEMA, related_request_id=ctx.request_id)
            if result.action == "accept" and result.content is not None:
                return _text(f"hello {result.content.get('name')}")
            return _text("declined")
        case _:
            raise ValueError(f"unknown tool {params.name!r}")


def create_app(*, json_response: bool = False, stateless: bool = False) -> Starlette:
    server: Server[Any] = Server("probe", version="0.0.1", on_list_tools=_list_tools, on_call_tool=_call_tool)
    manager = StreamableHTTPSessionManager(app=server, json_response=json_response, stateless=stateless)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    return Starlette(routes=[Route("/mcp", endpoint=StreamableHTTPASGIApp(manager))], lifespan=lifespan)
