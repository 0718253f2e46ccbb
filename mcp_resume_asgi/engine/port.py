"""What the layers in front of the engine use of it: a request on its way in, and plain answers.

Feature layers (SEP-975, resume tokens, Tasks), the REST face and the HTTP side's answerers
see a JSON-RPC request as a `RequestContext` (the HTTP front asks each layer about it as a
`Feature`), serve a connection their own way with a `Delivery`, answer a retried POST with a
`RetryAnswer`, and answer from the engine's `Refusal`s. What they may ask of the engine is an
`EnginePort`: one typed callable per capability (host a request, serve a stream, cancel, is
it live, admit, call the app), so that each caller can be handed exactly that, never the
engine and its internals.

Nothing here runs a stream; the engine (`engine.py`) builds the port from its own methods,
and the front's `host` (`retried_posts.py`: an `Idempotency-Key` is claimed first).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from mcp_resume_asgi.policy import Policy, RouteTable
from mcp_resume_asgi.store.base import Store, StreamMeta
from mcp_resume_asgi.telemetry import OFF, Telemetry
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.asgi import Receive, Scope, Send
from mcp_resume_asgi.wire.headers import Headers
from mcp_resume_asgi.wire.principal import PrincipalOf
from mcp_resume_asgi.wire.replies import send_bytes
from mcp_resume_asgi.wire.tokens import TokenSigner

__all__ = [
    "NOT_FOUND",
    "PLAIN",
    "PROBE_TIMEOUT_S",
    "Admit",
    "AppAnswer",
    "AskApp",
    "BecomingTask",
    "CallApp",
    "Cancel",
    "Cluster",
    "Delivery",
    "Drained",
    "EndOrphan",
    "EngineHost",
    "EnginePort",
    "Feature",
    "HostRequest",
    "HostedStreams",
    "Identify",
    "IsLive",
    "OwnerGone",
    "Records",
    "Refusal",
    "RequestContext",
    "Rerun",
    "RetryAnswer",
    "ServeOptions",
    "ServeStream",
    "Serving",
]


# ---------------------------------------------------------------------- plain answers
@dataclass(frozen=True, slots=True)
class Drained:
    """What a drain did (`Engine.drain`): how long it took, how many app tasks ran at its start,
    how many of them finished within the budget and how many it ended at the budget."""

    seconds: float
    running: int
    finished: int
    stopped: int


@dataclass(frozen=True, slots=True)
class Refusal:
    """An answer that ends a request instead of what the store holds."""

    status: int
    headers: Headers
    body: bytes

    async def send(self, send: Send) -> None:
        await send_bytes(send, self.status, self.body, self.headers)


NOT_FOUND = Refusal(
    404,
    [(b"content-type", b"application/json")],
    p.dumps(p.error_message(None, p.INVALID_REQUEST, "unknown or expired stream")),
)
"""The same for a stream that does not exist and one that is not the caller's: nothing leaks."""


@dataclass(slots=True)
class Delivery:
    """How one client connection is served, where a feature layer needs more than the default.

    `deadline_s`: end the connection this long after it attached, writing the frame
    `on_deadline(cursor)` returns (the resume-token layer's interim result).
    `transform(seq, payload)`: rewrite an event on its way out (not in the store).
    `at_will`: allow the policy's at-will closes (they would cut a deadline-driven answer short).
    `survives_close`: the request's work outlives this connection closing (it became a
    task): a close detaches instead of cancelling. It matters where a close is a cancel
    (2026-07-28, `StreamCore.left`); a layer may set it while the request runs.
    `refusal_recorded`: the app's refusal is recorded as the answer (nobody to pass it to).
    `after_app()`: run once the request's app call is over and its stream concluded (on the
    engine's task: the client's call may have returned long before).
    `input_required(cursor)`: see below.
    """

    deadline_s: float | None = None
    on_deadline: Callable[[int], Awaitable[bytes]] | None = None
    transform: Callable[[int, bytes], bytes] | None = None
    at_will: bool = True
    survives_close: bool = False
    """The request's work outlives this connection closing (it became a task): a close
    detaches instead of cancelling."""
    refusal_recorded: bool = False
    """No client waits for the app's status (the middleware issued the request: a task's next
    round): the app's refusal (a 4xx before its answer opened) is the request's answer,
    recorded on its stream like any other, not passed to a client and forgotten."""
    after_app: Callable[[], Awaitable[None]] | None = None
    input_required: Callable[[int], bytes] | None = None
    """The frame that ends this connection's answer `input_required` when a drain hands its
    request over (`core/mrtr.py`), given the seq of the last event it got; None: it is not
    handed over so (the first connection of a request that may be asks its stream instead)."""


