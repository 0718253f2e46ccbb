"""Every key the library puts in an ASGI scope, in one place, and the path segment it claims.

A scope is shared with the app and every other middleware, so each key of ours is named
`mcp_resume_asgi.*`; the layers that write a key and those that read it import it from
here, not from each other.
"""

from __future__ import annotations

__all__ = [
    "DECLARED_CAPABILITIES",
    "ENGINE_PASSED",
    "FEATURES_KEY",
    "RELAYED_CALLER",
    "RELAYED_FROM",
    "REST_SCOPE_KEY",
    "STREAM_SEGMENT",
]

#: The feature layers (`FeatureMiddleware`) a request passed through on its way to the
#: middleware, outermost first: each adds itself, and the middleware hands them the request.
FEATURES_KEY = "mcp_resume_asgi.features"
#: A request relayed here from another node: that node's channel (it is not relayed again).
RELAYED_FROM = "mcp_resume_asgi.relayed_from"
#: On the owner: the `RelayedCaller` of a relayed request (who the relaying node vouched for).
RELAYED_CALLER = "mcp_resume_asgi.relayed_caller"
#: The capabilities an `initialize` declared, when a layer edited what the app sees.
DECLARED_CAPABILITIES = "mcp_resume_asgi.declared_capabilities"
#: Set in the scope of the REST face's own MCP requests (the middleware's feature hook reads it).
REST_SCOPE_KEY = "mcp_resume_asgi.rest"

#: Set by `ResumeMiddleware` in the lifespan scope it passes inward: a feature layer that sees
#: it sits inside the middleware, where no request ever asks it anything (refused at startup).
ENGINE_PASSED = "mcp_resume_asgi.engine_passed"

#: Stream URLs are `<mcp path>/streams/<token>`: the one path under the MCP endpoint's that
#: the middleware answers itself (matched against `scope["path"]`).
STREAM_SEGMENT = "/streams/"
