"""The 2026-07-28 wire on the client side: what every request carries, and which era a server speaks.

Why apart from the session: revision 2026-07-28 removed the `initialize` handshake
and sessions, so what a 2025 session said once - its protocol version and
capabilities - now goes with every request, in `params._meta`, mirrored into
headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`) that intermediaries
route on and servers check against the body (a mismatch is `400` HeaderMismatch).
Getting that right is a matter of plain data, decided here without I/O:

* :class:`ModernWire` stamps one request: its `_meta` (protocol version, client
  info, client capabilities - the Tasks extension among them when tasks are on,
  and this project's `io.github.mcp-resume-asgi/resumable-streams` when the
  transport resumes streams) and its headers;
* :func:`discover_verdict` reads the answer to `server/discover` - the request a
  2026-07-28 client starts with instead of `initialize` - as "this server speaks
  2026-07-28", "fall back to the `initialize` handshake" (in auto mode, when the
  server is evidently of the 2025 era) or "refuse" (it is modern but will not
  serve us, or it could not be reached: an outage is never an era verdict).
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from mcp_resume_asgi.wire.headers import encode_header_value

from .declarations import RESUMABLE_STREAMS_EXTENSION
from .errors import McpError, SessionError

#: The revision this module speaks, and what an auto-mode session falls back to.
MODERN_VERSION: Final = "2026-07-28"
FALLBACK_VERSION: Final = "2025-11-25"
#: `protocol_version="auto"`: probe with `server/discover`, fall back to `initialize`.
AUTO: Final = "auto"
#: The handshake-era revisions a fallback may meet in a server's `supported` list.
HANDSHAKE_VERSIONS: Final = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"})

PROTOCOL_VERSION_META: Final = "io.modelcontextprotocol/protocolVersion"
CLIENT_INFO_META: Final = "io.modelcontextprotocol/clientInfo"
CLIENT_CAPABILITIES_META: Final = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_META: Final = "io.modelcontextprotocol/serverInfo"

#: Method -> the param mirrored into `Mcp-Name` (Streamable HTTP, "Standard Request Headers").
NAME_BEARING: Final = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}

#: Errors only a 2026-07-28 server answers: seeing one, a client must not fall back.
HEADER_MISMATCH: Final = -32020
MISSING_REQUIRED_CAPABILITY: Final = -32021
UNSUPPORTED_VERSION: Final = -32022
#: HTTP statuses with which a 2025-era server turns away a request it cannot place.
_LEGACY_REFUSALS: Final = frozenset({400, 404, 405})


JSONObject = dict[str, Any]


Mode = Literal["legacy", "modern", "auto"]


def mode_of(protocol_version: str) -> Mode:
    """How a session asked for `protocol_version` starts: `initialize`, `server/discover`, or both."""
    if protocol_version == AUTO:
        return "auto"
    return "modern" if is_modern(protocol_version) else "legacy"


def is_modern(version: str) -> bool:
    """A revision (an ISO date, so they order as strings) from 2026-07-28 on."""
    return len(version) == 10 and version[4] == version[7] == "-" and version >= MODERN_VERSION


@dataclass(frozen=True)
class ModernWire:
    """How this client's 2026-07-28 requests are dressed; no I/O.

    `capabilities` are the client capabilities sent with every request (the
    session's, already with the Tasks extension when tasks are on);
    `resumable_streams` adds `RESUMABLE_STREAMS_EXTENSION` to them - only when the
    HTTP transport really resumes, or the server would close streams it expects us
    to resume.
    """

    version: str
    client_info: Mapping[str, Any]
    capabilities: Mapping[str, Any]
    resumable_streams: bool = False

    def request_capabilities(self) -> JSONObject:
        out = copy.deepcopy(dict(self.capabilities))
        if self.resumable_streams:
            extensions = out.get("extensions")
            out["extensions"] = {
                **(extensions if isinstance(extensions, dict) else {}),
                RESUMABLE_STREAMS_EXTENSION: {},
            }
        return out

    def params(self, params: Mapping[str, Any] | None) -> JSONObject:
        """A copy of `params` whose `_meta` carries the per-request fields (the caller's
        other `_meta` entries - a progress token, a resume token - kept)."""
        out = dict(params or {})
        meta = out.get("_meta")
        out["_meta"] = {
            **(meta if isinstance(meta, dict) else {}),
            PROTOCOL_VERSION_META: self.version,
            CLIENT_INFO_META: dict(self.client_info),
            CLIENT_CAPABILITIES_META: self.request_capabilities(),
        }
        return out

    def headers(self, method: str, params: Mapping[str, Any] | None) -> dict[str, str]:
        """`MCP-Protocol-Version`, `Mcp-Method`, and `Mcp-Name` where the method names something."""
        headers = {"mcp-protocol-version": self.version, "mcp-method": method}
        key = NAME_BEARING.get(method)
        name = params.get(key) if key is not None and params is not None else None
        if isinstance(name, str):
            headers["mcp-name"] = encode_header_value(name)
        return headers


# -- which era a server speaks --------------------------------------------------------------------


@dataclass(frozen=True)
class Adopt:
    """The server speaks 2026-07-28: use the discover result."""

    result: JSONObject


@dataclass(frozen=True)
class FallBack:
    """The server is of the handshake era: `initialize` instead (auto mode only)."""

    why: str


Verdict = Adopt | FallBack


def discover_verdict(
    version: str, mode: Literal["modern", "auto"], *, result: Any = None, error: Exception | None = None
) -> Verdict:
    """What the answer to `server/discover` at `version` means; raises when nothing can go on.

    `result` is the discover result, or `error` what asking raised (:class:`McpError`
    for a JSON-RPC error, :class:`SessionError` for the rest). In auto mode a server
    falls back when it is evidently not of the 2026 era: it turns the request away
    the 2025 way (`400`/`404`/`405`, a JSON-RPC error that no modern server uses for
    this), answers with something that is no discover result, or advertises only
    handshake-era versions. It does not fall back on the errors only a modern server
    gives (`HeaderMismatch`, `MissingRequiredClientCapability`, an unsupported
    version whose `supported` list holds no handshake-era one), nor on an exchange
    that broke or a `5xx`: an outage says nothing about the era.
    """
    if error is None:
        versions = result.get("supportedVersions") if isinstance(result, dict) else None
        if isinstance(versions, list) and version in versions and isinstance(result, dict):
            return Adopt(result)
        why = (
            f"its server/discover answer does not list {version}"
            if isinstance(versions, list)
            else "its server/discover answer is not a discover result"
        )
        if mode == "auto":
            return FallBack(why)
        raise SessionError(f"the server does not speak {version}: {why}")
    if isinstance(error, McpError):
        if error.code in (HEADER_MISMATCH, MISSING_REQUIRED_CAPABILITY):
            raise error
        if error.code == UNSUPPORTED_VERSION:
            supported = error.data.get("supported") if isinstance(error.data, dict) else None
            legacy = isinstance(supported, list) and any(v in HANDSHAKE_VERSIONS for v in supported)
            if mode == "auto" and legacy:
                return FallBack(f"it supports only {', '.join(map(str, supported or []))}")
            raise error
        if mode == "auto":
            return FallBack(f"it answered server/discover with error {error.code}: {error.message}")
        raise error
    if (
        mode == "auto"
        and isinstance(error, SessionError)
        and error.status_code in _LEGACY_REFUSALS
        and error.__cause__ is None
    ):
        return FallBack(f"it answered server/discover with HTTP {error.status_code}")
    raise error


async def discover(
    send: Callable[[], Awaitable[JSONObject]], version: str, mode: Literal["modern", "auto"]
) -> Verdict:
    """Send `server/discover` (`send`) and judge the answer (:func:`discover_verdict`)."""
    try:
        result = await send()
    except (McpError, SessionError) as exc:
        return discover_verdict(version, mode, error=exc)
    return discover_verdict(version, mode, result=result)


def server_info_of(discover_result: Mapping[str, Any]) -> JSONObject:
    """The server's identity, which 2026-07-28 puts in a result's `_meta`."""
    meta = discover_result.get("_meta")
    info = meta.get(SERVER_INFO_META) if isinstance(meta, dict) else None
    return info if isinstance(info, dict) else {}