RetryAnswer = Callable[[str, StreamMeta | None, int], Awaitable[bool]]
"""A feature layer's own answer to a retried POST (the same `Idempotency-Key`), asked with the
original's stream id once the retry is admitted to its stream `meta`, with the seq it resumes
after - or, that stream gone, with None (the same body; the layer admits the caller itself):
True when it answered (the Tasks layer answers a call that became a task with that task)."""


# ---------------------------------------------------------------------- what the faces read (REST, features)
# (the REST face and the feature layers reach the engine only through the port; this block is
# theirs, kept apart from the Tasks layer's additions.)
PROBE_TIMEOUT_S = 10.0
"""How long a request the middleware makes of the app on a client's behalf may take."""


@dataclass(frozen=True, slots=True)
class AppAnswer:
    """What the app answered a request made on a client's behalf, and whom its auth saw."""

    status: int
    headers: Headers
    body: bytes
    principal: str | None
    """The principal of the scope the app saw, as its own middleware left it."""


class AskApp(Protocol):
    """POST `body` to the app's MCP endpoint as the client would (its credentials): the app's
    answer and the principal its own auth saw (the REST face asks who calls with a `ping`)."""

    async def __call__(
        self, template: Scope, path: str, session_id: str | None, version: str, body: bytes
    ) -> AppAnswer: ...


class OwnerGone(Protocol):
    """Whether the node `owner` (a stream's owner) is known dead: False on a single node, for
    this node, and while the cluster is not running."""

    async def __call__(self, owner: str) -> bool: ...


class Rerun(Protocol):
    """The node running the stream's request was lost before its answer: run it again here if
    its route allows it (`Policy.rerun_on_loss`, `Engine.rerun`). True when the call goes on
    (here, or on another node that took the loss first); `policy`: the one to run it under."""

    async def __call__(self, meta: StreamMeta, policy: Policy | None = None) -> bool: ...


class EndOrphan(Protocol):
    """The node running the stream's request is gone and it is not run again: end it, once
    fleet-wide (`Engine.end_orphan`: its answer recorded as an error). True when it is over or
    goes on (ended here or by another node, answered, run again); False when its record is
    gone. `found_by`: who found it (logged)."""

    async def __call__(self, meta: StreamMeta, found_by: str) -> bool: ...


# ---------------------------------------------------------------------- the engine's capabilities
class HostRequest(Protocol):
    """Host a JSON-RPC request of the app, detached from `send`'s connection: how the first
    client connection was let go (why, and the seq of the last event it got), or None when
    it was not served from the stream (a JSON answer passed through, or a retried POST).

    An awaitable, not necessarily a coroutine: the front awaits it from its outermost frame,
    whatever prepared the request returned first (a burst of requests in flight holds less)."""

    def __call__(
        self, ctx: RequestContext, receive: Receive, send: Send, options: ServeOptions = ...
    ) -> Awaitable[tuple[str, int] | None]: ...


class EngineHost(Protocol):
    """`Engine.handle_request`: what the front's `HostRequest` hands a request on to, once its
    `Idempotency-Key` (if any) is claimed for the stream (`claimed_key`: its store key)."""

    def __call__(
        self,
        ctx: RequestContext,
        receive: Receive,
        send: Send,
        options: ServeOptions,
        claimed_key: str | None = None,
    ) -> Awaitable[tuple[str, int] | None]: ...


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """How a layer wants its request served, beyond what the request itself says (its
    `RequestContext`): the one set of options every way of hosting a request shares (the front,
    the port's `host`, the engine), so that a new one is added in one place."""

    delivery: Delivery | None = None
    """The layer serves the client's connection its own way (a deadline, an interim answer)."""
    policy: Policy | None = None
    """Another policy than the route's (None: the request's own)."""
    first_messages: tuple[dict[str, Any], ...] = ()
    """JSON-RPC messages recorded at the start of the stream, before the app's."""
    idempotency_key: str | None = None
    """The POST's `Idempotency-Key` (the front claims it before the engine hosts the request)."""
    on_retry: RetryAnswer | None = None
    """The layer's own answer to a retry of this request (the same `Idempotency-Key`)."""


