"""Header values of the MCP requests the REST face makes (2026-07-28), as plain functions.

On 2026-07-28 a request repeats in headers what load balancers route on: `Mcp-Name`
(the tool, prompt, resource or task it names) and, for a tool whose input schema
annotates a parameter `x-mcp-header: <token>`, `Mcp-Param-<token>` with that argument's
value. A value that is not plain visible ASCII travels in the transport's Base64
sentinel form. The app checks that headers and body agree, so the face must send exactly
what a conforming client would.
"""

from __future__ import annotations

import base64
import re
from typing import Any

from mcp_resume_asgi._http import Headers

#: `x-mcp-header`: a tool parameter mirrored in an `Mcp-Param-<token>` header.
X_MCP_HEADER = "x-mcp-header"
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
#: Most schema positions looked at for `x-mcp-header` annotations (a schema is the app's).
_MAX_SCHEMA_NODES = 4096


def param_headers(input_schema: Any, arguments: dict[str, Any]) -> Headers:
    """The `Mcp-Param-*` headers a 2026-07-28 `tools/call` of a tool with this input schema
    carries: each property reached through `properties` alone that is annotated
    `x-mcp-header: <token>` is mirrored from the arguments (a scalar: `true`/`false`, or its
    text, encoded as header values are); absent or non-scalar values get no header. A
    schema with an annotation that is no header token gets none (the tool is not usable
    that way: the app judges it)."""
    found: list[tuple[tuple[str, ...], str]] = []
    stack: list[tuple[tuple[str, ...], Any]] = [((), input_schema)]
    seen = 0
    while stack and seen < _MAX_SCHEMA_NODES:
        path, schema = stack.pop()
        seen += 1
        if not isinstance(schema, dict):
            continue
        token = schema.get(X_MCP_HEADER)
        if path and token is not None:
            if not isinstance(token, str) or not _TOKEN.match(token):
                return []
            found.append((path, token))
        properties = schema.get("properties")
        if isinstance(properties, dict):
            stack.extend(((*path, str(name)), sub) for name, sub in properties.items())
    headers: Headers = []
    for path, token in sorted(found):
        value: Any = arguments
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, str | int | float):
            text = str(value)
        else:
            continue
        headers.append((f"mcp-param-{token.lower()}".encode(), encode_header_value(text).encode()))
    return headers


def encode_header_value(value: str) -> str:
    """A header value as the transport encodes it: verbatim when plain visible ASCII, else
    the `=?base64?...?=` sentinel form (a tool name or URI with other characters)."""
    if value.isascii() and value.isprintable() and value == value.strip() and not value.startswith("=?"):
        return value
    return f"=?base64?{base64.b64encode(value.encode()).decode('ascii')}?="
