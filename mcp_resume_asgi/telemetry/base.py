"""What the middleware reports, as calls that cost nothing when telemetry is off.

`Telemetry` is the object the middleware hands down (the engine's `StreamServices`, its
port): one method per thing worth counting, each a plain call that does nothing here.
`otel.py` overrides them with OpenTelemetry instruments and spans; nothing else in the
package knows which one it holds, and this module imports nothing of OpenTelemetry.

An `Operation` is the span (and the `mcp.server.operation.duration` sample) of a request
the middleware answers itself: opened when it starts, told what it learns (the HTTP
status through `watch(send)`, the record that created the stream or task through
`created_by`), ended when the answer is out. The span is made when it ends, so that
its parent and links can depend on what was learned (a poll joins the trace of the
request that created its task, once the caller was admitted to it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from types import TracebackType
from typing import Any

__all__ = ["NO_OPERATION", "OFF", "AttributeValue", "Operation", "SendLike", "Telemetry"]

SendLike = Callable[[MutableMapping[str, Any]], Awaitable[None]]
"""An ASGI `send` (`wire.asgi.Send`; this layer imports nothing of the others)."""
AttributeValue = str | bool | int | float


class Operation:
    """A request the middleware answers itself, while it is answered (this one: off)."""

    __slots__ = ()

    def watch(self, send: SendLike) -> SendLike:
        """`send`, noting the answer's status (and a JSON-RPC error in it) on its way out."""
        return send

    def set(self, key: str, value: AttributeValue | None) -> None:
        """An attribute of the span (None: not set)."""

    def created_by(
        self, trace: str | None, *, stream_id: str | None = None, task_id: str | None = None
    ) -> None:
        """The caller was admitted to a stream or task: link the span to the request that
        created it (`trace`, a W3C `traceparent` stored with its record) and name it."""

    def tool_found(self) -> None:
        """The tool this operation names is the app's own (the face found it in the app's list,
        or a call of it): its name may label the metrics. Until then a request's tool name is a
        string of the caller's choosing, and the metrics carry it only if it was found before."""

    def failed(self, error_type: str, message: str | None = None) -> None:
        """The operation failed: `error.type` (a JSON-RPC code as a string, an HTTP status)."""

    def end(self) -> None:
        """The answer is out: the span and the duration sample are recorded."""

    def __enter__(self) -> Operation:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None and not issubclass(exc_type, GeneratorExit):
            self.failed(exc_type.__qualname__)
        self.end()


NO_OPERATION = Operation()


class Telemetry:
    """Telemetry off: every report is a call that does nothing (see the module docstring)."""

    __slots__ = ()

    enabled = False
    """Whether reports are recorded: the reports made per event or per connection
    (`events_recorded`, `streams_attached`, `streams_detached`) are not called at all while
    False. A telemetry of its own sets it True."""

    def active(self) -> Telemetry:
        """What to report through now: this telemetry, or `OFF` when nothing would record it
        (OpenTelemetry's global providers still the API's defaults: no SDK configured yet). Asked
        once by each part of a request that reports (its writer, its recorder, a follower), which
        keeps the answer: what it counted is taken back through the same one, so
        `streams_attached` never goes below zero when an SDK is configured in a stream's middle."""
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
        """The span of a request the middleware answers itself (`method`: its JSON-RPC method,
        or the MCP method a REST route stands for). `params`: the request's params, whose
        `_meta` may carry the caller's trace context. `poll`: a resume or a task poll (the
        span says so, for a sampler). `start_ns`: when it started, if before this call."""
        return NO_OPERATION

    def trace_of(self, scope: MutableMapping[str, Any], params: Any = None) -> str | None:
        """The trace context to store with a record this request creates (a `traceparent`),
        so that a resume or a poll on any node links to it; None when there is none.
        `params` may be the request's raw body (read only if it names a `traceparent`)."""
        return None

    def join(self, scope: MutableMapping[str, Any], params: Any = None) -> None:
        """Called first on the app's task (a copy of its request's context): the app's own spans
        join the trace the request brought (`trace_of`'s), where no span is current already."""

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
        """A short span for a durable thing the middleware creates (a task), in the caller's
        trace (or a new one); its `traceparent`, to store with the record (None when off)."""
        return None

    # ---------------------------------------------------------------- streams (the engine)
    def streams_attached(self, delta: int) -> None:
        """A stream got (+1) or lost (-1) its attached client connection."""

    def streams_detached(self, delta: int) -> None:
        """A stream whose app runs lost (+1) its client, or got one back or ended (-1)."""

    def events_recorded(self, count: int) -> None:
        """Events were recorded on a stream."""

    def resumed(self, outcome: str) -> None:
        """A client came back to a stream (`names.ResumeOutcome`)."""

    def replayed(self, duration_s: float, events: int) -> None:
        """A resume caught up with what was recorded before it: how long, how many events."""

    def closed_at_will(self, reason: str) -> None:
        """The server closed a client's connection at will (`core.stream.Reason`)."""

    def drained(self, duration_s: float, outcome: str) -> None:
        """A drain at shutdown ended."""

    def session_adopted(self) -> None:
        """This node took over a session whose node was gone (`engine/adoption.py`)."""

    # ---------------------------------------------------------------- faces, store
    def task_status(self, status: str) -> None:
        """A task entered `status` (`working` at its creation, then a terminal one)."""

    def rest_call(self, route: str, status: int) -> None:
        """The REST face answered a call of `route` (its template) with `status`."""

    def store_operation(self, store: str, operation: str, duration_s: float, error_type: str | None) -> None:
        """One store call, how long it took, and how it failed (None: it did not)."""

    def store_outage(self, store: str) -> None:
        """The store stopped answering (counted once per outage)."""


OFF = Telemetry()
"""Telemetry off (the default where OpenTelemetry is not installed)."""
