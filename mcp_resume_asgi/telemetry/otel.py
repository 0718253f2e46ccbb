"""`Telemetry` through OpenTelemetry: the instruments of `names.py` and the spans of the
requests the middleware answers itself, following the MCP semantic conventions.

Imported only when telemetry is on and `opentelemetry-api` is installed (`telemetry_from`).
Without an SDK configured (the global providers still the API's defaults, as wherever `mcp` brought
`opentelemetry-api` in and nobody set one) nothing would record a report, so a request reports
nothing: `active()` - asked once by a request's writer, recorder or follower - answers `OFF`,
and `operation()` the operation that does nothing. Whether one is configured is read each time
(two attributes of the API's modules), so an SDK set after the middleware was built - as apps do
at startup - is used from its next request on. Providers of one's own (`OpenTelemetry(...)`) are
always used.

Trace context: a request's parent is the context its `params._meta` carries (`traceparent`,
`tracestate`, `baggage`, unprefixed, SEP-414), else the span current around the middleware
(an ASGI instrumentation outside it), else its HTTP headers; where `_meta` gave the parent,
the ambient one is linked. A record the middleware keeps (a task, a stream) stores the
`traceparent` of the request that created it, bounded and nothing else (no baggage: it may
carry what the caller put there), so that a poll or resume on any node is linked to it - and
joins its trace when the poll brings no context of its own. Baggage is never copied into
attributes, and a link is only made once the caller was admitted to the record.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterable, MutableMapping
from contextvars import ContextVar, Token
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, propagate, trace
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.metrics import _internal as _metrics_state
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from mcp_resume_asgi.telemetry import names as n
from mcp_resume_asgi.telemetry.base import NO_OPERATION, OFF, AttributeValue, Operation, SendLike, Telemetry

__all__ = ["OtelTelemetry", "format_traceparent", "parse_traceparent"]

logger = logging.getLogger(__name__)

SCOPE_NAME = "mcp_resume_asgi"
#: The revision without sessions: `mcp.session.id` is not set for it (the registry says so).
_SESSIONLESS = "2026-07-28"
#: Store calls take micro- to milliseconds: the convention's buckets (10 ms up) would hide them.
STORE_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
#: Events per replay.
REPLAY_SIZE_BUCKETS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000)
_ENCLOSING: ContextVar[OtelOperation | None] = ContextVar("mcp_resume_operation", default=None)
"""The outermost operation of this request (a REST route's): an operation within it (the MCP
request the route makes, `tasks/get`) hands it the record's creator it was admitted to."""
#: Where the API keeps the global providers once one is set (`set_tracer_provider`,
#: `set_meter_provider`, or the `OTEL_PYTHON_*_PROVIDER` variables, loaded when this module's
#: `OtelTelemetry` asks for its tracer and meter): None until then, and never unset. Read per
#: request, an attribute load each. Should a later API keep them elsewhere, every request counts as
#: configured: every request takes the slower configured path, and no span is lost.
_GLOBALS_READABLE = hasattr(trace, "_TRACER_PROVIDER") and hasattr(_metrics_state, "_METER_PROVIDER")


_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ROOT = Context()


def format_traceparent(context: SpanContext) -> str:
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def parse_traceparent(value: Any) -> SpanContext | None:
    """The span context a stored `traceparent` names (version 00 only), else None."""
    if not isinstance(value, str) or len(value) != 55:
        return None
    match = _TRACEPARENT.fullmatch(value)
    if match is None:
        return None
    trace_id, span_id = int(match[1], 16), int(match[2], 16)
    if not trace_id or not span_id:
        return None
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(int(match[3], 16)))


class _Headers(Getter[list[tuple[bytes, bytes]]]):
    """Reads a propagator's fields from ASGI headers."""

    def get(self, carrier: list[tuple[bytes, bytes]], key: str) -> list[str] | None:
        wanted = key.lower().encode("latin-1")
        found = [value.decode("latin-1") for name, value in carrier if name == wanted]
        return found or None

    def keys(self, carrier: list[tuple[bytes, bytes]]) -> list[str]:
        return [name.decode("latin-1") for name, _ in carrier]


