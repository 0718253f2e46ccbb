"""The names of what the middleware reports: its instruments, their attributes, and the
convention's histogram buckets - one place, so the code, the docs' table and the tests agree.

`mcp.server.operation.duration` and the span attributes are the OpenTelemetry MCP semantic
conventions' own. The convention defines nothing for streams, resumption, tasks or the
store, so those instruments are this project's, in the same style under `mcp_resume.`
(docs/guides/observability.md lists every one).
"""

from __future__ import annotations

__all__ = [
    "ATTR_CLOSE_REASON",
    "ATTR_DRAIN_OUTCOME",
    "ATTR_LINK_ROLE",
    "ATTR_POLL",
    "ATTR_REST_OPERATION",
    "ATTR_RESUME_OUTCOME",
    "ATTR_STORE_NAME",
    "ATTR_STORE_OPERATION",
    "ATTR_STREAM_ID",
    "ATTR_TASK_ID",
    "ATTR_TASK_STATUS",
    "DRAIN_COUNT",
    "DRAIN_DURATION",
    "DURATION_BUCKETS",
    "EVENTS_RECORDED",
    "INSTRUMENTS",
    "MAX_TOOL_NAMES",
    "METHODS",
    "OPERATION_DURATION",
    "OTHER",
    "PROTOCOL_VERSIONS",
    "REPLAY_DURATION",
    "REPLAY_SIZE",
    "REST_CALLS",
    "RESUMES",
    "SESSION_ADOPTIONS",
    "STORE_OPERATION_DURATION",
    "STORE_OUTAGES",
    "STREAMS_ATTACHED",
    "STREAMS_DETACHED",
    "STREAM_CLOSES",
    "TASKS",
    "ResumeOutcome",
]

#: The convention's explicit bucket boundaries for its duration histograms (seconds).
DURATION_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

# ---------------------------------------------------------------- instruments
#: The convention's: a request the middleware answered itself (histogram, s).
OPERATION_DURATION = "mcp.server.operation.duration"
#: Streams with a client connection attached now (up-down counter).
STREAMS_ATTACHED = "mcp_resume.streams.attached"
#: Streams whose app still runs with no client attached (up-down counter).
STREAMS_DETACHED = "mcp_resume.streams.detached"
#: Events recorded on streams (counter).
EVENTS_RECORDED = "mcp_resume.events.recorded"
#: Resumes of a stream, by `mcp_resume.resume.outcome` (counter).
RESUMES = "mcp_resume.resumes"
#: From a resume's attach until it caught up with what was recorded before it (histogram, s).
REPLAY_DURATION = "mcp_resume.replay.duration"
#: Events a resume replayed to catch up (histogram).
REPLAY_SIZE = "mcp_resume.replay.size"
#: Streams closed at will by the server, by `mcp_resume.close.reason` (counter).
STREAM_CLOSES = "mcp_resume.stream.closes"
#: Tasks entering a status, by `mcp_resume.task.status` (counter).
TASKS = "mcp_resume.tasks"
#: Calls of the REST face, by `http.route` and `http.response.status_code` (counter).
REST_CALLS = "mcp_resume.rest.calls"
#: One store call (histogram, s), by store and operation.
STORE_OPERATION_DURATION = "mcp_resume.store.operation.duration"
#: Store outages begun: the store stopped answering after it had answered (counter).
STORE_OUTAGES = "mcp_resume.store.outages"
#: A drain at shutdown, start to end (histogram, s).
DRAIN_DURATION = "mcp_resume.drain.duration"
#: Drains, by `mcp_resume.drain.outcome` (counter).
DRAIN_COUNT = "mcp_resume.drains"
#: Sessions this node took over from a node that was gone (counter).
SESSION_ADOPTIONS = "mcp_resume.session.adoptions"

INSTRUMENTS = (
    OPERATION_DURATION,
    STREAMS_ATTACHED,
    STREAMS_DETACHED,
    EVENTS_RECORDED,
    RESUMES,
    REPLAY_DURATION,
    REPLAY_SIZE,
    STREAM_CLOSES,
    TASKS,
    REST_CALLS,
    STORE_OPERATION_DURATION,
    STORE_OUTAGES,
    DRAIN_DURATION,
    DRAIN_COUNT,
    SESSION_ADOPTIONS,
)
"""Every instrument, in the order of the docs' table."""

# ---------------------------------------------------------------- what a request may name
#: The value of an attribute whose request named something the middleware does not know (the
#: conventions' word for an unknown HTTP method): a request cannot open a series of its choosing.
OTHER = "_OTHER"
#: The protocol revisions `mcp.protocol.version` may carry; a request naming another is `_OTHER`.
PROTOCOL_VERSIONS = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"})
#: The methods `mcp.method.name` may carry: those a client sends a server in any revision, and
#: the names of what the middleware answers itself (a resume, a stream URL's answers, the REST
#: face's OpenAPI document). A request naming another is `_OTHER`.
METHODS = frozenset(
    {
        "initialize",
        "ping",
        "server/discover",
        "tools/list",
        "tools/call",
        "prompts/list",
        "prompts/get",
        "resources/list",
        "resources/read",
        "resources/templates/list",
        "resources/subscribe",
        "resources/unsubscribe",
        "completion/complete",
        "logging/setLevel",
        "subscriptions/listen",
        "tasks/get",
        "tasks/result",
        "tasks/list",
        "tasks/cancel",
        "tasks/update",
        "notifications/cancelled",
        "notifications/initialized",
        "notifications/progress",
        "notifications/roots/list_changed",
        "stream/resume",
        "stream/answer",
        "openapi",
    }
)
#: Most tool names one telemetry labels `mcp.server.operation.duration` with: the app's own, as
#: the face that served them found them (see `Operation.tool_found`); past it, `_OTHER`.
MAX_TOOL_NAMES = 100

# ---------------------------------------------------------------- this project's attributes
ATTR_POLL = "mcp_resume.poll"
"""True on the span of a resume or a task poll: a sampler may drop these (they are linked)."""
ATTR_STREAM_ID = "mcp_resume.stream.id"
ATTR_TASK_ID = "mcp_resume.task.id"
ATTR_LINK_ROLE = "mcp_resume.link.role"
"""On a span link: `created_by` (the request that created the stream or task) or `http`
(the HTTP request's own context, where `params._meta` gave the parent)."""
ATTR_RESUME_OUTCOME = "mcp_resume.resume.outcome"
ATTR_CLOSE_REASON = "mcp_resume.close.reason"
ATTR_TASK_STATUS = "mcp_resume.task.status"
ATTR_REST_OPERATION = "mcp_resume.rest.operation"
ATTR_STORE_NAME = "mcp_resume.store.name"
ATTR_STORE_OPERATION = "mcp_resume.store.operation"
ATTR_DRAIN_OUTCOME = "mcp_resume.drain.outcome"


class ResumeOutcome:
    """The values of `mcp_resume.resume.outcome`."""

    REPLAYED = "replayed"
    """The client got the stream after its cursor (nothing missing)."""
    GAP = "gap"
    """Events it had not got were dropped: it got the gap error."""
    NOTHING = "204"
    """Nothing more will come for it: 204."""
    REFUSED = "refused"
    """Not its stream, unknown or expired, or a cursor ahead of the stream."""
