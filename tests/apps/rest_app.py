"""A stock `MCPServer` app for the REST face's tests (SEP-1597): plain tools, unchanged.

* `echo` answers at once; `fail` reports a tool error (`isError`); `refuse` a JSON-RPC error.
* `slow` reports progress (`ctx.report_progress`) at each step, then returns; `RUNS` counts
  its runs by tag (a retried PUT must not run it twice), `CANCELLED` the tags it was
  cancelled in. Its steps wait `step_s` seconds each.
* `confirm` asks the client (`Resolve` + `Elicit`: an `InputRequiredResult` on 2026-07-28,
  an `elicitation/create` request on a 2025 session) and says what was decided.
* `confirm_twice` asks the same question twice (two resolvers rendering the same request:
  one round of two input requests on 2026-07-28, two `elicitation/create` one after the
  other on a 2025 session) and says both answers.

`legacy(app)` makes the app look like a server that predates 2026-07-28: a request at that
revision is refused as an unsupported version, so the REST face opens a 2025-11-25 session.

Note: no ``from __future__ import annotations`` here, so that ``MCPServer`` sees the real
annotations of the tool functions.
"""

import json
from collections import Counter
from typing import Annotated

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp.server.request_state import RequestStateSecurity
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, Field
from starlette.applications import Starlette
from starlette.types import ASGIApp, Receive, Scope, Send

RUNS: Counter[str] = Counter()
CANCELLED: list[str] = []


async def echo(text: str) -> str:
    """Return the given text at once."""
    return text


async def fail() -> str:
    """A tool error: the call completes with an `isError` result."""
    raise ToolError("the tool could not do it")


async def refuse() -> str:
    """A JSON-RPC error (-32042)."""
    raise MCPError(code=-32042, message="the server refused it")


async def slow(steps: int, tag: str, ctx: Context, step_s: float = 0.2) -> str:
    """Report progress at each of `steps` steps of `step_s` seconds, then return 'done {tag}'."""
    RUNS[tag] += 1
    try:
        for step in range(steps):
            await ctx.report_progress(step, steps, f"step {step} of {steps}")
            await anyio.sleep(step_s)
    except anyio.get_cancelled_exc_class():
        CANCELLED.append(tag)
        raise
    return f"done {tag}"


async def regional(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]) -> str:
    """A parameter mirrored in an `Mcp-Param-Region` header on 2026-07-28 (`x-mcp-header`)."""
    return f"served in {region}"


class Confirmation(BaseModel):
    confirm: bool


def ask_confirmation(filename: str) -> Elicit[Confirmation]:
    return Elicit(f"Delete {filename}?", Confirmation)


async def confirm(filename: str, answer: Annotated[Confirmation, Resolve(ask_confirmation)]) -> str:
    """Asks the client whether to delete `filename`."""
    return f"deleted {filename}" if answer.confirm else f"kept {filename}"


def ask_confirmation_again(filename: str) -> Elicit[Confirmation]:
    """The same question as `ask_confirmation`: another resolver, since the SDK asks a
    resolver once per call however many parameters it fills."""
    return Elicit(f"Delete {filename}?", Confirmation)


async def confirm_twice(
    filename: str,
    first: Annotated[Confirmation, Resolve(ask_confirmation)],
    second: Annotated[Confirmation, Resolve(ask_confirmation_again)],
) -> str:
    """Asks the client the same question twice and says both answers."""
    return f"{filename}: {first.confirm} then {second.confirm}"


def create_app(request_state_key: str | None = None) -> Starlette:
    """`request_state_key`: the 2026-07-28 `requestState` sealing key nodes of one deployment
    share (the SDK's rule for several instances: a round answered on another node must unseal
    what this one sealed); None is the SDK's per-process key."""
    security = RequestStateSecurity(keys=[request_state_key]) if request_state_key else None
    server = MCPServer("rest-test-app", version="0.0.1", log_level="WARNING", request_state_security=security)
    for fn in (echo, fail, refuse, slow, confirm, confirm_twice, regional):
        server.add_tool(fn, structured_output=False)
    return server.streamable_http_app(
        streamable_http_path="/mcp",
        json_response=False,
        stateless_http=False,
        event_store=None,
        retry_interval=None,
        host="127.0.0.1",
    )


class Legacy:
    """Refuses 2026-07-28 requests as a server of the 2025 revisions does (unknown version)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            versions = [v for k, v in scope["headers"] if k == b"mcp-protocol-version"]
            if b"2026-07-28" in versions:
                body = json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": None,
                        "error": {"code": -32600, "message": "Bad Request: Unsupported protocol version"},
                    }
                ).encode()
                headers = [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ]
                await send({"type": "http.response.start", "status": 400, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def legacy(app: ASGIApp) -> Legacy:
    return Legacy(app)


def create_legacy_app() -> Legacy:
    return Legacy(create_app())
