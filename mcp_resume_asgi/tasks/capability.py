"""Negotiating the Tasks extension: who declared it, what the app sees, what the server says.

A client declares the extension in its capabilities (per request in `_meta` on
2026-07-28, or at `initialize` on 2025 revisions); the server advertises it under
`capabilities.extensions` of its `server/discover` (and `initialize`) answer.
The app knows nothing of it: the middleware serves tasks, so the declaration is
taken out of the per-request capabilities the app sees (an app with tasks of its
own would otherwise answer with a task the middleware cannot serve), and the
advertisement is added to the app's answer.
"""

from __future__ import annotations

import copy
from typing import Any

from mcp_resume_asgi.tasks.record import EXTENSION
from mcp_resume_asgi.wire import jsonrpc as p

CLIENT_CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"
#: SEP-2663 / 2026-07-28: "Missing Required Client Capability".
MISSING_REQUIRED_CAPABILITY = -32021


def declares(capabilities: Any) -> bool:
    """Whether client capabilities include the extension (`extensions.<id>`, any object)."""
    if not isinstance(capabilities, dict):
        return False
    extensions = capabilities.get("extensions")
    return isinstance(extensions, dict) and isinstance(extensions.get(EXTENSION), dict)


def stripped(message: dict[str, Any]) -> dict[str, Any] | None:
    """A copy of a request without the extension in its per-request capabilities; None when
    it declares none there (the request goes to the app as it came)."""
    declared = p.request_capabilities(message)
    return p.without_extension(message, EXTENSION) if declared is not None and declares(declared) else None


def stripped_initialize(message: dict[str, Any]) -> dict[str, Any] | None:
    """A copy of an `initialize` request without the extension among the capabilities the
    session declares (2025 revisions); None when it declares none (it goes as it came)."""
    params = message.get("params")
    declared = params.get("capabilities") if isinstance(params, dict) else None
    if not isinstance(params, dict) or not isinstance(declared, dict) or not declares(declared):
        return None
    capabilities = dict(declared)
    extensions = dict(capabilities["extensions"])
    del extensions[EXTENSION]
    if extensions:
        capabilities["extensions"] = extensions
    else:
        del capabilities["extensions"]
    out = copy.copy(message)
    out["params"] = {**params, "capabilities": capabilities}
    return out


def advertise(answer: Any, request_id: Any) -> bool:
    """Add the extension to the server capabilities of an `initialize` or `server/discover`
    answer (in place); False when `answer` is not that request's successful answer."""
    if not isinstance(answer, dict) or answer.get("id") != request_id or "error" in answer:
        return False
    result = answer.get("result")
    capabilities = result.get("capabilities") if isinstance(result, dict) else None
    if not isinstance(capabilities, dict):
        return False
    extensions = capabilities.get("extensions")
    if extensions is None:
        extensions = capabilities["extensions"] = {}
    elif not isinstance(extensions, dict):
        return False
    extensions.setdefault(EXTENSION, {})
    return True


def missing_capability(request_id: Any) -> dict[str, Any]:
    """The -32021 error naming the extension as the required capability."""
    data: dict[str, Any] = {"requiredCapabilities": {"extensions": {EXTENSION: {}}}}
    return p.error_message(
        request_id, MISSING_REQUIRED_CAPABILITY, "Missing required client capability", data
    )
