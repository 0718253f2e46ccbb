"""Header values of Streamable HTTP 2026-07-28: how a value travels in a header, and which
tool arguments a request repeats there.

On 2026-07-28 a request repeats in headers what load balancers route on: `Mcp-Name`
(the tool, prompt, resource or task it names) and, for a tool whose input schema
annotates a parameter `x-mcp-header: <token>`, `Mcp-Param-<token>` with that argument's
value. A value that is not plain visible ASCII travels in the transport's Base64
sentinel form (`=?base64?...?=`). The server side (the Tasks layer's `Mcp-Name` check),
the REST face and the client helper all need the same rules, so they live here, as
plain functions: one reading of the transport page, tested once.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

SENTINEL_HEAD = "=?base64?"
SENTINEL_TAIL = "?="


def encode_header_value(value: str) -> str:
    """`value` as the transport puts it in `Mcp-Name` / `Mcp-Param-*`: plain when it is
    visible ASCII (spaces inside allowed) without surrounding spaces and does not look like
    the sentinel itself, else `=?base64?<UTF-8, Base64>?=`."""
    plain = (
        all(" " <= c <= "~" for c in value)
        and value == value.strip(" ")
        and not (value.startswith(SENTINEL_HEAD) and value.endswith(SENTINEL_TAIL))
    )
    if plain:
        return value
    return SENTINEL_HEAD + base64.b64encode(value.encode()).decode("ascii") + SENTINEL_TAIL


def decode_header_value(value: str) -> str | None:
    """A header value as the transport encodes it (plain visible ASCII, or the Base64
    sentinel form); None when it is neither."""
    if value.startswith(SENTINEL_HEAD) and value.endswith(SENTINEL_TAIL) and len(value) >= 11:
        try:
            return base64.b64decode(value[len(SENTINEL_HEAD) : -len(SENTINEL_TAIL)], validate=True).decode()
        except (binascii.Error, ValueError):
            return None
    if all(" " <= c <= "~" or c == "\t" for c in value):
        return value
    return None


#: `x-mcp-header`: a tool parameter mirrored in an `Mcp-Param-<token>` header.
X_MCP_HEADER = "x-mcp-header"
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
#: Most schema positions looked at for `x-mcp-header` annotations (a schema is the app's).
_MAX_SCHEMA_NODES = 4096


def param_headers(input_schema: Any, arguments: Any) -> list[tuple[bytes, bytes]]:
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
    headers: list[tuple[bytes, bytes]] = []
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
