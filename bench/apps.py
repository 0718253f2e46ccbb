"""The apps under test: one stock `MCPServer` with two tools, served three ways.

Tools:

* ``echo(text)``     - returns ``text``: the answer is one event (the result);
* ``progress(text)`` - sends two ``notifications/progress`` for the caller's ``progressToken``
  (``ctx.report_progress``), then returns ``text``: the answer is three events.

Variants:

* ``bare``    - ``server.streamable_http_app()`` as it comes (SSE answers, no event store);
* ``wrapped`` - the same app inside ``resumable(app, policy=Policy())`` (default ``MemoryStore``);
* ``wrapped_redis`` - the same, on a ``RedisStore`` (what a fleet of nodes shares), under a
  key prefix of the caller's (the benchmark deletes it afterwards);
* ``sdk_es``  - the SDK's own resumability: an in-memory ``EventStore`` and ``retry_interval``;
* ``wrapped_otel`` - ``wrapped`` with the OpenTelemetry SDK configured for the middleware: every
  span to an in-memory exporter (batched, as a real exporter is), metrics to an in-memory
  reader (issue 23's bar: <= 5% req/s against ``wrapped``, which reports through the API with no
  SDK - the default when ``opentelemetry-api`` is installed);
* ``wrapped_off`` - ``wrapped`` with ``telemetry=False`` (for ``bench.inprocess``: what the
  hooks cost with no SDK).
* ``wrapped_sqlite`` - ``wrapped`` on a ``SQLiteStore`` (one file, in a temporary directory of
  the serving process's own, deleted when it exits);
* ``wrapped_sqlite_commit`` - ``wrapped_sqlite`` with ``wait_for_commit=True``: each write
  returns once committed (the file's guarantee at a thread round trip per write);
* ``persist_sqlite`` - the peer to beat (``bench.sqlite``): ``mcp-persist``'s SQLite event store
  through its own ``with_persistence(server, backend="sqlite", url=...)``, its defaults.
* ``persist_redis`` - the peer to beat (``bench.redis_peers``): ``mcp-persist``'s Redis event store
  through its own ``with_persistence(server, backend="redis", url=..., key_prefix=...)``, its defaults.

Each factory builds a fresh server, so the three never share state.
"""

from collections import deque
from dataclasses import dataclass
from typing import Any
from uuid import uuid4

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp_types import JSONRPCMessage
from starlette.types import ASGIApp

from mcp_resume_asgi import Policy, resumable
from mcp_resume_asgi.telemetry import OpenTelemetry

VARIANTS = (
    "bare",
    "wrapped",
    "wrapped_redis",
    "sdk_es",
    "wrapped_otel",
    "wrapped_off",
    "wrapped_sqlite",
    "wrapped_sqlite_commit",
    "persist_sqlite",
    "persist_redis",
)
TOOLS = ("echo", "progress")
RETRY_INTERVAL_MS = 1000
#: A store shared by several processes needs a shared secret; any fixed one serves a benchmark.
REDIS_SECRET = "bench-shared-secret-0123456789abcdef"
#: What `progress` reports, in order (as ``progress`` out of ``PROGRESS_TOTAL``).
PROGRESS_STEPS = (1.0, 2.0)
PROGRESS_TOTAL = 2.0


async def echo(text: str) -> str:
    """Return the given text."""
    return text


async def progress(text: str, ctx: Context) -> str:
    """Report progress twice (to the caller's progressToken), then return the given text."""
    for step in PROGRESS_STEPS:
        await ctx.report_progress(step, PROGRESS_TOTAL, f"step {step:g}")
    return text


def _server() -> MCPServer:
    server = MCPServer("bench", version="0.0.1", log_level="WARNING")
    server.add_tool(echo, structured_output=False)
    server.add_tool(progress, structured_output=False)
    return server


@dataclass(slots=True)
class _Entry:
    event_id: EventId
    stream_id: StreamId
    message: JSONRPCMessage | None


