"""The server's tool input schemas, for the `Mcp-Param-*` headers of 2026-07-28 calls.

On 2026-07-28 a tool may annotate a parameter `x-mcp-header: <token>`, and a client
calling it "MUST" repeat that argument in an `Mcp-Param-<token>` header (load balancers
route on it; the server rejects a call whose headers and body disagree). Only the tool's
input schema says which parameters, so the session keeps what the server's `tools/list`
said: every `tools/list` answer it sees is noted, and a call of a tool not seen yet lists
the tools once (all pages, bounded) before it goes out. No I/O here.
"""

from __future__ import annotations

from typing import Any

from mcp_resume_asgi.wire.headers import param_headers

#: Most tools remembered (a server's list is the server's; a client's memory is ours).
MAX_TOOLS = 10_000
#: Most `tools/list` pages followed to find a tool.
MAX_PAGES = 20


class ToolSchemas:
    """Input schemas by tool name, as the server listed them (see the module docstring)."""

    __slots__ = ("listed", "schemas")

    def __init__(self) -> None:
        self.schemas: dict[str, Any] = {}
        self.listed = False
        """A whole list was fetched for a call: a tool not in it is not listed again for each call."""

    def note(self, result: Any) -> str | None:
        """Remember the tools of a `tools/list` result; returns its `nextCursor`, if any."""
        if not isinstance(result, dict):
            return None
        tools = result.get("tools")
        for tool in tools if isinstance(tools, list) else ():
            name = tool.get("name") if isinstance(tool, dict) else None
            if isinstance(name, str) and (name in self.schemas or len(self.schemas) < MAX_TOOLS):
                self.schemas[name] = tool.get("inputSchema")
        cursor = result.get("nextCursor")
        return cursor if isinstance(cursor, str) and cursor else None

    def needs_listing(self, name: str) -> bool:
        return name not in self.schemas and not self.listed

    def headers(self, name: str, arguments: Any) -> dict[str, str]:
        """The `Mcp-Param-*` headers of a call of `name` with `arguments` (none for a tool
        whose schema is unknown, or annotates nothing)."""
        schema = self.schemas.get(name)
        if schema is None:
            return {}
        return {key.decode(): value.decode() for key, value in param_headers(schema, arguments)}
