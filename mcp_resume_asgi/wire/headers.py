"""Headers: how a value travels in a header (Streamable HTTP 2026-07-28), which tool arguments
a request repeats there, and reading a request's headers (`Accept` with its weights).

On 2026-07-28 a request repeats in headers what load balancers route on: `Mcp-Name`
(the tool, prompt, resource or task it names) and, for a tool whose input schema
annotates a parameter `x-mcp-header: <token>`, `Mcp-Param-<token>` with that argument's
value. A value that is not plain visible ASCII travels in the transport's Base64
sentinel form (`=?base64?...?=`). The server side (the Tasks layer's `Mcp-Name` check),
the REST face and the client helper all need the same rules, so they live here, as
plain functions: one reading of the transport page, tested once.

The request-header readers take an ASGI scope (names are lower-case bytes there) and read
nothing else.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from typing import Any

from mcp_resume_asgi.wire.asgi import Scope

__all__ = [
    "SENTINEL_HEAD",
    "SENTINEL_TAIL",
    "X_MCP_HEADER",
    "Headers",
    "accept_header",
    "acceptable",
    "accepts_sse",
    "decode_header_value",
    "encode_header_value",
    "header",
    "header_count",
    "is_json",
    "media_ranges",
    "media_types",
    "named_once",
    "param_headers",
]

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


Headers = list[tuple[bytes, bytes]]
"""Raw ASGI headers: (lower-case name, value) byte pairs."""

#: RFC 9110 qvalue: 0 to 1 with at most three decimals.
_QVALUE = re.compile(r"0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?")


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of a request header (names are lower-case in ASGI)."""
    for key, value in scope["headers"]:
        if key == name:
            decoded: str = value.decode("latin-1")  # (latin-1 decodes every byte)
            return decoded
    return None


def named_once(scope: Scope) -> dict[bytes, bytes] | None:
    """The request's headers by name when no name comes twice, made in one pass in C: a request's
    several reads of its headers are then lookups (`header`, `accept_header`, ... each walk
    them). None when a name repeats (or the headers are no list): read them with those."""
    headers = scope["headers"]
    if type(headers) is not list:
        return None
    named = dict(headers)
    return named if len(named) == len(headers) else None


def header_count(scope: Scope, name: bytes) -> int:
    return sum(1 for key, _ in scope["headers"] if key == name)


def media_ranges(value: str | None) -> list[tuple[str, float]]:
    """The media ranges of an `Accept` (or `Content-Type`) value, lower-cased, with their
    weight (RFC 9110 section 12.5.1: `q=0` means "not acceptable"). A weight that is no
    valid qvalue counts as absent (1), as servers that ignore weights would read it."""
    ranges: list[tuple[str, float]] = []
    for part in (value or "").split(","):
        name, *params = part.split(";")
        name = name.strip().lower()
        if not name:
            continue
        weight = 1.0
        for param in params:
            key, _, raw = param.partition("=")
            if key.strip().lower() == "q" and _QVALUE.fullmatch(raw.strip()):
                weight = float(raw.strip())
        ranges.append((name, weight))
    return ranges


def media_types(value: str | None) -> set[str]:
    """The media types (or ranges) a header value names, those weighted `q=0` left out."""
    return {name for name, weight in media_ranges(value) if weight > 0}


#: The longest header value whose reading is kept (`acceptable`, `is_json`): a client sends the
#: same few on every request; a long one is read each time rather than kept.
_CACHED_VALUE_LENGTH = 256


def acceptable(accept: str | None, media_type: str) -> bool:
    """Whether an `Accept` value accepts `media_type`: the most specific range naming it
    decides (`text/event-stream;q=0, */*` refuses SSE; `text/*;q=0, text/event-stream`
    accepts it), and a weight of 0 refuses."""
    if accept is not None and len(accept) > _CACHED_VALUE_LENGTH:
        return _acceptable(accept, media_type)
    return _acceptable_kept(accept, media_type)


def _acceptable(accept: str | None, media_type: str) -> bool:
    kind = media_type.split("/", 1)[0] + "/*"
    best: tuple[int, float] | None = None
    for name, weight in media_ranges(accept):
        rank = 3 if name == media_type else 2 if name == kind else 1 if name == "*/*" else 0
        if rank and (best is None or rank > best[0]):
            best = (rank, weight)
    return best is not None and best[1] > 0


#: Every request reads its `Accept` (and `Content-Type`): the answers for the usual values are kept.
_acceptable_kept = functools.lru_cache(maxsize=256)(_acceptable)


def accept_header(scope: Scope) -> str | None:
    """Every `Accept` line of the request, as one list (a list header may be split in lines)."""
    values = [value.decode("latin-1") for key, value in scope["headers"] if key == b"accept"]
    return ", ".join(values) if values else None


def accepts_sse(scope: Scope) -> bool:
    return acceptable(accept_header(scope), "text/event-stream")


def is_json(scope: Scope) -> bool:
    value = header(scope, b"content-type")
    if value is not None and len(value) > _CACHED_VALUE_LENGTH:
        return _names_json(value)
    return _names_json_kept(value)


def _names_json(content_type: str | None) -> bool:
    return "application/json" in media_types(content_type)


_names_json_kept = functools.lru_cache(maxsize=64)(_names_json)
