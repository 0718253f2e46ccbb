"""The transport's header rules, for a request the middleware answers itself.

The app checks the headers of every request it answers (`Accept`,
`MCP-Protocol-Version`, the 2026-07-28 routing headers), so a request that reaches
it with bad ones is refused before anything runs. A request the middleware answers
in its place (`tasks/get`, `requests/resume`...) must be refused the same way, or a
client, a proxy or a conformance suite sees two servers in one. The rules here are
the transport page's (2026-07-28 "Request Metadata", "Server Validation"), in the
order and with the statuses the stock `mcp` server gives them:

* the first `MCP-Protocol-Version` value picks the era: absent or a handshake
  revision (2024-11-05 .. 2025-11-25) is a session's request; anything else is
  judged as a 2026-07-28 request;
* either must accept `application/json` (else 406; the middleware answers only
  requests that accept `text/event-stream`, the other half of the rule);
* a 2026-07-28 request must send `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` at
  most once each; carry `_meta` with the protocol version and client capabilities
  (-32602); repeat the version, the method and (for a tool, prompt or resource) its
  name in the headers (-32020); and name a
  revision the server serves (-32022, with the ones it does). Each is a 400.

What the session rules need beyond headers (is the session known?) is the app's to
say, and asked of it where the store cannot tell (`http/middleware.py`). Plain data in,
plain data out: no I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.headers import Headers, acceptable, decode_header_value

__all__ = [
    "HANDSHAKE_VERSIONS",
    "HEADER_MISMATCH",
    "SINGLE_EXCHANGE_VERSIONS",
    "UNSUPPORTED_PROTOCOL_VERSION",
    "Era",
    "HeaderRefusal",
    "era_of",
    "refusal",
]

#: Revisions a client reaches through `initialize` (a session's requests name one of these).
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
#: Revisions served one request at a time (no session).
SINGLE_EXCHANGE_VERSIONS = (p.SINGLE_EXCHANGE_VERSION,)
HEADER_MISMATCH = -32020
UNSUPPORTED_PROTOCOL_VERSION = -32022
_ROUTING_HEADERS = (b"mcp-protocol-version", b"mcp-method", b"mcp-name")
_PROTOCOL_VERSION_META = "io.modelcontextprotocol/protocolVersion"
#: Methods whose `Mcp-Name` repeats a parameter (the Tasks layer checks `tasks/*` its own way).
_NAME_PARAMS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


class Era(enum.Enum):
    SESSION = "session"
    """No `MCP-Protocol-Version`, or a handshake revision: the session transport's rules."""
    SINGLE_EXCHANGE = "single exchange"
    """Anything else: judged as a 2026-07-28 request (an unknown revision is refused as one)."""


@dataclass(frozen=True, slots=True)
class HeaderRefusal:
    """The answer to a request whose headers break the transport's rules."""

    status: int
    body: bytes
    """A JSON-RPC error, or empty (a 2026-07-28 406 has none)."""


def era_of(headers: Headers) -> Era:
    """Which transport's rules govern the request (the first `MCP-Protocol-Version` decides)."""
    version = next((value for key, value in headers if key == b"mcp-protocol-version"), None)
    if version is None or version.decode("latin-1") in HANDSHAKE_VERSIONS:
        return Era.SESSION
    return Era.SINGLE_EXCHANGE


def refusal(headers: Headers, message: dict[str, Any]) -> HeaderRefusal | None:
    """Why a JSON-RPC request the middleware would answer itself is refused, or None."""
    accept = _joined(headers, b"accept")
    request_id = message.get("id")
    # (The middleware answers only requests that accept SSE; whether JSON alone would do
    # is the app's setting, so both eras ask for JSON only here.)
    if era_of(headers) is Era.SESSION:
        if not acceptable(accept, "application/json"):
            text = "Not Acceptable: Client must accept both application/json and text/event-stream"
            return HeaderRefusal(406, p.dumps(p.error_message(None, p.INVALID_REQUEST, text)))
        return None
    if not acceptable(accept, "application/json"):
        return HeaderRefusal(406, b"")
    for routing in _ROUTING_HEADERS:
        if sum(1 for key, _ in headers if key == routing) > 1:
            return _error(request_id, HEADER_MISMATCH, f"{routing.decode()} header appears more than once")
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict):
        text = (
            f"params._meta must be an object carrying the required {_PROTOCOL_VERSION_META!r} "
            f"and {p.CLIENT_CAPABILITIES_META!r} envelope keys"
        )
        return _error(request_id, p.INVALID_PARAMS, text)
    missing = [key for key in (_PROTOCOL_VERSION_META, p.CLIENT_CAPABILITIES_META) if key not in meta]
    if missing:
        text = f"params._meta is missing the required envelope key(s): {', '.join(missing)}"
        return _error(request_id, p.INVALID_PARAMS, text)
    version = _joined(headers, b"mcp-protocol-version")
    if version != meta[_PROTOCOL_VERSION_META]:
        text = "mcp-protocol-version header does not match the request envelope's protocol version"
        return _error(request_id, HEADER_MISMATCH, text)
    method = message.get("method")
    if _joined(headers, b"mcp-method") != method:
        return _error(
            request_id, HEADER_MISMATCH, "mcp-method header does not match the request body's method"
        )
    named = _NAME_PARAMS.get(method) if isinstance(method, str) else None
    if named is not None and isinstance(params, dict) and params.get(named) is not None:
        name = _joined(headers, b"mcp-name")
        if (decode_header_value(name) if name is not None else None) != params[named]:
            text = f"mcp-name header does not match the request body's {named!r} parameter"
            return _error(request_id, HEADER_MISMATCH, text)
    if version not in SINGLE_EXCHANGE_VERSIONS:
        data = {"supported": list(SINGLE_EXCHANGE_VERSIONS), "requested": version}
        return _error(request_id, UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version", data)
    return None


def _joined(headers: Headers, name: bytes) -> str | None:
    values = [value.decode("latin-1") for key, value in headers if key == name]
    return ", ".join(values) if values else None


def _error(request_id: Any, code: int, text: str, data: Any = None) -> HeaderRefusal:
    return HeaderRefusal(400, p.dumps(p.error_message(request_id, code, text, data)))
