"""mcp-resume-asgi: resumable Streamable HTTP for any ASGI MCP server.

Wrap the app - `resumable(app)` or `Middleware(ResumeMiddleware)` - and its SSE
responses get event ids, priming events and `retry:` fields, a `Link rel="stream"`
URL, survive dropped connections and can be closed by the server at will.

`RedisStore` is imported on first use, so `import mcp_resume_asgi` never imports
`redis` (an optional extra: `pip install 'mcp-resume-asgi[redis]'`).
"""

from typing import TYPE_CHECKING, Any

from mcp_resume_asgi.api import (
    RestOptions,
    ResumableApp,
    ResumableRequestsOptions,
    ResumeTokenOptions,
    resumable,
)
from mcp_resume_asgi.engine.relayed_caller import RelayedUser
from mcp_resume_asgi.features.resumable_requests import ResumableRequestsMiddleware
from mcp_resume_asgi.features.resume_tokens import ResumeTokenMiddleware
from mcp_resume_asgi.http.middleware import ResumeMiddleware
from mcp_resume_asgi.policy import Policy, Route
from mcp_resume_asgi.rest.middleware import RestMiddleware
from mcp_resume_asgi.store import (
    GapError,
    MemoryStore,
    SessionInfo,
    Store,
    StoreFullError,
    StreamMeta,
    StreamState,
)
from mcp_resume_asgi.tasks.middleware import TasksMiddleware
from mcp_resume_asgi.wire.jsonrpc import RESUMABLE_STREAMS_EXTENSION
from mcp_resume_asgi.wire.principal import default_principal

if TYPE_CHECKING:
    from mcp_resume_asgi.store.redis import RedisStore

__all__ = [
    "RESUMABLE_STREAMS_EXTENSION",
    "GapError",
    "MemoryStore",
    "Policy",
    "RedisStore",
    "RelayedUser",
    "RestMiddleware",
    "RestOptions",
    "ResumableApp",
    "ResumableRequestsMiddleware",
    "ResumableRequestsOptions",
    "ResumeMiddleware",
    "ResumeTokenMiddleware",
    "ResumeTokenOptions",
    "Route",
    "SessionInfo",
    "Store",
    "StoreFullError",
    "StreamMeta",
    "StreamState",
    "TasksMiddleware",
    "default_principal",
    "resumable",
]


def __getattr__(name: str) -> Any:
    if name == "RedisStore":
        from mcp_resume_asgi import store

        return store.RedisStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
