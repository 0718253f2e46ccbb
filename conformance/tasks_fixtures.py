"""The fixture tools of the suite's ``tasks-*`` scenarios (0.2.0-alpha.12), as plain ``MCPServer`` tools.

They know nothing of tasks: which calls become tasks, and which need a client that
declared the extension, is the wrapping middleware's policy (``TASK_ROUTES``, used by
``server.make_app(wrapped=True)``). A tool that needs the client's input asks for it
the SDK's way (``Resolve`` + ``Elicit``): on 2026-07-28, the revision the scenarios
speak, the SDK answers an ``InputRequiredResult`` and resumes when the call comes
again with ``inputResponses``; on 2025 revisions it sends ``elicitation/create``.

Bare, the SDK has no tasks, so the scenarios fail there; the figures are in
``conformance/README.md``.
"""

# No `from __future__ import annotations`: MCPServer reads the real annotations.

from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

#: How often a client is told to poll a task (ms).
TASK_POLL_MS = 200


def task_routes(retry_ms: int | None) -> dict[str, Any]:
    """Per-tool policies for the wrapped server: the task-supporting tools become tasks at
    once; `greet` never does; `failing_job` and `test_tool_with_task` need the extension
    (`taskSupport: required`); `test_tool_with_task` answers its input round synchronously
    (it is done long before `task_after_s`) and becomes a task on the round that runs long."""
    from mcp_resume_asgi import Policy  # lazily: the bare server must work without the middleware

    task = Policy(retry_ms=retry_ms, task_after_s=0, task_ttl_s=600, task_poll_interval_ms=TASK_POLL_MS)
    return {
        "tool:greet": Policy(retry_ms=retry_ms),
        "tool:slow_compute": task,
        "tool:failing_job": task.replace(task_required=True),
        "tool:protocol_error_job": task,
        "tool:confirm_delete": task,
        "tool:multi_input": task,
        "tool:test_tool_with_task": task.replace(task_after_s=0.5, task_required=True),
    }


class Confirmation(BaseModel):
    confirm: bool


class Name(BaseModel):
    name: str = ""
    confirm: bool = False


class UserName(BaseModel):
    name: str


def ask_confirmation(filename: str) -> Elicit[Confirmation]:
    return Elicit(f"Delete {filename}?", Confirmation)


def ask_first() -> Elicit[Name]:
    return Elicit("First input?", Name)


def ask_second() -> Elicit[Name]:
    return Elicit("Second input?", Name)


def ask_user_name() -> Elicit[UserName]:
    return Elicit("What is your name?", UserName)


def greet(name: str) -> str:
    """Say hello at once."""
    return f"Hello, {name}!"


async def slow_compute(seconds: float = 1.0, label: str = "") -> str:
    """Sleep `seconds`, then report it."""
    await anyio.sleep(seconds)
    return f"computed {label} after {seconds}s"


async def failing_job() -> str:
    """A tool execution error after about a second."""
    await anyio.sleep(1.0)
    raise ToolError("the job failed")


async def protocol_error_job() -> str:
    """A JSON-RPC (protocol) error."""
    await anyio.sleep(0.2)
    raise MCPError(code=-32603, message="the job crashed")


async def confirm_delete(
    filename: str, confirmation: Annotated[Confirmation, Resolve(ask_confirmation)]
) -> str:
    """Ask the user to confirm, then 'delete' the file."""
    return f"deleted {filename}" if confirmation.confirm else f"kept {filename}"


async def multi_input(
    first: Annotated[Name, Resolve(ask_first)], second: Annotated[Name, Resolve(ask_second)]
) -> str:
    """Ask two questions at once, then answer with both."""
    return f"got {first.name} and {second.name}"


async def test_tool_with_task(user: Annotated[UserName, Resolve(ask_user_name)]) -> str:
    """Ask the user's name, then work on it for a while."""
    await anyio.sleep(1.5)
    return f"Hello, {user.name}!"


def add_task_tools(server: MCPServer) -> None:
    for fn in (
        greet,
        slow_compute,
        failing_job,
        protocol_error_job,
        confirm_delete,
        multi_input,
        test_tool_with_task,
    ):
        server.add_tool(fn, structured_output=False)
