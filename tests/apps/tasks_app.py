"""A stock `MCPServer` app for the Tasks layer's tests: tools that are fast, slow, fail either way.

`SEEN` records what happened to the slow tool's calls, by tag, from the app's side
(started, finished, cancelled), for tests running the app in process; `gated` returns when
the test opens its gate (`open_gate`), so a test decides when a call's tool finishes.

Note: no ``from __future__ import annotations`` here, so that ``MCPServer`` sees
the real annotations of the tool functions.
"""

import threading
from dataclasses import dataclass, field
from typing import Annotated

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel
from starlette.applications import Starlette

#: Gates of `gated` calls by tag: the test opens one (`open_gate`) when that call is to return.
GATES: dict[str, threading.Event] = {}


def open_gate(tag: str) -> None:
    GATES.setdefault(tag, threading.Event()).set()


@dataclass
class Seen:
    started: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)


SEEN = Seen()


async def echo(text: str) -> str:
    """Return the given text at once."""
    return text


async def slow(seconds: float, tag: str = "slow") -> str:
    """Sleep `seconds`, then return 'slept {tag}'."""
    SEEN.started.append(tag)
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        SEEN.cancelled.append(tag)
        raise
    SEEN.finished.append(tag)
    return f"slept {tag}"


async def gated(tag: str) -> str:
    """Wait until the test opens the gate `tag` (`open_gate`), then return 'opened {tag}'.
    (A thread's event: the app may run on a loop of its own, in another thread.)"""
    SEEN.started.append(tag)
    gate = GATES.setdefault(tag, threading.Event())
    await anyio.to_thread.run_sync(gate.wait, abandon_on_cancel=True)
    SEEN.finished.append(tag)
    return f"opened {tag}"


async def tool_error(seconds: float = 0.0) -> str:
    """A tool error: the call completes with an `isError` result."""
    await anyio.sleep(seconds)
    raise ToolError("the tool could not do it")


async def rpc_error(seconds: float = 0.0) -> str:
    """A JSON-RPC error: the call fails with code -32042."""
    await anyio.sleep(seconds)
    raise MCPError(code=-32042, message="the server refused it")


class Confirmation(BaseModel):
    confirm: bool


class Answer(BaseModel):
    name: str


def ask_confirmation(filename: str) -> Elicit[Confirmation]:
    return Elicit(f"Delete {filename}?", Confirmation)


def ask_first() -> Elicit[Answer]:
    return Elicit("First name?", Answer)


def ask_second() -> Elicit[Answer]:
    return Elicit("Second name?", Answer)


async def confirm(filename: str, answer: Annotated[Confirmation, Resolve(ask_confirmation)]) -> str:
    """Asks the client the SDK's way: `elicitation/create` on 2025 revisions, an
    `InputRequiredResult` on 2026-07-28 (answered when the call comes again)."""
    await anyio.sleep(0.2)
    return f"deleted {filename}" if answer.confirm else f"kept {filename}"


def ask_go_ahead(tag: str) -> Elicit[Confirmation]:
    return Elicit(f"Go ahead with {tag}?", Confirmation)


async def confirm_then_work(
    seconds: float, tag: str, answer: Annotated[Confirmation, Resolve(ask_go_ahead)]
) -> str:
    """Asks first (as `confirm`), then works as `slow` does: a task's next round that runs a while."""
    return await slow(seconds, tag)


async def two_questions(
    first: Annotated[Answer, Resolve(ask_first)], second: Annotated[Answer, Resolve(ask_second)]
) -> str:
    """Two questions at once (one `InputRequiredResult` with two input requests)."""
    return f"{first.name} and {second.name}"


async def declared_extensions(ctx: Context) -> str:
    """The extensions the app believes its client declared (the middleware's own are hidden)."""
    capabilities = ctx.client_capabilities
    extensions = capabilities.extensions if capabilities is not None else None
    return ",".join(sorted(extensions or {})) or "none"


def create_app(*, json_response: bool = False) -> Starlette:
    server = MCPServer("tasks-test-app", version="0.0.1", log_level="WARNING")
    for fn in (
        echo,
        slow,
        gated,
        tool_error,
        rpc_error,
        confirm,
        confirm_then_work,
        two_questions,
        declared_extensions,
    ):
        server.add_tool(fn, structured_output=False)
    return server.streamable_http_app(
        streamable_http_path="/mcp",
        json_response=json_response,
        stateless_http=False,
        event_store=None,
        retry_interval=None,
        host="127.0.0.1",
    )
