"""An ordinary MCP server, made resumable from the outside.

The server below is plain `MCPServer` code: no event store, no retry interval,
no `close_sse_stream` calls. The last lines wrap it. Run it with:

    uvicorn examples.server:app --port 8000

and point any MCP client at http://127.0.0.1:8000/mcp.
"""

import anyio
from mcp.server.mcpserver import Context, MCPServer

from mcp_resume_asgi import MemoryStore, Policy, resumable

server = MCPServer("countdown", version="1.0.0", log_level="WARNING")


async def countdown(ctx: Context, seconds: int = 5) -> str:
    """Count down, reporting progress every half second."""
    steps = seconds * 2
    for i in range(1, steps + 1):
        await anyio.sleep(0.5)
        await ctx.report_progress(i, steps, f"{(steps - i) / 2:.1f}s left")
    return "liftoff"


server.add_tool(countdown, structured_output=False)

app = resumable(
    server.streamable_http_app(),
    # Clients are told to come back after 300 ms; no connection is held longer than 2 s.
    policy=Policy(retry_ms=300, max_connection_s=2.0, max_wait_s=60),
    store=MemoryStore(max_bytes=64 * 1024 * 1024),
)
