"""The proxy: any MCP server reachable over HTTP, in any language, as an ASGI app to wrap.

`resumable(proxy_app("http://127.0.0.1:3000/mcp"), ...)` gives that server resumable
streams, Tasks, the REST face, `Idempotency-Key`, drains and several nodes. It needs httpx:
`pip install 'mcp-resume-asgi[proxy]'`.
"""

from __future__ import annotations

from mcp_resume_asgi.proxy.app import ProxyApp, UpstreamURLError, proxy_app
from mcp_resume_asgi.proxy.credentials import DEFAULT_CREDENTIAL_HEADERS, ProxiedCaller

__all__ = ["DEFAULT_CREDENTIAL_HEADERS", "ProxiedCaller", "ProxyApp", "UpstreamURLError", "proxy_app"]
