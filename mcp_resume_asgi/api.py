"""`resumable(app)`: the middleware and the feature layers, stacked in the right order.

The layers are usable one by one in a `middleware=[...]` list; this is the short way
for the common case, and it knows the one rule that matters: every feature layer sits
outside `ResumeMiddleware`, and the Tasks layer outermost (a call that becomes a task
is its alone).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.types import ASGIApp

from mcp_resume_asgi.http.middleware import ResumeMiddleware
from mcp_resume_asgi.policy import Policy, RoutesSpec
from mcp_resume_asgi.store.base import Store
from mcp_resume_asgi.wire.asgi import check_asgi_app


def resumable(
    app: ASGIApp,
    *,
    policy: Policy | None = None,
    routes: RoutesSpec | None = None,
    store: Store | str | None = None,
    secret: str | bytes | None = None,
    resumable_requests: bool | Mapping[str, Any] = False,
    resume_tokens: bool | Mapping[str, Any] = False,
    tasks: bool = False,
    rest: bool | Mapping[str, Any] = False,
    **options: Any,
) -> ASGIApp:
    """Wrap an ASGI MCP app so its Streamable HTTP traffic becomes resumable.

    `resumable_requests=True` (or a dict of `ResumableRequestsMiddleware` options)
    adds SEP-975 on top of the stream engine; `resume_tokens=True` (or a dict of
    `ResumeTokenMiddleware` options) adds `_meta.nextResumeToken` interim results;
    `tasks=True` adds the Tasks extension (`TasksMiddleware`; which calls become tasks
    is each route's `Policy.task_after_s`); `rest=True` (or a dict of `RestMiddleware`
    options) adds the REST face (SEP-1597) outermost, and the Tasks layer it needs.

    `store` is a `Store`, or a store URL (`memory://`, `sqlite:///path.db`, `redis://host:6379/0`:
    `store.urls.store_from_url`); none given, the URL in the `MCP_RESUME_STORE` environment
    variable, else a `MemoryStore`.

    The result has `drain()` (`ResumeMiddleware.drain`): a host that handles SIGTERM itself
    awaits it before stopping its server; under uvicorn, hypercorn and granian the server's
    own signal starts it.
    """
    check_asgi_app(app)
    middleware = ResumeMiddleware(app, policy=policy, routes=routes, store=store, secret=secret, **options)
    wrapped: ASGIApp = middleware
    if resumable_requests:
        from mcp_resume_asgi.features.resumable_requests import ResumableRequestsMiddleware

        layer_options = dict(resumable_requests) if isinstance(resumable_requests, Mapping) else {}
        wrapped = ResumableRequestsMiddleware(wrapped, **layer_options)
    if resume_tokens:
        from mcp_resume_asgi.features.resume_tokens import ResumeTokenMiddleware

        token_options = dict(resume_tokens) if isinstance(resume_tokens, Mapping) else {}
        wrapped = ResumeTokenMiddleware(wrapped, **token_options)
    if tasks or rest:
        from mcp_resume_asgi.tasks import TasksMiddleware

        wrapped = TasksMiddleware(wrapped)  # outermost: a call that becomes a task is its alone
    if rest:
        from mcp_resume_asgi.rest import RestMiddleware

        rest_options = dict(rest) if isinstance(rest, Mapping) else {}
        path = options.get("path", "/mcp")
        rest_options.setdefault("path", path if isinstance(path, str) else next(iter(path), "/mcp"))
        wrapped = RestMiddleware(wrapped, **rest_options)  # its calls are tasks: it sends them inward
    if wrapped is not middleware:
        # `await app.drain()` for a host that handles its signals itself (`ResumeMiddleware.drain`)
        setattr(wrapped, "drain", middleware.drain)  # noqa: B010
    return wrapped
