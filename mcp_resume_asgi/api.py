"""`resumable(app)`: the middleware and the feature layers, stacked in the right order.

The layers are usable one by one in a `middleware=[...]` list; this is the short way
for the common case, and it knows the one rule that matters: every feature layer sits
outside `ResumeMiddleware`, and the Tasks layer outermost (a call that becomes a task
is its alone). A list in another order is refused when the server starts
(`features/seam.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

from mcp_resume_asgi.engine.port import Drained
from mcp_resume_asgi.http.middleware import (
    DEFAULT_DRAIN_S,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_NODE_TIMEOUT_S,
    DEFAULT_SESSION_TTL_S,
    ResumeMiddleware,
)
from mcp_resume_asgi.policy import Policy, RoutesSpec
from mcp_resume_asgi.store.base import Store
from mcp_resume_asgi.telemetry import TelemetrySetting
from mcp_resume_asgi.wire.asgi import ASGIApp, Receive, Scope, Send, check_asgi_app
from mcp_resume_asgi.wire.principal import PrincipalOf, default_principal

if TYPE_CHECKING:
    from mcp_resume_asgi.features.resume_tokens import InterimBody

__all__ = ["RestOptions", "ResumableApp", "ResumableRequestsOptions", "ResumeTokenOptions", "resumable"]


class ResumableApp(Protocol):
    """What `resumable()` returns: an ASGI app (the outermost layer it stacked) with `drain()`."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None: ...

    async def drain(self) -> Drained:
        """Drain this node now (`ResumeMiddleware.drain`): a host that handles SIGTERM itself
        awaits it before stopping its server; under uvicorn, hypercorn and granian the server's
        own signal starts it."""
        ...


class ResumableRequestsOptions(TypedDict, total=False):
    """`resumable(resumable_requests={...})`: the options of `ResumableRequestsMiddleware`."""

    methods: Sequence[str]
    tools: Sequence[str]


class ResumeTokenOptions(TypedDict, total=False):
    """`resumable(resume_tokens={...})`: the options of `ResumeTokenMiddleware`."""

    methods: Sequence[str]
    interim: Mapping[str, InterimBody] | None
    assume_client_support: bool


class RestOptions(TypedDict, total=False):
    """`resumable(rest={...})`: the options of `RestMiddleware` (its `path` defaults to the
    middleware's first `path`)."""

    path: str
    task_after_s: float
    validate: bool
    max_body_bytes: int
    max_calls_per_tool: int


def resumable(
    app: ASGIApp,
    *,
    policy: Policy | None = None,
    routes: RoutesSpec | None = None,
    store: Store | str | None = None,
    secret: str | bytes | None = None,
    encryption_key: str | bytes | None = None,
    path: str | Sequence[str] = "/mcp",
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    principal: PrincipalOf = default_principal,
    session_ttl_s: float = DEFAULT_SESSION_TTL_S,
    node_timeout_s: float = DEFAULT_NODE_TIMEOUT_S,
    telemetry: TelemetrySetting = True,
    drain_s: float = DEFAULT_DRAIN_S,
    resumable_requests: bool | ResumableRequestsOptions = False,
    resume_tokens: bool | ResumeTokenOptions = False,
    tasks: bool = False,
    rest: bool | RestOptions = False,
) -> ResumableApp:
    """Wrap an ASGI MCP app so its Streamable HTTP traffic becomes resumable.

    Every option from `policy` to `drain_s` is `ResumeMiddleware`'s. `resumable_requests=True`
    (or a dict of `ResumableRequestsMiddleware` options) adds SEP-975 on top of the stream
    engine; `resume_tokens=True` (or a dict of `ResumeTokenMiddleware` options) adds
    `_meta.nextResumeToken` interim results; `tasks=True` adds the Tasks extension
    (`TasksMiddleware`; which calls become tasks is each route's `Policy.task_after_s`);
    `rest=True` (or a dict of `RestMiddleware` options) adds the REST face (SEP-1597)
    outermost, and the Tasks layer it needs. A switch that is neither a bool nor a dict is a
    `TypeError`.

    `store` is a `Store`, or a store URL (`memory://`, `sqlite:///path.db`, `redis://host:6379/0`:
    `store.urls.store_from_url`); none given, the URL in the `MCP_RESUME_STORE` environment
    variable, else a `MemoryStore`.

    The result has `drain()` (`ResumeMiddleware.drain`).
    """
    check_asgi_app(app)
    requests_options = _layer_options("resumable_requests", resumable_requests)
    token_options = _layer_options("resume_tokens", resume_tokens)
    rest_options = _layer_options("rest", rest)
    if not isinstance(tasks, bool):
        raise TypeError(f"tasks must be True or False, not {tasks!r}")
    middleware = ResumeMiddleware(
        app,
        policy=policy,
        routes=routes,
        store=store,
        secret=secret,
        encryption_key=encryption_key,
        path=path,
        max_body_bytes=max_body_bytes,
        principal=principal,
        session_ttl_s=session_ttl_s,
        node_timeout_s=node_timeout_s,
        telemetry=telemetry,
        drain_s=drain_s,
    )
    wrapped: ResumableApp = middleware
    if requests_options is not None:
        from mcp_resume_asgi.features.resumable_requests import ResumableRequestsMiddleware

        wrapped = ResumableRequestsMiddleware(wrapped, **requests_options)
    if token_options is not None:
        from mcp_resume_asgi.features.resume_tokens import ResumeTokenMiddleware

        wrapped = ResumeTokenMiddleware(wrapped, **token_options)
    if tasks or rest_options is not None:
        from mcp_resume_asgi.tasks.middleware import TasksMiddleware

        wrapped = TasksMiddleware(wrapped)  # outermost: a call that becomes a task is its alone
    if rest_options is not None:
        from mcp_resume_asgi.rest.middleware import RestMiddleware

        rest_options.setdefault("path", path if isinstance(path, str) else next(iter(path), "/mcp"))
        wrapped = RestMiddleware(wrapped, **rest_options)  # its calls are tasks: it sends them inward
    return wrapped


def _layer_options(name: str, switch: object) -> dict[str, Any] | None:
    """A layer's switch: None when off, else the options to build it with."""
    if isinstance(switch, bool):
        return {} if switch else None
    if isinstance(switch, Mapping):
        return dict(switch)
    raise TypeError(f"{name} must be True, False or a dict of the layer's options, not {switch!r}")