PLAIN = ServeOptions()
"""The options of a request no layer asked anything of."""


class ServeStream(Protocol):
    """Answer a resuming client with the stream after `after_seq`: why it was let go, and where."""

    async def __call__(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        meta: StreamMeta,
        after_seq: int,
        delivery: Delivery | None = None,
    ) -> tuple[str, int] | None: ...


class Cancel(Protocol):
    """Cancel the app's work for a stream (if it runs here) and free its record."""

    async def __call__(self, stream_id: str, reason: str) -> None: ...


class IsLive(Protocol):
    """Whether the stream's request runs on this node now."""

    def __call__(self, stream_id: str) -> bool: ...


class Admit(Protocol):
    """None when the app accepts this request for the stream's session and principal, else
    what to answer instead of the stream (`admission.py`)."""

    async def __call__(self, scope: Scope, meta: StreamMeta) -> Refusal | None: ...


class CallApp(Protocol):
    """POST `body` to the app's MCP endpoint as the client would: the app's status and body."""

    async def __call__(
        self, template: Scope, path: str, session_id: str | None, version: str, body: bytes
    ) -> tuple[int, bytes]: ...


# ---------------------------------------------------------------------- what the Tasks layer asks
@dataclass(frozen=True, slots=True)
class BecomingTask:
    """A request hosted here that still waits for the deadline that makes it a task: the
    `Delivery` it was given (its `on_deadline` makes the task) and when that deadline is due
    (`time.monotonic()`), so a retry of the same call can be served the same way."""

    delivery: Delivery
    answer_by: float


class Identify(Protocol):
    """Who is calling, as the app's own auth sees this request: its principal, or its refusal."""

    async def __call__(self, scope: Scope, path: str, version: str) -> str | Refusal | None: ...


class Cluster(Protocol):
    """The node's view of its peers (`engine/cluster.py`), as far as a layer relays requests."""

    running: bool

    async def alive(self, node_id: str) -> bool: ...

    async def relay(
        self, owner: str, scope: Scope, receive: Receive, send: Send, body: bytes, *, give_back: bool = False
    ) -> bool: ...


# ---------------------------------------------------------------------- the port, by use
# What each kind of user of the port needs of it, as a Protocol of its own: a part is typed
# with the one it uses (a user that needs two says so with a Protocol of both), so that what
# it may ask of the engine reads from its signature. `EnginePort` is all of them.
class Records(Protocol):
    """What this node keeps and how it reports (the Tasks layer and the REST face read it)."""

    @property
    def store(self) -> Store: ...
    @property
    def signer(self) -> TokenSigner: ...
    @property
    def telemetry(self) -> Telemetry: ...


class Serving(Protocol):
    """Serve a client a stream, once the app admits it (a resume, an answer to the server)."""

    @property
    def serve(self) -> ServeStream: ...
    @property
    def admit(self) -> Admit: ...
    async def admitted(self, scope: Scope, send: Send, meta: StreamMeta | None) -> StreamMeta | None: ...


class HostedStreams(Protocol):
    """The state of a stream hosted here, asked by its id, and what may be done to it (the
    Tasks layer's limits and cancels): nothing of it is handed out."""

    @property
    def is_live(self) -> IsLive: ...
    @property
    def stop(self) -> Callable[[str, str], bool]: ...
    @property
    def cancel_soon(self) -> Callable[[str, str], None]: ...
    @property
    def resumable(self) -> Callable[[str], bool]: ...
    @property
    def becoming_task(self) -> Callable[[str], BecomingTask | None]: ...
    @property
    def hosted_principal(self) -> Callable[[str, Scope], str | None]: ...


