"""One node of a multi-process deployment: the low-level app, wrapped, on a shared Redis store.

Run several of these (``tests.apps.multinode_app:create_app`` in
`SubprocessServer`s) with the same environment and they form one service:

* ``MCP_RESUME_PREFIX`` (required): the Redis key prefix, unique per test;
* ``MCP_RESUME_SECRET`` (required): the shared signing secret (>= 16 chars);
* ``MCP_RESUME_REDIS_URL`` (optional): the Redis to use, default the suite's (``tests.support.stores.redis_url()``);
* ``MCP_RESUME_POLICY_JSON`` (optional): keyword arguments of `Policy`;
* ``MCP_RESUME_OPTIONS_JSON`` (optional): further keyword arguments of `resumable`
  (e.g. ``{"node_timeout_s": 2}``, ``{"resumable_requests": true}``);
* ``MCP_RESUME_APP`` (optional): ``auth`` for `tests.apps.auth_app` (two users of one
  OAuth client) instead of the low-level app;
* ``MCP_RESUME_SPANS_FILE`` (optional): the OpenTelemetry SDK as the global tracer provider,
  each finished span (the middleware's and the app's) a JSON line appended to this file;
* ``MCP_RESUME_NODE_LOG_DIR`` (optional): the library's DEBUG log, to ``node-<pid>.log`` in this
  folder (a test prints it when it fails: what each node did with a request, in order).

The outermost layer, :class:`NodeTag`, adds ``x-node: <pid>`` to every HTTP
response, so a test can tell which process answered a connection, and counts
what reached this process; ``GET /__node__`` (answered by that layer, never by
the app) returns ``{"pid": ..., "counts": {"<METHOD> <kind> <status>": n}}``.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_resume_asgi import Policy, resumable
from mcp_resume_asgi.store import RedisStore
from tests.apps.lowlevel_app import create_app as create_lowlevel_app
from tests.support.stores import redis_url

STATS_PATH = "/__node__"
NODE_HEADER = b"x-node"


def request_kind(scope: Scope) -> str:
    """``"<METHOD>"`` plus ``" resume"`` (Last-Event-ID sent) and ``" link"`` (a stream URL)."""
    kind = str(scope["method"])
    if any(name == b"last-event-id" for name, _ in scope["headers"]):
        kind += " resume"
    if "/streams/" in scope["path"]:
        kind += " link"
    return kind


class NodeTag:
    """Outermost ASGI layer: ``x-node: <pid>`` on every response, per-kind counts, ``GET /__node__``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.pid = os.getpid()
        self.counts: Counter[str] = Counter()
        self._pid_header = str(self.pid).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)  # lifespan: the middleware's node runs from it
            return
        if scope["path"] == STATS_PATH:
            body = json.dumps({"pid": self.pid, "counts": dict(self.counts)}).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (NODE_HEADER, self._pid_header),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        kind = request_kind(scope)

        async def tagged_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.counts[f"{kind} {message['status']}"] += 1
                message = {
                    **message,
                    "headers": [*message.get("headers", []), (NODE_HEADER, self._pid_header)],
                }
            await send(message)

        await self.app(scope, receive, tagged_send)


def _json_env(name: str) -> dict[str, Any]:
    raw = os.environ.get(name)
    if not raw:
        return {}
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a JSON object, got {raw!r}")
    return value


def _export_spans(path: str) -> None:
    """Every span this process finishes, a JSON line in `path` (the test reads each node's)."""
    from collections.abc import Sequence

    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class FileExporter(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            with open(path, "a") as out:
                for span in spans:
                    line = {
                        "pid": os.getpid(),
                        "name": span.name,
                        "kind": span.kind.name,
                        "trace_id": f"{span.context.trace_id:032x}",
                        "span_id": f"{span.context.span_id:016x}",
                        "parent_id": f"{span.parent.span_id:016x}" if span.parent is not None else None,
                        "links": [f"{link.context.span_id:016x}" for link in span.links],
                        "attributes": {k: str(v) for k, v in (span.attributes or {}).items()},
                    }
                    out.write(json.dumps(line) + "\n")
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter()))
    trace.set_tracer_provider(provider)


def _debug_log(folder: str) -> None:
    """The library's DEBUG records (and every WARNING) to `folder`/node-<pid>.log."""
    import logging

    handler = logging.FileHandler(os.path.join(folder, f"node-{os.getpid()}.log"))
    handler.setFormatter(
        logging.Formatter("%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s", "%H:%M:%S")
    )
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.WARNING)
    logging.getLogger("mcp_resume_asgi").setLevel(logging.DEBUG)


def create_app() -> NodeTag:
    """The low-level test app, wrapped with a `RedisStore` shared through the environment (see above)."""
    log_dir = os.environ.get("MCP_RESUME_NODE_LOG_DIR")
    if log_dir:
        _debug_log(log_dir)
    spans = os.environ.get("MCP_RESUME_SPANS_FILE")
    if spans:
        _export_spans(spans)
    prefix = os.environ["MCP_RESUME_PREFIX"]
    secret = os.environ["MCP_RESUME_SECRET"]
    url = os.environ.get("MCP_RESUME_REDIS_URL") or redis_url()
    policy_kwargs = _json_env("MCP_RESUME_POLICY_JSON")
    options = _json_env("MCP_RESUME_OPTIONS_JSON")
    if os.environ.get("MCP_RESUME_APP") == "auth":
        from tests.apps.auth_app import create_app as create_auth_app

        inner: ASGIApp = create_auth_app()
    else:
        inner = create_lowlevel_app()
    app = resumable(
        inner,
        policy=Policy(**policy_kwargs),
        store=RedisStore(url, prefix=prefix),
        secret=secret,
        **options,
    )
    return NodeTag(app)
