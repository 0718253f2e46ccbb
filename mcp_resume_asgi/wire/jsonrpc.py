"""What the middleware needs to know about MCP and JSON-RPC, and nothing more.

The middleware speaks the wire protocol itself (it must not need the `mcp` SDK),
so the few facts it relies on live here: header names, how protocol revisions
compare, how to tell a final response or a server-to-client request from the
other messages on a stream, and how to word an error.
"""

from __future__ import annotations

import enum
import json
import re
from typing import Any

__all__ = [
    "CLIENT_CAPABILITIES_META",
    "DEFAULT_VERSION",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "LAST_EVENT_ID_HEADER",
    "MAX_DEPTH",
    "PARSE_ERROR",
    "RESUMABLE_STREAMS_EXTENSION",
    "RESUMABLE_VERSION",
    "SESSION_HEADER",
    "SINGLE_EXCHANGE_VERSION",
    "STREAM_ERROR",
    "VERSION_HEADER",
    "Kind",
    "asks_resumable_streams",
    "at_least",
    "body_for_app",
    "classify",
    "dumps",
    "error_message",
    "error_status",
    "is_response",
    "loads_wire",
    "nesting_depth",
    "non_finite",
    "request_capabilities",
    "response_id",
    "valid_id",
    "valid_version",
    "without_extension",
]

SESSION_HEADER = "mcp-session-id"
VERSION_HEADER = "mcp-protocol-version"
LAST_EVENT_ID_HEADER = "last-event-id"

#: Priming events and at-will closes need clients of this revision or later (SEP-1699).
RESUMABLE_VERSION = "2025-11-25"
#: From this revision on there are no sessions and closing the response stream cancels.
SINGLE_EXCHANGE_VERSION = "2026-07-28"
#: The revision a server assumes when a request names none (spec, "Protocol Version Header").
DEFAULT_VERSION = "2025-03-26"

#: Where a 2026-07-28 request carries its client's capabilities (there are no sessions).
CLIENT_CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"
#: The extension a 2026-07-28 client declares, per request, to keep this project's
#: resumable streams (priming, at-will closes, `Last-Event-ID`) that the revision removed:
#: without it a closed stream is a cancelled request, as the revision says.
RESUMABLE_STREAMS_EXTENSION = "io.github.mcp-resume-asgi/resumable-streams"

_VERSION = re.compile(r"^\d{4}-\d{2}-\d{2}$")
#: A `\uD800`-`\uDFFF` escape: half of a surrogate pair, or a lone one UTF-8 cannot carry.
_SURROGATE_ESCAPE = re.compile(rb"\\[uU][dD][89a-fA-F]")
#: Deepest nesting the middleware takes on (the app still gets deeper bodies, untouched).
MAX_DEPTH = 128

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
#: Implementation-defined server error: the stream cannot be continued.
STREAM_ERROR = -32000


#: How a 2026-07-28 server maps the JSON-RPC errors it answers to HTTP statuses (the stock
#: server's table; unlisted codes, and every error of earlier revisions, are a 200).
_SINGLE_EXCHANGE_ERROR_STATUS = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    -32020: 400,  # HeaderMismatch
    -32021: 400,  # Missing Required Client Capability
    -32022: 400,  # Unsupported Protocol Version
    -32601: 404,  # Method not found
}


def error_status(version: str | None, code: Any) -> int:
    """The HTTP status of a JSON-RPC error answered at `version` (see the table above)."""
    if not at_least(version, SINGLE_EXCHANGE_VERSION):
        return 200
    return _SINGLE_EXCHANGE_ERROR_STATUS.get(code, 200)


def valid_version(value: str | None) -> str | None:
    return value if value is not None and _VERSION.match(value) else None


def at_least(version: str | None, minimum: str) -> bool:
    """Revisions are ISO dates, so they order as strings; anything else counts as old."""
    return valid_version(version) is not None and version is not None and version >= minimum


def request_capabilities(message: dict[str, Any]) -> dict[str, Any] | None:
    """The capabilities a request declares in its own `_meta` (2026-07-28), if any."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    declared = meta.get(CLIENT_CAPABILITIES_META) if isinstance(meta, dict) else None
    return declared if isinstance(declared, dict) else None


def asks_resumable_streams(message: dict[str, Any]) -> bool:
    """Whether a request declares `RESUMABLE_STREAMS_EXTENSION` among its capabilities' extensions."""
    declared = request_capabilities(message)
    extensions = declared.get("extensions") if declared is not None else None
    return isinstance(extensions, dict) and RESUMABLE_STREAMS_EXTENSION in extensions


def without_extension(message: dict[str, Any], name: str) -> dict[str, Any] | None:
    """A copy of a request without extension `name` in its per-request capabilities (2026-07-28
    `_meta`); None when it declares no such extension there. For a layer that serves an
    extension itself: the app is not to see a declaration it might act on."""
    declared = request_capabilities(message)
    extensions = declared.get("extensions") if declared is not None else None
    if declared is None or not isinstance(extensions, dict) or name not in extensions:
        return None
    capabilities = dict(declared)
    rest = {key: value for key, value in extensions.items() if key != name}
    if rest:
        capabilities["extensions"] = rest
    else:
        del capabilities["extensions"]
    params = message["params"]
    out = dict(message)
    out["params"] = {**params, "_meta": {**params["_meta"], CLIENT_CAPABILITIES_META: capabilities}}
    return out


class Kind(enum.Enum):
    NOTIFICATION = 1
    SERVER_REQUEST = 2
    RESPONSE = 3
    OTHER = 4


