"""mcp-resume-asgi: resumable Streamable HTTP for any ASGI MCP server.

Wrap the app - `resumable(app)` or `Middleware(ResumeMiddleware)` - and its SSE
responses get event ids, priming events and `retry:` fields, a `Link rel="stream"`
URL, survive dropped connections and can be closed by the server at will.
"""

from mcp_resume_asgi.middleware import ResumeMiddleware, default_principal, resumable
from mcp_resume_asgi.policy import Policy, Route
from mcp_resume_asgi.resumable_requests import ResumableRequestsMiddleware
from mcp_resume_asgi.resume_tokens import ResumeTokenMiddleware
from mcp_resume_asgi.store import (
    GapError,
    MemoryStore,
    SessionInfo,
    Store,
    StoreFullError,
    StreamMeta,
    StreamState,
)

__all__ = [
    "GapError",
    "MemoryStore",
    "Policy",
    "ResumableRequestsMiddleware",
    "ResumeMiddleware",
    "ResumeTokenMiddleware",
    "Route",
    "SessionInfo",
    "Store",
    "StoreFullError",
    "StreamMeta",
    "StreamState",
    "default_principal",
    "resumable",
]
