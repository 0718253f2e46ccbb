"""One node of a deployment whose tool may be run again when its node is lost (issue 22, item 2).

A stateless `MCPServer` app (any node serves any request: a call re-run elsewhere is accepted
there), with the tool `counted(seconds, steps, tag)`: it counts its runs in Redis (`INCR` of
``<MCP_RESUME_PREFIX>runs:<tag>``, so a test reads how often it ran, on any node, a node killed
included), then sends `steps` progress notifications over `seconds`, counts that it got to
its end (``<MCP_RESUME_PREFIX>done:<tag>``) and returns 'counted {tag}'.
Wrapped with `tasks=True` on a shared `RedisStore`, tagged like `multinode_app` (``x-node``).

Environment as for `multinode_app` (``MCP_RESUME_PREFIX``, ``MCP_RESUME_SECRET``,
``MCP_RESUME_POLICY_JSON``, ``MCP_RESUME_OPTIONS_JSON``), and ``MCP_RESUME_RERUN``: ``1`` puts
`counted` on a route with `Policy(rerun_on_loss=True)`, anything else leaves it off.

Note: no ``from __future__ import annotations`` here, so that ``MCPServer`` sees the real
``Context`` annotation of the tool.
"""

import os

import anyio
import redis.asyncio as aioredis
from mcp.server.mcpserver import Context, MCPServer
from starlette.types import ASGIApp

from mcp_resume_asgi import Policy, resumable
from mcp_resume_asgi.store import RedisStore
from tests.apps.multinode_app import NodeTag, _json_env
from tests.support.stores import redis_url


def runs_key(prefix: str, tag: str) -> str:
    """The Redis key counting the runs of `counted(tag=tag)`."""
    return f"{prefix}runs:{tag}"


def done_key(prefix: str, tag: str) -> str:
    """The Redis key counting the runs of `counted(tag=tag)` that reached their end."""
    return f"{prefix}done:{tag}"


async def counted(ctx: Context, seconds: float = 4, steps: int = 40, tag: str = "counted") -> str:
    """Count this run in Redis, send `steps` progress notifications over `seconds`, return 'counted {tag}'."""
    client = aioredis.Redis.from_url(os.environ.get("MCP_RESUME_REDIS_URL") or redis_url())
    try:
        await client.incr(runs_key(os.environ["MCP_RESUME_PREFIX"], tag))
    finally:
        await client.aclose()
    for i in range(1, steps + 1):
        await anyio.sleep(seconds / steps)
        await ctx.report_progress(i, steps, f"step {i}")
    client = aioredis.Redis.from_url(os.environ.get("MCP_RESUME_REDIS_URL") or redis_url())
    try:
        await client.incr(done_key(os.environ["MCP_RESUME_PREFIX"], tag))
    finally:
        await client.aclose()
    return f"counted {tag}"


def create_app() -> ASGIApp:
    server = MCPServer("rerun-test-app", version="0.0.1", log_level="WARNING")
    server.add_tool(counted, structured_output=False)
    inner = server.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=True,
        event_store=None,
        retry_interval=None,
        host="127.0.0.1",
    )
    policy = Policy(**_json_env("MCP_RESUME_POLICY_JSON"))
    rerun = os.environ.get("MCP_RESUME_RERUN") == "1"
    app = resumable(
        inner,
        policy=policy,
        routes={"tool:counted": policy.replace(rerun_on_loss=rerun)},
        store=RedisStore(
            os.environ.get("MCP_RESUME_REDIS_URL") or redis_url(), prefix=os.environ["MCP_RESUME_PREFIX"]
        ),
        secret=os.environ["MCP_RESUME_SECRET"],
        tasks=True,
        **_json_env("MCP_RESUME_OPTIONS_JSON"),
    )
    return NodeTag(app)