_HEADERS = _Headers()


def _header(scope: MutableMapping[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _meta_of(params: Any) -> dict[str, Any] | None:
    if isinstance(params, bytes):  # a request's raw body: parsed only when it may carry a trace
        if b"traceparent" not in params:
            return None
        try:
            message = json.loads(params)
        except ValueError:
            return None
        params = message.get("params") if isinstance(message, dict) else None
    if not isinstance(params, dict):
        return None
    meta = params.get("_meta")
    if isinstance(meta, dict) and isinstance(meta.get("traceparent"), str):
        return {
            key: meta[key]
            for key in ("traceparent", "tracestate", "baggage")
            if isinstance(meta.get(key), str)
        }
    return None


def _span_of(context: Context) -> SpanContext | None:
    span_context = trace.get_current_span(context).get_span_context()
    return span_context if span_context.is_valid else None


class _Incoming:
    """Where a request's span hangs: its parent context, and the ambient one to link."""

    __slots__ = ("ambient", "parent")

    def __init__(
        self, scope: MutableMapping[str, Any], params: Any, current: SpanContext | None = None
    ) -> None:
        self.parent: Context | None = None
        self.ambient: SpanContext | None = None
        if current is None:  # (the span current around the middleware, unless the caller looked)
            current = trace.get_current_span().get_span_context()
        ambient: Context | None = None
        if current.is_valid:
            ambient = trace.set_span_in_context(NonRecordingSpan(current))
            self.ambient = current
        elif _header(scope, b"traceparent") is not None:
            ambient = propagate.extract(scope.get("headers", []), getter=_HEADERS)
            self.ambient = _span_of(ambient)
        meta = _meta_of(params)
        if meta is not None:
            from_meta = propagate.extract(meta)
            if _span_of(from_meta) is not None:
                self.parent = from_meta
                return
        if self.ambient is not None:
            self.parent = ambient
            self.ambient = None  # (it is the parent: nothing to link)

    @property
    def span(self) -> SpanContext | None:
        return None if self.parent is None else _span_of(self.parent)


class OtelOperation(Operation):
    """An `Operation` reported as a SERVER span and an `mcp.server.operation.duration` sample."""

    __slots__ = (
        "_attributes",
        "_creator",
        "_ended",
        "_error",
        "_found",
        "_incoming",
        "_json",
        "_message",
        "_outer",
        "_sniffed",
        "_start_ns",
        "_status",
        "_telemetry",
        "_token",
        "_tool",
        "method",
    )

    def __init__(
        self,
        telemetry: OtelTelemetry,
        scope: MutableMapping[str, Any],
        method: str,
        *,
        request_id: Any,
        params: Any,
        version: str | None,
        tool: str | None,
        poll: bool,
        start_ns: int | None,
    ) -> None:
        self._telemetry = telemetry
        self._start_ns = time.time_ns() if start_ns is None else start_ns
        self.method = method
        self._tool = tool
        self._found = False
        self._incoming = _Incoming(scope, params)
        self._creator: SpanContext | None = None
        self._status: int | None = None
        self._json = False
        self._sniffed = False
        self._error: str | None = None
        self._message: str | None = None
        self._ended = False
        self._outer = _ENCLOSING.get()
        self._token: Token[OtelOperation | None] | None = None
        if self._outer is None:
            self._token = _ENCLOSING.set(self)
        version = version or _header(scope, b"mcp-protocol-version")
        # What the request names is bounded (`names.OTHER`): a request opens no series of its own.
        attributes: dict[str, AttributeValue] = {
            "mcp.method.name": method if method in n.METHODS else n.OTHER
        }
        if request_id is not None and not isinstance(request_id, bool):
            attributes["jsonrpc.request.id"] = str(request_id)
        if version:
            attributes["mcp.protocol.version"] = version if version in n.PROTOCOL_VERSIONS else n.OTHER
            if version != _SESSIONLESS:
                session = _header(scope, b"mcp-session-id")
                if session is not None:
                    attributes["mcp.session.id"] = session
        if tool is not None and method == "tools/call":
            attributes["gen_ai.operation.name"] = "execute_tool"
        attributes["network.transport"] = "tcp"
        attributes["network.protocol.name"] = "http"
        http_version = scope.get("http_version")
        if isinstance(http_version, str):
            attributes["network.protocol.version"] = http_version
        client = scope.get("client")
        if client:
            attributes["client.address"] = str(client[0])
            if isinstance(client[1], int):
                attributes["client.port"] = client[1]
        if poll:
            attributes[n.ATTR_POLL] = True
        self._attributes = attributes

    def watch(self, send: SendLike) -> SendLike:
        async def watched(message: MutableMapping[str, Any]) -> None:
            kind = message["type"]
            if kind == "http.response.start":
                self._status = int(message["status"])
                for name, value in message.get("headers", ()):
                    if name.lower() == b"content-type":
                        self._json = value.split(b";", 1)[0].strip().lower() == b"application/json"
            elif kind == "http.response.body" and not self._sniffed:
                self._sniffed = True
                if self._json:
                    self._sniff(message.get("body", b""))
            await send(message)

        return watched

    def _sniff(self, body: bytes) -> None:
        """A JSON-RPC error in the answer: its code is the convention's `error.type`."""
        if b'"error"' not in body:
            return
        try:
            answer = json.loads(body)
        except ValueError:
            return
        error = answer.get("error") if isinstance(answer, dict) else None
        if isinstance(error, dict) and isinstance(error.get("code"), int):
            message = error.get("message")
            self.failed(str(error["code"]), message if isinstance(message, str) else None)

    def set(self, key: str, value: AttributeValue | None) -> None:
        if value is not None:
            self._attributes[key] = value

    def created_by(
        self, trace: str | None, *, stream_id: str | None = None, task_id: str | None = None
    ) -> None:
        self._creator = parse_traceparent(trace)
        outer = self._outer
        if outer is not None and outer._creator is None and not outer._ended:
            outer.created_by(trace, stream_id=stream_id, task_id=task_id)  # (the same caller's)
        if stream_id is not None:
            self._attributes[n.ATTR_STREAM_ID] = stream_id
        if task_id is not None:
            self._attributes[n.ATTR_TASK_ID] = task_id

    def tool_found(self) -> None:
        self._found = True

    def failed(self, error_type: str, message: str | None = None) -> None:
        if self._error is None:
            self._error, self._message = error_type, message

    def end(self) -> None:
        if self._ended:
            return
        self._ended = True
        if self._token is not None:
            with contextlib.suppress(ValueError):  # (ended in another context: it ends with it)
                _ENCLOSING.reset(self._token)
            self._token = None
        end_ns = time.time_ns()
        attributes = self._attributes
        status = self._status
        if status is not None:
            attributes["http.response.status_code"] = status
            if status >= 400:
                self.failed(str(status))
        if self._error is not None:
            attributes["error.type"] = self._error
        telemetry = self._telemetry
        links: list[Link] = []
        incoming = self._incoming
        parent = incoming.parent
        if self._creator is not None:
            links.append(Link(self._creator, {n.ATTR_LINK_ROLE: "created_by"}))
            if parent is None:  # no context of its own: it joins the trace of what it polls
                parent = trace.set_span_in_context(NonRecordingSpan(self._creator))
        if incoming.ambient is not None:
            links.append(Link(incoming.ambient, {n.ATTR_LINK_ROLE: "http"}))
        name = str(attributes["mcp.method.name"])
        if self._tool is not None:
            tool = telemetry.tools.label(self._tool, found=self._found)
            attributes["gen_ai.tool.name"] = tool
            if tool != n.OTHER:
                name = f"{name} {tool}"
        span = telemetry.tracer.start_span(
            name,
            context=parent if parent is not None else _ROOT,
            kind=SpanKind.SERVER,
            attributes=attributes,
            links=links,
            start_time=self._start_ns,
        )
        if self._error is not None:
            span.set_status(Status(StatusCode.ERROR, self._message))
        span.end(end_time=end_ns)
        telemetry.operation_duration.record(
            max(end_ns - self._start_ns, 0) / 1e9,
            {key: value for key, value in attributes.items() if key in _METRIC_ATTRIBUTES},
        )


#: The span attributes `mcp.server.operation.duration` carries too (none per request or client).
_METRIC_ATTRIBUTES = frozenset(
    {
        "mcp.method.name",
        "error.type",
        "gen_ai.tool.name",
        "gen_ai.operation.name",
        "mcp.protocol.version",
        "network.transport",
        "network.protocol.name",
        "network.protocol.version",
    }
)


class _ToolNames:
    """The tool names `mcp.server.operation.duration` (and the spans) may carry: the app's own,
    as a face found them (`Operation.tool_found`), at most `names.MAX_TOOL_NAMES`. Any other
    name - one a request chose, refused or not - is `names.OTHER`, so requests naming tools by
    the thousand add no series, and a refused one records nothing of its caller's choosing."""

    __slots__ = ("_known", "_lock")

    def __init__(self) -> None:
        self._known: set[str] = set()
        self._lock = threading.Lock()

    def label(self, tool: str, *, found: bool) -> str:
        """`tool` where it is the app's own (found now or before, within the bound), else `OTHER`."""
        if tool in self._known:
            return tool
        if found:
            with self._lock:
                if len(self._known) < n.MAX_TOOL_NAMES:
                    self._known.add(tool)
                    return tool
        return n.OTHER


class _Tally:
    """A counter kept in process, which the SDK reads when it collects (the callback of an
    asynchronous instrument): counting is an integer add under a lock, where a synchronous
    instrument's `add` is a measurement the SDK processes there and then (several µs, and a
    call counts several things). Its values by attribute set, keyed by the attributes' values."""

    __slots__ = ("_keys", "_lock", "_values")

    def __init__(self, *keys: str) -> None:
        self._keys = keys
        self._lock = threading.Lock()  # (a stack may run on more than one thread's loop)
        self._values: dict[tuple[AttributeValue, ...], int] = {}

    def add(self, delta: int, *values: AttributeValue) -> None:
        with self._lock:
            self._values[values] = self._values.get(values, 0) + delta

    def observe(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            values = list(self._values.items())
        keys = self._keys
        return [
            Observation(value, dict(zip(keys, key, strict=True)) if keys else None) for key, value in values
        ]


class _Tallies:
    """The counters and up-down counters of the table, as `_Tally`s: one set per meter provider
    (the SDK keeps one asynchronous instrument of a name per meter and drops the callbacks of a
    second one, so every `OtelTelemetry` on a provider counts into the same tallies)."""

    __slots__ = (
        "adoptions",
        "attached",
        "closes",
        "detached",
        "drains",
        "events",
        "outages",
        "rest_calls",
        "resumes",
        "tasks",
    )

    def __init__(self, meter: Any) -> None:
        def tally(make: Callable[..., Any], name: str, unit: str, description: str, *keys: str) -> _Tally:
            made = _Tally(*keys)
            make(name, callbacks=[made.observe], unit=unit, description=description)
            return made

        counter, up_down = meter.create_observable_counter, meter.create_observable_up_down_counter
        self.attached = tally(
            up_down, n.STREAMS_ATTACHED, "{stream}", "Streams with a client connection attached"
        )
        self.detached = tally(
            up_down, n.STREAMS_DETACHED, "{stream}", "Streams whose work runs with no client attached"
        )
        self.events = tally(counter, n.EVENTS_RECORDED, "{event}", "Events recorded")
        self.resumes = tally(counter, n.RESUMES, "{resume}", "Resumes, by outcome", n.ATTR_RESUME_OUTCOME)
        self.closes = tally(
            counter, n.STREAM_CLOSES, "{close}", "Connections closed at will, by reason", n.ATTR_CLOSE_REASON
        )
        self.tasks = tally(counter, n.TASKS, "{task}", "Tasks entering a status", n.ATTR_TASK_STATUS)
        self.rest_calls = tally(
            counter,
            n.REST_CALLS,
            "{call}",
            "REST face calls, by route and status",
            "http.route",
            "http.response.status_code",
        )
        self.outages = tally(counter, n.STORE_OUTAGES, "{outage}", "Store outages begun", n.ATTR_STORE_NAME)
        self.drains = tally(counter, n.DRAIN_COUNT, "{drain}", "Drains, by outcome", n.ATTR_DRAIN_OUTCOME)
        self.adoptions = tally(
            counter, n.SESSION_ADOPTIONS, "{session}", "Sessions taken over from a node that was gone"
        )


_TALLIES: weakref.WeakKeyDictionary[Any, _Tallies] = weakref.WeakKeyDictionary()
_GLOBAL_TALLIES: list[_Tallies] = []
_TALLIES_LOCK = threading.Lock()


def _tallies_of(meter_provider: Any, meter: Any) -> _Tallies:
    """The tallies of `meter_provider` (None: the global one), made on `meter` the first time."""
    with _TALLIES_LOCK:
        if meter_provider is None:
            if not _GLOBAL_TALLIES:
                _GLOBAL_TALLIES.append(_Tallies(meter))
            return _GLOBAL_TALLIES[0]
        try:
            found = _TALLIES.get(meter_provider)
        except TypeError:  # (a provider that cannot be weakly referenced: its own tallies)
            return _Tallies(meter)
        if found is None:
            found = _TALLIES[meter_provider] = _Tallies(meter)
        return found


class OtelTelemetry(Telemetry):
    """Reports through OpenTelemetry (see the module docstring). Counters and up-down counters
    are asynchronous instruments (`_Tally`); histograms and spans are the SDK's own calls."""

    __slots__ = (
        "_global",
        "counts",
        "drain_duration",
        "operation_duration",
        "replay_duration",
        "replay_size",
        "store_attributes",
        "store_duration",
        "tools",
        "tracer",
    )

    enabled = True

    def __init__(self, *, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        version = _version("mcp-resume-asgi")
        self.tracer = trace.get_tracer(SCOPE_NAME, version, tracer_provider=tracer_provider)
        meter = metrics.get_meter(SCOPE_NAME, version or "", meter_provider=meter_provider)
        self.operation_duration = meter.create_histogram(
            n.OPERATION_DURATION,
            unit="s",
            description="Duration of an MCP request the middleware answered itself",
            explicit_bucket_boundaries_advisory=n.DURATION_BUCKETS,
        )
        self.replay_duration = meter.create_histogram(
            n.REPLAY_DURATION,
            unit="s",
            description="Time a resume took to catch up with what was recorded before it",
            explicit_bucket_boundaries_advisory=n.DURATION_BUCKETS,
        )
        self.replay_size = meter.create_histogram(
            n.REPLAY_SIZE,
            unit="{event}",
            description="Events a resume replayed to catch up",
            explicit_bucket_boundaries_advisory=REPLAY_SIZE_BUCKETS,
        )
        self.store_duration = meter.create_histogram(
            n.STORE_OPERATION_DURATION,
            unit="s",
            description="Duration of a store call, by store and operation",
            explicit_bucket_boundaries_advisory=STORE_BUCKETS,
        )
        self.store_attributes: dict[tuple[str, str, str | None], dict[str, str]] = {}
        self.drain_duration = meter.create_histogram(
            n.DRAIN_DURATION,
            unit="s",
            description="Duration of a drain at shutdown",
            explicit_bucket_boundaries_advisory=n.DURATION_BUCKETS,
        )
        self.counts = _tallies_of(meter_provider, meter)
        self.tools = _ToolNames()
        self._global = _GLOBALS_READABLE and tracer_provider is None and meter_provider is None
        """It reports through the global providers only: nothing is recorded until one is set."""

    def active(self) -> Telemetry:
        if self._global and trace._TRACER_PROVIDER is None and _metrics_state._METER_PROVIDER is None:
            return OFF  # (no SDK configured: its defaults record nothing)
        return self

    # ---------------------------------------------------------------- spans
    def operation(
        self,
        scope: MutableMapping[str, Any],
        method: str,
        *,
        request_id: Any = None,
        params: Any = None,
        version: str | None = None,
        tool: str | None = None,
        poll: bool = False,
        start_ns: int | None = None,
    ) -> Operation:
        if self._global and trace._TRACER_PROVIDER is None and _metrics_state._METER_PROVIDER is None:
            return NO_OPERATION  # (no SDK configured: `active`)
        return OtelOperation(
            self,
            scope,
            method,
            request_id=request_id,
            params=params,
            version=version,
            tool=tool,
            poll=poll,
            start_ns=start_ns,
        )

    def trace_of(self, scope: MutableMapping[str, Any], params: Any = None) -> str | None:
        span = _Incoming(scope, params).span
        return None if span is None else format_traceparent(span)

    def join(self, scope: MutableMapping[str, Any], params: Any = None) -> None:
        current = trace.get_current_span().get_span_context()
        if current.is_valid:
            return  # (an outer span, current around the request: the app's spans are its children)
        parent = _Incoming(scope, params, current).parent
        if parent is not None:
            otel_context.attach(parent)  # (never detached: this context is the app task's own copy)

    def created(
        self,
        scope: MutableMapping[str, Any],
        method: str,
        *,
        params: Any = None,
        request_id: Any = None,
        tool: str | None = None,
        stream_id: str | None = None,
        task_id: str | None = None,
    ) -> str | None:
        incoming = _Incoming(scope, params)
        attributes: dict[str, AttributeValue] = {"mcp.method.name": method}
        if request_id is not None and not isinstance(request_id, bool):
            attributes["jsonrpc.request.id"] = str(request_id)
        if tool is not None:
            attributes["gen_ai.tool.name"] = tool
        if stream_id is not None:
            attributes[n.ATTR_STREAM_ID] = stream_id
        if task_id is not None:
            attributes[n.ATTR_TASK_ID] = task_id
        links = [] if incoming.ambient is None else [Link(incoming.ambient, {n.ATTR_LINK_ROLE: "http"})]
        span = self.tracer.start_span(
            f"create_task {tool}" if tool is not None else "create_task",
            context=incoming.parent if incoming.parent is not None else _ROOT,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=links,
        )
        span.end()
        made = span.get_span_context()
        if made.is_valid:
            return format_traceparent(made)
        parent = incoming.span
        return None if parent is None else format_traceparent(parent)

    # ---------------------------------------------------------------- streams
    def streams_attached(self, delta: int) -> None:
        self.counts.attached.add(delta)

    def streams_detached(self, delta: int) -> None:
        self.counts.detached.add(delta)

    def events_recorded(self, count: int) -> None:
        self.counts.events.add(count)

    def resumed(self, outcome: str) -> None:
        self.counts.resumes.add(1, outcome)

    def replayed(self, duration_s: float, events: int) -> None:
        self.replay_duration.record(duration_s)
        self.replay_size.record(events)

    def closed_at_will(self, reason: str) -> None:
        self.counts.closes.add(1, reason)

    def drained(self, duration_s: float, outcome: str) -> None:
        self.drain_duration.record(duration_s, {n.ATTR_DRAIN_OUTCOME: outcome})
        self.counts.drains.add(1, outcome)

    def session_adopted(self) -> None:
        self.counts.adoptions.add(1)

    # ---------------------------------------------------------------- faces, store
    def task_status(self, status: str) -> None:
        self.counts.tasks.add(1, status)

    def rest_call(self, route: str, status: int) -> None:
        self.counts.rest_calls.add(1, route, status)

    def store_operation(self, store: str, operation: str, duration_s: float, error_type: str | None) -> None:
        key = (store, operation, error_type)
        attributes = self.store_attributes.get(key)
        if attributes is None:  # (a few dozen: stores x operations x outcomes)
            attributes = {n.ATTR_STORE_NAME: store, n.ATTR_STORE_OPERATION: operation}
            if error_type is not None:
                attributes["error.type"] = error_type
            self.store_attributes[key] = attributes
        self.store_duration.record(duration_s, attributes)

    def store_outage(self, store: str) -> None:
        self.counts.outages.add(1, store)


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None
