"""An `MCPServer` object at module level, as a user's server module has it: what
`mcp-resume serve tests.apps.served_mcpserver:mcp` finds and serves (tests/test_cli.py)."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("served-by-the-cli")


@mcp.tool()
async def echo(text: str) -> str:
    """Return the text."""
    return text
