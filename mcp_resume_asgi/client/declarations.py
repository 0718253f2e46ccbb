"""What the transport adds to the requests it carries, so that servers keep them resumable.

Why the transport says it and not the client library above: a server keeps a
request's stream resumable only for a client that declares it can resume, and
only the transport can - the library need not know either declaration exists.

* On 2026-07-28 and later (dated revisions order as strings), a closed stream
  cancels its request and ``Last-Event-ID`` is gone, unless the request declares
  :data:`RESUMABLE_STREAMS_EXTENSION` in its per-request client capabilities
  (``params._meta["io.modelcontextprotocol/clientCapabilities"].extensions``);
  every such request gets it.
* On 2025 revisions, ``initialize`` gets ``capabilities.resumableRequests``
  (SEP-975), so the server may hand out resume tokens (``resumable_requests.py``).

The decisions change a parsed message in place and say whether it changed;
:func:`rewrite_request` builds the request to send instead.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

import httpx

#: Declared on every 2026-07-28 request this transport carries: that revision made a closed
#: stream a cancelled request and dropped `Last-Event-ID`, and mcp-resume-asgi keeps its
#: resumable streams only for requests that ask (the server's `RESUMABLE_STREAMS_EXTENSION`).
RESUMABLE_STREAMS_EXTENSION: Final = "io.github.mcp-resume-asgi/resumable-streams"
#: The first protocol revision whose requests must declare it.
SINGLE_EXCHANGE_VERSION: Final = "2026-07-28"
CLIENT_CAPABILITIES_META: Final = "io.modelcontextprotocol/clientCapabilities"
_VERSION: Final = re.compile(r"\d{4}-\d{2}-\d{2}")


def is_single_exchange(version: str | None) -> bool:
    """A revision (an ISO date, so they order as strings) from 2026-07-28 on."""
    return (
        version is not None and _VERSION.fullmatch(version) is not None and version >= SINGLE_EXCHANGE_VERSION
    )


def declare_resumable_streams(message: dict[str, Any]) -> bool:
    """Add `RESUMABLE_STREAMS_EXTENSION` to a 2026-07-28 request's per-request capabilities.

    Without it the server treats a closed stream as the request's cancellation and
    sends nothing to resume from; with it, this transport's resumes keep working.
    True when ``message`` changed; a request whose ``params``, ``_meta`` or
    capabilities are not objects is left as the client wrote it.
    """
    params = message.setdefault("params", {})
    if not isinstance(params, dict):
        return False
    meta = params.setdefault("_meta", {})
    capabilities = meta.setdefault(CLIENT_CAPABILITIES_META, {}) if isinstance(meta, dict) else None
    extensions = capabilities.setdefault("extensions", {}) if isinstance(capabilities, dict) else None
    if not isinstance(extensions, dict) or RESUMABLE_STREAMS_EXTENSION in extensions:
        return False
    extensions[RESUMABLE_STREAMS_EXTENSION] = {}
    return True


def advertise_resumable_requests(message: dict[str, Any]) -> bool:
    """Add `capabilities.resumableRequests` to an `initialize` request (SEP-975); True if it changed.

    The transport resumes requests itself, so it may tell the server it can; the
    client library above it need not know the capability exists.
    """
    params = message.get("params")
    capabilities = params.get("capabilities") if isinstance(params, dict) else None
    if not isinstance(capabilities, dict) or "resumableRequests" in capabilities:
        return False
    capabilities["resumableRequests"] = {}
    return True


def rewrite_request(
    request: httpx.Request, message: dict[str, Any], *, resumable_requests: bool
) -> httpx.Request:
    """The request to send for the JSON-RPC request ``message`` (the parsed body of ``request``).

    ``initialize`` advertises resumable requests when ``resumable_requests``; a request
    of a single-exchange revision (its ``MCP-Protocol-Version`` header) declares resumable
    streams; anything else, or a message already saying so, is sent as it came.
    """
    if resumable_requests and message.get("method") == "initialize":
        changed = advertise_resumable_requests(message)
    elif is_single_exchange(request.headers.get("mcp-protocol-version")):
        changed = declare_resumable_streams(message)
    else:
        changed = False
    return with_body(request, message) if changed else request


def with_body(request: httpx.Request, message: dict[str, Any]) -> httpx.Request:
    """``request`` with ``message`` as its JSON body (its other headers and extensions kept)."""
    content = json.dumps(message, separators=(",", ":")).encode()
    headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"content-length"]
    return httpx.Request(
        request.method, request.url, headers=headers, content=content, extensions=request.extensions
    )
