"""`RestMiddleware`: the REST face (SEP-1597) of any ASGI MCP app, beside Streamable HTTP.

It sits outside the Tasks layer and the stream engine (`resumable(app, rest=True)` puts
it there) and answers the face's routes (`routes.py`) under the MCP path; every other
request goes on untouched. A REST request becomes MCP requests sent through the stack
it wraps (`mcp_client.py`) with the request's own scope and credentials, so the app - which
changes not a line - sees an MCP client, and the tool calls are tasks with everything
the Tasks layer gives them (`tool_calls.py`).

It is also a feature layer (it registers in the scope like the others): for its own
`tools/call` it makes the call a task at once, whatever the route's `task_after_s` says,
because a REST call must be durable from its PUT on (a retried PUT finds it, input
requests become `awaiting*`); how long the PUT waits for a result is that `task_after_s`
(the face's `task_after_s` where the route has none).

The read routes (prompts, resources, templates, completion, the OpenAPI document) are
`reads.py`'s (`ReadRoutes.serve`). Bodies are
read bounded (413), must be JSON (415) that every wire carries (`json_text.py`: else
400, before anything is written), an MCP request larger than the stack takes is a 413
unsent (`Wire.max_request_bytes`: the stream engine's `max_body_bytes`), errors are
`application/problem+json`, and a store outage is a 503 with `Retry-After`.

The face reaches the engine only through its port (`engine/port.py`), taken from the
`RequestContext` of its first request through the stack (`intercept`; a `ping` when no
request came through yet): no walk down the wrapped apps.

Every route is reported (`telemetry`, the port's) as a SERVER span named for the MCP method it
stands for (`routes.TEMPLATES`), with its `http.route`, and counted by route and status.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from functools import partial
from typing import Any
from urllib.parse import quote

import anyio
import anyio.abc
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_resume_asgi.engine.port import EnginePort, RequestContext
from mcp_resume_asgi.features.seam import FeatureMiddleware
from mcp_resume_asgi.http.bodies import BodyTooLarge, ClientGone, read_body
from mcp_resume_asgi.rest.calls import CallStore
from mcp_resume_asgi.rest.mcp_client import Wire
from mcp_resume_asgi.rest.problems import method_not_allowed, problem
from mcp_resume_asgi.rest.reads import ReadRoutes
from mcp_resume_asgi.rest.replies import Reply, problem_reply
from mcp_resume_asgi.rest.routes import CALL_OPS, READ_OPS, TEMPLATES, BadRoute, Op, Route, match
from mcp_resume_asgi.rest.tool_calls import ToolCalls, Validator
from mcp_resume_asgi.tasks.operations import stream_of_task
from mcp_resume_asgi.tasks.update import view_of
from mcp_resume_asgi.telemetry import Operation
from mcp_resume_asgi.telemetry.names import ATTR_REST_OPERATION as REST_OPERATION
from mcp_resume_asgi.wire.headers import header, media_types
from mcp_resume_asgi.wire.replies import UNAVAILABLE_HEADER
from mcp_resume_asgi.wire.scope_keys import FEATURES_KEY, REST_SCOPE_KEY

logger = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
#: How long a PUT waits for a result when the route's `task_after_s` is None.
DEFAULT_TASK_AFTER_S = 1.0
#: Routes whose request has a body to read.
_WITH_BODY = frozenset({Op.CALL_PUT, Op.CALL_ADVANCE})
#: Routes `reads.py` serves (it reads their bodies itself).
_READ_ROUTES = READ_OPS | {Op.OPENAPI}
_MISPLACED = (
    "RestMiddleware must wrap TasksMiddleware and ResumeMiddleware (the face's calls are tasks): "
    "use resumable(app, rest=True), or list it first in middleware=[...]"
)


class RestMiddleware(FeatureMiddleware):
    """Serves SEP-1597's HTTP routes for the MCP app it wraps (see the module docstring).

    `path`: the app's MCP endpoint (the routes live under it). `task_after_s`: how long a
    PUT waits for its result where the route's policy has no `task_after_s`. `validate`:
    check PUT bodies against the tool's input schema (needs `jsonschema`: the `rest` extra).
    `max_calls_per_tool`: the most calls of one tool one caller holds at a time (429 past it).
    """

    stack_place = 0  # outermost: its calls go inward through the Tasks layer

    def __init__(
        self,
        app: ASGIApp,
        *,
        path: str = "/mcp",
        task_after_s: float = DEFAULT_TASK_AFTER_S,
        validate: bool = True,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_calls_per_tool: int = 1000,
    ) -> None:
        super().__init__(app)
        if not isinstance(path, str) or not path.startswith("/"):
            raise ValueError("path must be an absolute path such as '/mcp'")
        if not (task_after_s >= 0) or max_body_bytes <= 0 or max_calls_per_tool <= 0:
            raise ValueError("task_after_s must be >= 0, max_body_bytes and max_calls_per_tool positive")
        self.path = path.rstrip("/") or "/"
        self.task_after_s = float(task_after_s)
        self.max_body_bytes = max_body_bytes
        self.max_calls_per_tool = max_calls_per_tool
        self.validator: Validator | None = _validator() if validate else None
        self.wire = Wire(self._inward, path=self.path)
        self._port: EnginePort | None = None
        self._calls_of_tasks: CallStore | None = None
        self._tasks_seen = False
        self._tool_calls: ToolCalls | None = None
        self.reads = ReadRoutes(self.wire, base_path=self.path, max_body_bytes=self.max_body_bytes)

    # ------------------------------------------------------------------ ASGI
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)  # (a lifespan: its place is checked)
            return
        route = match(self.path, scope["method"], _local_raw_path(scope))
        if route is None:
            await super().__call__(scope, receive, send)
            return
        started = time.time_ns()
        status: list[int] = []

        async def watched(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        port = self._port
        op = None
        if port is not None and port.telemetry.enabled and not isinstance(route, BadRoute):
            # Opened first: a task the route reads (`tasks/get` within it) links it to its creation.
            op = port.telemetry.operation(scope, TEMPLATES[route.op][1], tool=route.tool, start_ns=started)
        try:
            await self._route(route, scope, receive, watched)
        finally:
            self._report(route, scope, started, status[0] if status else 500, op)

    def _report(
        self, route: Route | BadRoute, scope: Scope, started: int, status: int, op: Operation | None
    ) -> None:
        """The route's span and count (once the port is known: the face's first request)."""
        port = self._port
        if port is None or not port.telemetry.enabled:
            return
        telemetry = port.telemetry
        if isinstance(route, BadRoute):
            telemetry.rest_call("(unmatched)", status)
            return
        template, method = TEMPLATES[route.op]
        template = self.path.rstrip("/") + template
        telemetry.rest_call(template, status)
        if op is None:
            op = telemetry.operation(scope, method, tool=route.tool, start_ns=started)
        op.set("http.route", template)
        op.set(REST_OPERATION, route.op.value)
        op.set("http.response.status_code", status)
        if status >= 400:
            op.failed(str(status))
        elif route.op in CALL_OPS:
            op.tool_found()  # (a call's route answered: it found the call, or the tool in the app's list)
        op.end()

    async def _route(self, route: Route | BadRoute, scope: Scope, receive: Receive, send: Send) -> None:
        head = scope["method"] == "HEAD"
        if isinstance(route, BadRoute):
            failure = (
                method_not_allowed(route.detail, route.allow) if route.allow else problem(400, route.detail)
            )
            await problem_reply(failure).send(send, head=head)
            return
        if route.op in _READ_ROUTES:
            found = await self._calls(scope)  # (the engine's port taken, the wire knows the principal)
            if isinstance(found, Reply):
                await found.send(send, head=head)
                return
            await self.reads.serve(route, scope, receive, send)
            return
        body = b""
        if route.op in _WITH_BODY:
            read = await self._body(scope, receive, send)
            if read is None:
                return
            body = read
        async with anyio.create_task_group() as background:  # the calls' work may outlive the answer
            reply = await self._answer(route, scope, body, background)
            await reply.send(send, head=head)

    async def _inward(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The face's own MCP requests: into the stack, with this layer registered as a feature."""
        await super().__call__(scope, receive, send)

    async def intercept(self, ctx: RequestContext, receive: Receive, send: Send) -> bool:
        """The face's `tools/call` is a task from the start (see the module docstring)."""
        if self._port is None:
            self._port = ctx.port
            self._tasks_seen = _has_tasks(ctx.scope.get(FEATURES_KEY, ()))
            # The Tasks layer's reads of its records, bound to the port here.
            port = ctx.port
            self._calls_of_tasks = CallStore(port, partial(stream_of_task, port), partial(view_of, port))
        if ctx.method == "tools/call" and ctx.scope.get(REST_SCOPE_KEY) and ctx.policy.task_after_s != 0:
            ctx.policy = ctx.policy.replace(task_after_s=0)
        return False

    # ------------------------------------------------------------------ dispatch
    async def _answer(
        self, route: Route, scope: Scope, body: bytes, background: anyio.abc.TaskGroup
    ) -> Reply:
        calls = await self._calls(scope)
        if isinstance(calls, Reply):
            return calls
        try:
            return await self._dispatch(calls, route, scope, body, background)
        except Exception as exc:
            port = self._port  # (known: `_calls` built the routes on it)
            if port is None or not port.store_outage(exc):
                raise
            logger.warning("REST face: the store is unavailable (%s)", type(exc).__name__)
            return problem_reply(
                problem(503, "the store is unavailable; retry", headers=[(b"retry-after", b"1")])
            )

    async def _dispatch(
        self, calls: ToolCalls, route: Route, scope: Scope, body: bytes, background: anyio.abc.TaskGroup
    ) -> Reply:
        op = route.op
        if op is Op.TOOLS:
            return await calls.list_tools(scope)
        if op is Op.CALL_PUT:
            return await calls.put(scope, route, body, background)
        if op is Op.CALL_GET:
            return await calls.get(scope, route)
        if op is Op.CALL_ADVANCE:
            return await calls.advance(scope, route, body, background)
        if op is Op.CALL_CANCEL:
            return await calls.cancel(scope, route)
        if op is Op.CALLS:
            from mcp_resume_asgi.rest.listing import list_calls

            return await list_calls(calls, scope, route)
        return problem_reply(problem(404, "this route is not served here"))

    async def _calls(self, scope: Scope) -> ToolCalls | Reply:
        """The tool-call routes, built on the engine's port once it is known; or the 503 of a
        store outage that kept the face's first request from reaching the engine."""
        if self._tool_calls is None:
            if self._port is None:
                # Through the stack: `intercept` gets the port, unless the front serves without
                # the store meanwhile (it said so on the answer): retry, as for any outage.
                answer = await self.wire.call(scope, "ping", {})
                if self._port is None and UNAVAILABLE_HEADER in answer.headers:
                    return problem_reply(
                        problem(503, "the store is unavailable; retry", headers=[(b"retry-after", b"1")])
                    )
            port, calls = self._port, self._calls_of_tasks
            if port is None or calls is None or not self._tasks_seen:
                raise RuntimeError(_MISPLACED)
            self.wire.principal = port.principal
            if port.request_bound is not None:
                self.wire.max_request_bytes = port.request_bound
            self._tool_calls = ToolCalls(
                self.wire,
                port,
                calls,
                path=self.path,
                task_after_s=self.task_after_s,
                max_calls_per_tool=self.max_calls_per_tool,
                validator=self.validator,
            )
        return self._tool_calls

    async def _body(self, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        """The request's JSON body (bounded), or None once refused."""
        content_type = header(scope, b"content-type")
        if content_type is not None and not media_types(content_type) & {"application/json"}:
            await problem_reply(problem(415, "the body must be application/json")).send(send)
            return None
        try:
            return await read_body(receive, self.max_body_bytes)
        except BodyTooLarge:
            await problem_reply(problem(413, f"the body exceeds {self.max_body_bytes} bytes")).send(send)
        except ClientGone:
            pass
        return None


def _local_raw_path(scope: Scope) -> str:
    """The request's path as sent (percent-encoded), without the app's mount point."""
    raw = scope.get("raw_path")
    path = raw.decode("latin-1") if isinstance(raw, bytes) else quote(scope.get("path", ""))
    path = path.split("?", 1)[0]
    root: str = scope.get("root_path", "") or ""
    if root and path.startswith(root):
        path = path[len(root) :] or "/"
    return path


def _has_tasks(layers: Iterable[Any]) -> bool:
    from mcp_resume_asgi.tasks.middleware import TasksMiddleware

    return any(isinstance(layer, TasksMiddleware) for layer in layers)


def _validator() -> Validator:
    from mcp_resume_asgi.rest.validation import require_jsonschema, validate_arguments

    require_jsonschema()  # fail at start-up, with the extra to install, not on the first PUT

    def reasons(schema: Any, arguments: Any) -> list[dict[str, str]]:
        return [reason.as_json() for reason in validate_arguments(schema, arguments)]

    return reasons