class InMemoryEventStore(EventStore):
    """The simplest correct event store, after the SDK's own example
    (examples/servers/simple-streamablehttp): a bounded deque per stream and an
    index by event id; replay walks the stream's deque after the given id."""

    def __init__(self, max_events_per_stream: int = 100) -> None:
        self.max_events_per_stream = max_events_per_stream
        self.streams: dict[StreamId, deque[_Entry]] = {}
        self.event_index: dict[EventId, _Entry] = {}

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        event_id = str(uuid4())
        entry = _Entry(event_id, stream_id, message)
        events = self.streams.get(stream_id)
        if events is None:
            events = self.streams[stream_id] = deque(maxlen=self.max_events_per_stream)
        if len(events) == self.max_events_per_stream:
            self.event_index.pop(events[0].event_id, None)
        events.append(entry)
        self.event_index[event_id] = entry
        return event_id

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        last = self.event_index.get(last_event_id)
        if last is None:
            return None
        found = False
        for entry in self.streams.get(last.stream_id, ()):
            if found:
                if entry.message is not None:  # priming events carry nothing to replay
                    await send_callback(EventMessage(entry.message, entry.event_id))
            elif entry.event_id == last_event_id:
                found = True
        return last.stream_id


def create_app(variant: str = "bare", *, redis_url: str = "", redis_prefix: str = "") -> ASGIApp:
    """The benchmark app as `variant`; `wrapped_redis` needs `redis_url` and `redis_prefix`."""
    server = _server()
    if variant == "bare":
        return server.streamable_http_app(host="127.0.0.1")
    if variant == "wrapped":
        return resumable(server.streamable_http_app(host="127.0.0.1"), policy=Policy())
    if variant == "wrapped_redis":
        from mcp_resume_asgi.store import RedisStore

        if not (redis_url and redis_prefix):
            raise ValueError("wrapped_redis needs redis_url and redis_prefix")
        return resumable(
            server.streamable_http_app(host="127.0.0.1"),
            policy=Policy(),
            store=RedisStore(redis_url, prefix=redis_prefix),
            secret=REDIS_SECRET,
        )
    if variant == "wrapped_otel":
        return resumable(server.streamable_http_app(host="127.0.0.1"), policy=Policy(), telemetry=_otel())
    if variant == "wrapped_off":
        return resumable(server.streamable_http_app(host="127.0.0.1"), policy=Policy(), telemetry=False)
    if variant in ("wrapped_sqlite", "wrapped_sqlite_commit"):
        from mcp_resume_asgi.store.sqlite import SQLiteStore

        store = SQLiteStore(_scratch_file(), wait_for_commit=variant == "wrapped_sqlite_commit")
        return resumable(server.streamable_http_app(host="127.0.0.1"), policy=Policy(), store=store)
    if variant == "persist_sqlite":
        from mcp_persist import with_persistence

        return _slash(with_persistence(server, backend="sqlite", url=_scratch_file()))
    if variant == "persist_redis":
        from mcp_persist import with_persistence

        if not (redis_url and redis_prefix):
            raise ValueError("persist_redis needs redis_url and redis_prefix")
        return _slash(with_persistence(server, backend="redis", url=redis_url, key_prefix=redis_prefix))
    if variant == "sdk_es":
        return server.streamable_http_app(
            host="127.0.0.1", event_store=InMemoryEventStore(), retry_interval=RETRY_INTERVAL_MS
        )
    raise ValueError(f"unknown variant {variant!r}; one of {VARIANTS}")


def _slash(app: ASGIApp) -> ASGIApp:
    """`app` with `/mcp` asked as `/mcp/`: `with_persistence` mounts the endpoint (a Starlette
    `Mount`, which answers `/mcp` with a 307 to `/mcp/`), and the load generator asks `/mcp`."""

    async def slashed(scope: Any, receive: Any, send: Any) -> None:
        if scope.get("path") == "/mcp":
            scope = {**scope, "path": "/mcp/", "raw_path": b"/mcp/"}
        await app(scope, receive, send)

    slashed.app = app  # type: ignore[attr-defined]  # (bench.callcounts finds the Starlette app by `.app`)
    return slashed


def _scratch_file() -> str:
    """A database file in a temporary directory of this process's own, deleted when it exits."""
    import atexit
    import os
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="bench-sqlite-")
    atexit.register(shutil.rmtree, folder, True)
    return os.path.join(folder, "mcp.db")


def _otel() -> OpenTelemetry:
    """Providers of the SDK for the middleware alone (the app's own spans stay off, as in
    `wrapped`): spans batched to an in-memory exporter that forgets what it holds past a
    bound (a long run would fill the memory), metrics read in memory."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    class BoundedExporter(InMemorySpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            if len(self._finished_spans) > 10_000:
                self.clear()
            return super().export(spans)

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(BoundedExporter()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    return OpenTelemetry(tracer_provider=tracer_provider, meter_provider=meter_provider)
