"""The proxy: any MCP server reachable over HTTP, in any language, as an ASGI app to wrap.

`resumable(proxy_app("http://127.0.0.1:3000/mcp"), ...)` gives that server resumable
streams, Tasks, the REST face, `Idempotency-Key`, drains and several nodes. It needs httpx:
`pip install 'mcp-resume-asgi[proxy]'`.
"""

from __future__ import annotations

try:
    import httpx as _httpx  # noqa: F401  (the proxy forwards with it)
except ModuleNotFoundError as exc:  # say which extra brings it, not only what is missing
    if exc.name != "httpx":
        raise
    raise ImportError(
        "mcp_resume_asgi.proxy needs httpx, which the `proxy` extra installs: "
        "pip install 'mcp-resume-asgi[proxy]'"
    ) from None

from mcp_resume_asgi.proxy.app import ProxyApp, UpstreamURLError, proxy_app
from mcp_resume_asgi.proxy.credentials import DEFAULT_CREDENTIAL_HEADERS, ProxiedCaller

__all__ = ["DEFAULT_CREDENTIAL_HEADERS", "ProxiedCaller", "ProxyApp", "UpstreamURLError", "proxy_app"]