#: How a response starts when written compactly, members in the spec's order (the SDKs'
#: serialisers, `dumps`): the id and then `"result"` or `"error"` follow.
_RESPONSE_HEAD = b'{"jsonrpc":"2.0","id":'
_AFTER_ID = (b'"result"', b'"error"')
#: Longest integer id read from the head (longer ones are left to `json.loads`).
_MAX_ID_DIGITS = 20


def classify(data: bytes) -> tuple[Kind, Any]:
    """The kind of JSON-RPC message an SSE event carries, and its id.

    Most events on a busy stream are notifications; they carry no `"id"` member,
    so they are recognised without decoding the JSON. A response written as the
    SDKs write one (`_RESPONSE_HEAD`) is recognised from its head (`response_id`),
    so a large result is not decoded just to learn that it is one.
    """
    if data.startswith(_RESPONSE_HEAD):
        found = response_id(data)
        if found is not None:
            return Kind.RESPONSE, found[0]
    if b'"id"' not in data:
        return Kind.NOTIFICATION, None
    try:
        message = json.loads(data)
    except (ValueError, RecursionError):
        return Kind.OTHER, None
    if not isinstance(message, dict) or "id" not in message:
        return Kind.NOTIFICATION if isinstance(message, dict) else Kind.OTHER, None
    if "method" in message:
        return Kind.SERVER_REQUEST, message["id"]
    if "result" in message or "error" in message:
        return Kind.RESPONSE, message["id"]
    return Kind.OTHER, None


def response_id(data: bytes) -> tuple[Any] | None:
    """`(id,)` when `data` is a JSON-RPC response read from its head alone, else None (the
    caller decodes it).

    The head is `{"jsonrpc":"2.0","id":<id>,"result"` or `...,"error"`, compact, with an
    integer or string id, and the payload ends with `}`. The id ends at the first `,"`: a
    JSON string cannot hold that pair unescaped (a quote inside one is `\\"`). The rest of
    the payload is not read: a body that starts so but is not JSON is taken as the response
    it began to be (its client cannot read it either way).
    """
    start = len(_RESPONSE_HEAD)
    end = data.find(b',"', start)
    if end < 0 or not data.endswith(b"}"):
        return None
    after = end + 1
    if not (data.startswith(_AFTER_ID[0], after) or data.startswith(_AFTER_ID[1], after)):
        return None
    token = data[start:end]
    first = token[:1]
    if first == b'"':
        if len(token) < 2 or not token.endswith(b'"'):
            return None
        text = token[1:-1]
        if text.isascii() and b'"' not in text and b"\\" not in text:
            plain = text.decode("ascii")
            if plain.isprintable():  # (no control character: JSON would refuse it raw)
                return (plain,)
        try:
            value = json.loads(token)
        except (ValueError, RecursionError):
            return None
        return (value,) if isinstance(value, str) else None
    digits = token[1:] if first == b"-" else token
    if not digits.isdigit() or len(digits) > _MAX_ID_DIGITS or (digits[:1] == b"0" and len(digits) > 1):
        return None
    return (int(token),)


def loads_wire(body: bytes) -> Any | None:
    """`body` decoded, or None when it is not JSON the middleware can handle and send on
    (`NaN` and `Infinity` are not JSON: `non_finite` tells them apart).

    JSON admits what the wire cannot take back: a lone surrogate (`"\\ud800"`) has no
    UTF-8 form, and nesting deep enough breaks Python's encoder (`RecursionError`).
    The middleware must neither crash on such a body nor refuse what the app might
    accept, so it leaves the request to the app, untouched. The checks cost nothing
    on ordinary bodies: a regex search and a bracket count, both in C.
    """
    try:
        value = json.loads(body, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        return None
    if body.count(b"[") + body.count(b"{") > MAX_DEPTH and nesting_depth(value) > MAX_DEPTH:
        return None
    if _SURROGATE_ESCAPE.search(body) is not None:
        try:
            json.dumps(value, ensure_ascii=False).encode()
        except (UnicodeEncodeError, RecursionError, ValueError):
            return None
    return value


class _NonFinite(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise _NonFinite(name)


def non_finite(body: bytes) -> bool:
    """Whether `body` would be JSON but for a `NaN`, `Infinity` or `-Infinity` (Python's
    reader takes them; JSON has no such numbers, and an answer carrying one back is no JSON
    either): a parse error, not something to pass on."""
    if b"NaN" not in body and b"Infinity" not in body:
        return False
    try:
        json.loads(body, parse_constant=_refuse_constant)
    except _NonFinite:
        return True
    except (ValueError, RecursionError):
        return False
    return False


def nesting_depth(value: Any) -> int:
    """How deeply `value` nests (iteratively: the value may be deeper than the stack allows)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in item)
    return deepest


def valid_id(value: Any) -> bool:
    return (isinstance(value, str) and len(value) <= 256) or (
        isinstance(value, int) and not isinstance(value, bool)
    )


def error_message(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def dumps(message: Any) -> bytes:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()


def is_response(message: Any) -> bool:
    """A JSON-RPC response or error object (what a client answers a server request with)."""
    return (
        isinstance(message, dict)
        and message.get("jsonrpc") == "2.0"
        and "method" not in message
        and "id" in message
        and valid_id(message["id"])
        and (("result" in message) != ("error" in message))
    )


def body_for_app(body: bytes, message: dict[str, Any]) -> bytes:
    """The request's body as the app gets it: without this middleware's own extension
    (SEP-975's opt-in), which the app is not told of."""
    if asks_resumable_streams(message):
        plain = without_extension(message, RESUMABLE_STREAMS_EXTENSION)
        if plain is not None:
            return dumps(plain)
    return body
