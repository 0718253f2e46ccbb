"""A 2025-era server: the stock `mcp` 1.x `FastMCP` (which knows no `server/discover`), wrapped.

Imported only in the mcp 1.x venv of tests/test_mcp1_client.py (the main venv has mcp 2.x,
whose `FastMCP` is gone), by the child server of tests/test_e2e_client_modern.py.

Note: no ``from __future__ import annotations`` here, so that ``FastMCP`` sees the real
annotations of the tool functions.
"""

import anyio
from mcp.server.fastmcp import FastMCP
from starlette.types import ASGIApp

from mcp_resume_asgi import Policy, resumable


async def echo(text: str) -> str:
    """Return the given text at once."""
    return text


async def slow(seconds: float) -> str:
    """Sleep `seconds`, then say so."""
    await anyio.sleep(seconds)
    return f"slept {seconds}"


def create_app() -> ASGIApp:
    server = FastMCP("mcp1-app", log_level="WARNING", stateless_http=False)
    server.add_tool(echo)
    server.add_tool(slow)
    policy = Policy(retry_ms=20, task_after_s=0.3, task_ttl_s=60, task_poll_interval_ms=50)
    return resumable(server.streamable_http_app(), policy=policy, tasks=True)