@dataclass(frozen=True, slots=True)
class EnginePort:
    """The engine as its callers may use it: one callable per capability, nothing else (each
    part typed with what it uses of it: `Records`, `Serving`, `HostedStreams`...)."""

    host: HostRequest
    serve: ServeStream
    cancel: Cancel
    is_live: IsLive
    admit: Admit
    call_app: CallApp
    # -- what the faces (Tasks, REST, the feature layers) read: the stores and ids of this node ...
    store: Store
    signer: TokenSigner
    node_id: str
    node: Cluster | None
    routes: RouteTable
    principal: PrincipalOf
    """The principal of a request as the configured `principal` callable sees it."""
    identify: Identify
    # ... and the state of a stream hosted here, asked by its id (nothing of it is handed out).
    hosted_principal: Callable[[str, Scope], str | None]
    """The principal of the stream hosted here (as its request was admitted), else `principal(scope)`."""
    stop: Callable[[str, str], bool]
    """Cancel the app's work of a stream hosted here, unless it finished (in a task the engine
    spawns; the record stays): whether it was running here."""
    cancel_soon: Callable[[str, str], None]
    """`cancel` in a task the engine spawns (the caller does not wait for it)."""
    resumable: Callable[[str], bool]
    """Whether a stream hosted here has a first connection its client can resume from."""
    becoming_task: Callable[[str], BecomingTask | None]
    """The request hosted here if it may still become a task (see `BecomingTask`), else None."""
    store_outage: Callable[[BaseException], bool]
    """Whether the exception says the store is down (the front is told, once per call)."""
    ask_app: AskApp
    owner_gone: OwnerGone
    rerun: Rerun
    end_orphan: EndOrphan
    request_bound: int | None = None
    """The largest JSON-RPC request body the front takes (None: not said)."""
    telemetry: Telemetry = OFF
    """Where the front and the faces report what they answer themselves (`telemetry`)."""

    async def admitted(self, scope: Scope, send: Send, meta: StreamMeta | None) -> StreamMeta | None:
        """`meta` when it exists and the app admits this request to it; else None, answered."""
        refusal = NOT_FOUND if meta is None else await self.admit(scope, meta)
        if refusal is not None:
            await refusal.send(send)
            return None
        return meta


# ---------------------------------------------------------------------- a request on its way in
@dataclass(slots=True)
class RequestContext:
    """A JSON-RPC request on its way into the engine, as the layers see it."""

    port: EnginePort
    """What the layers may ask of the engine: the only way they reach it."""
    scope: Scope
    body: bytes
    message: dict[str, Any]
    method: str
    tool: str | None
    session_id: str | None
    version: str
    principal: str | None
    route: int
    policy: Policy
    stream_id: str
    """The id the request's stream will have if the engine runs it."""
    capabilities: dict[str, Any] = field(default_factory=dict)
    """The client's capabilities: per request (`_meta`, 2026-07-28) or from the session's `initialize`."""
    survives_close: bool = False
    """Set by a layer that gives the client a way back to the request's work (SEP-975's
    resume token): its connection closing detaches instead of cancelling (2026-07-28)."""

    @property
    def request_id(self) -> Any:
        return self.message["id"]

    @property
    def params(self) -> dict[str, Any]:
        params = self.message.get("params")
        return params if isinstance(params, dict) else {}

    async def host(
        self, receive: Receive, send: Send, options: ServeOptions = PLAIN
    ) -> tuple[str, int] | None:
        """Hand the request to the engine as it stands here (a layer that serves it its own way:
        with a `Delivery`, another policy, its own answer to a retry); see `HostRequest`."""
        return await self.port.host(self, receive, send, options)


class Feature(Protocol):
    """A feature layer as the HTTP front asks it about a request (`features.FeatureMiddleware`
    is the base of every one), so the front needs no import of the layers above it."""

    answers: frozenset[str]
    """JSON-RPC methods the layer answers itself (a 503 while the store is down)."""

    async def intercept(self, ctx: RequestContext, receive: Receive, send: Send) -> bool:
        """Answer the request without the app (True), or leave it to the engine."""
        ...

    async def first_messages(self, ctx: RequestContext) -> list[dict[str, Any]]:
        """JSON-RPC messages recorded at the start of the request's stream, before the app's."""
        ...
