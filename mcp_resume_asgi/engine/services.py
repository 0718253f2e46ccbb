"""What a stream's collaborators use of the engine, and nothing else: `StreamServices`.

The engine builds one per middleware stack and hands it, never itself, to what it builds:
the hosted streams and their parts, the follower, the answerers of client answers, cancel
notices and retried POSTs. Rather than the whole `Engine`, they get the short list of what
they actually use - the app, the store and what stands
for it (the outage reporter, the recovery of held writes, the session records, the cancel
bindings), the signer, the scheduler, this node, the streams live here - so that none of
them imports the engine. Nothing here decides about a stream.

It is generic in what it keeps live (`StreamServices[HostedStream]`), so that this module
needs no import of the hosted stream, which uses it.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from mcp_resume_asgi.core.owner_watch import OwnerWatches
from mcp_resume_asgi.engine.admission import post_to_app
from mcp_resume_asgi.engine.cancel_bindings import CancelBindings
from mcp_resume_asgi.engine.cluster import Node
from mcp_resume_asgi.engine.detached_streams import DetachedStreams
from mcp_resume_asgi.engine.scheduler import Scheduler
from mcp_resume_asgi.engine.sessions import Sessions
from mcp_resume_asgi.engine.store_recovery import StoreRecovery
from mcp_resume_asgi.policy import Policy, running_ttl
from mcp_resume_asgi.store.base import GapError, Store, StreamMeta
from mcp_resume_asgi.telemetry import OFF, Telemetry
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.asgi import ASGIApp, Scope
from mcp_resume_asgi.wire.headers import Headers
from mcp_resume_asgi.wire.principal import PrincipalOf
from mcp_resume_asgi.wire.scope_keys import STREAM_SEGMENT
from mcp_resume_asgi.wire.sse import encode_payload
from mcp_resume_asgi.wire.tokens import TokenSigner

if TYPE_CHECKING:
    from mcp_resume_asgi.core.stream import StreamCore
    from mcp_resume_asgi.store.base import StreamKind

__all__ = [
    "ENDED_WITHOUT_RESPONSE",
    "SHUT_DOWN",
    "SSE_HEADERS",
    "Drain",
    "HostedRequest",
    "OutageReporter",
    "StreamServices",
]

#: The error a request's stream ends with when its app ended it without a response.
ENDED_WITHOUT_RESPONSE = "the server ended the stream without a response"
#: The error a request's stream (and a task: `failed`) ends with when this node's drain budget
#: ended its work (`Engine.drain`). A re-run on another node would start from
#: such a record: the request is in the store, its end says why it did not finish here.
SHUT_DOWN = "the server shut down before the request finished"

#: The headers of an SSE answer the engine opens itself (the stream's Link and session id added).
SSE_HEADERS: Headers = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"x-accel-buffering", b"no"),
]

S = TypeVar("S")


class Drain(enum.StrEnum):
    """How far this node's drain is (`Services.draining`)."""

    CLOSING = "closing"
    """The app's work goes on; attached connections are closed at will where `drain_closes`."""
    STOPPING = "stopping"
    """The drain's budget is spent: what still runs is ended, with `SHUT_DOWN` as its error."""


class OutageReporter:
    """Whether an error says the store is down; if so, the middleware is told (once per call).

    A store call made inside the app's `send` (or any of the engine's own) that fails this
    way is not the app's failure: the caller goes on without the store, and the middleware
    answers what needs the store with a 503 meanwhile (`http/outage.py`).
    """

    __slots__ = ("store", "tell")

    def __init__(self, store: Store, tell: Callable[[BaseException], None] | None) -> None:
        self.store = store
        self.tell = tell

    def __call__(self, exc: BaseException) -> bool:
        if not self.store.is_unavailable_error(exc):
            return False
        if self.tell is not None:
            self.tell(exc)
        return True


async def _no_rerun(meta: StreamMeta) -> bool:
    """No engine to re-run a lost call: it ends with a follower's error."""
    return False


async def _no_end(meta: StreamMeta, found_by: str) -> bool:
    """No engine to end a lost node's stream: its follower lets it go."""
    return False


class StreamServices(Generic[S]):
    """The engine's services to its streams (see the module docstring)."""

    __slots__ = (
        "app",
        "cancel_bindings",
        "detached",
        "drain_closes",
        "draining",
        "end_orphan",
        "followers",
        "live",
        "node",
        "node_id",
        "owner_watches",
        "principal",
        "recovery",
        "rerun",
        "scheduler",
        "sessions",
        "signer",
        "store",
        "store_outage",
        "telemetry",
    )

    def __init__(
        self,
        app: ASGIApp,
        *,
        store: Store,
        signer: TokenSigner,
        principal: PrincipalOf,
        node_id: str,
        node: Node | None,
        session_ttl_s: float,
        on_store_outage: Callable[[BaseException], None] | None = None,
        telemetry: Telemetry = OFF,
    ) -> None:
        self.app = app
        """The app, as the engine calls it (its requests, and the requests made on a client's behalf)."""
        self.store = store
        self.signer = signer
        self.principal = principal
        """Who is calling, from a scope the app's auth has seen (`principal.py`)."""
        self.node_id = node_id
        self.node = node
        """The cluster link where several nodes share the store, else None."""
        self.owner_watches = OwnerWatches(node.timeout_s / 2) if node is not None else None
        """When to ask whether the owner of each stream served from the store here is alive (one
        schedule per stream, whoever is attached: `core/owner_watch.py`); None without a cluster."""
        self.scheduler = Scheduler()
        self.live: dict[str, S] = {}
        """The streams whose app runs on this node now, by stream id."""
        self.followers: set[Callable[[], None]] = set()
        """How to close each connection served from the store here now, at will (`follower.py`):
        what a drain calls."""
        self.drain_closes = False
        """True from the start of a drain where another node can serve this node's clients (a
        shared store with live peers): connections are closed at will, with `retry:`, as soon as
        their head is out. Where none can, they stay attached while their work finishes, and are
        closed only when the drain ends."""
        self.draining: Drain | None = None
        """None, else how far this node's drain is (`Drain`)."""
        self.store_outage = OutageReporter(store, on_store_outage)
        self.recovery = StoreRecovery(self.store_outage)
        """Writes the store failed, held until it answers again (one waiter, only meanwhile)."""
        self.sessions = Sessions(
            store,
            ttl_s=session_ttl_s,
            owner=node_id if node is not None else None,
            store_outage=self.store_outage,
            signer=signer,
        )
        self.cancel_bindings = CancelBindings(store, self.store_outage)
        """The requests hosted here that a client's cancel notice may name."""
        self.rerun: Callable[[StreamMeta], Awaitable[bool]] = _no_rerun
        """Run a lost node's request again here (`Engine.rerun`): whether the call goes on."""
        self.end_orphan: Callable[[StreamMeta, str], Awaitable[bool]] = _no_end
        """End a lost node's stream that is not run again, once fleet-wide (`Engine.end_orphan`):
        True when it is over or goes on, False when its record is gone."""
        self.telemetry = telemetry
        """Where the streams report what happens to them (`telemetry`): each report one call,
        which does nothing when telemetry is off."""
        self.detached = DetachedStreams(telemetry)
        """The streams counted in `streams_detached` now (`detached_streams.py`)."""

    def link_header(
        self, mcp_path: str, stream_id: str, after_seq: int, prefix: bytes | None = None
    ) -> tuple[bytes, bytes]:
        """`Link: </mcp/streams/<token>>; rel="stream"` for a response that starts after `after_seq`
        (`prefix`: the stream's signed event-id prefix, where the caller has it: no second HMAC).

        An absolute path, not a URL: it is same-origin by construction, whatever
        Host header a client (or an attacker) sent.
        """
        token = self.signer.link_token(stream_id, after_seq, prefix)
        return b"link", b'<%s%s%s>; rel="stream"' % (
            mcp_path.rstrip("/").encode(),
            STREAM_SEGMENT.encode(),
            token.encode(),
        )

    def sse_headers(
        self,
        session_id: str | None,
        path: str,
        stream_id: str,
        after_seq: int,
        *,
        link: bool = True,
        prefix: bytes | None = None,
    ) -> Headers:
        """The headers of an SSE answer the engine opens itself, with the stream's Link if resumable."""
        headers = list(SSE_HEADERS)
        if session_id is not None:
            headers.append((b"mcp-session-id", session_id.encode()))
        if link:
            headers.append(self.link_header(path, stream_id, after_seq, prefix))
        return headers

    async def call_app(
        self, template: Scope, path: str, session_id: str | None, version: str, body: bytes
    ) -> tuple[int, bytes]:
        """POST `body` to the app's MCP endpoint as the client would (client answers, cancellations)."""
        reply = await post_to_app(self.app, template, path, session_id, version, body)
        return reply.status, reply.body

    @staticmethod
    def running_ttl(policy: Policy) -> float:
        """The store TTL of what a running stream writes (`policy.running_ttl`)."""
        return running_ttl(policy)

    @staticmethod
    def gap_frame(request_id: Any, gap: GapError) -> bytes:
        """The error event a client resuming from before dropped events gets instead of them."""
        text = (
            f"cannot resume: events {gap.after_seq + 1}..{gap.first_seq - 1} of this stream were dropped "
            "to stay within the server's buffer limits"
        )
        return encode_payload(p.dumps(p.error_message(request_id, p.STREAM_ERROR, text)), b"message")


class HostedRequest(Protocol):
    """Who and what a hosted request is, as the engine's parts read it (a `HostedStream`):
    its services and store, its core and policy, and the request's identity. The parts that
    need more (cancellation, the recorder) say so in Protocols of their own on top of this."""

    @property
    def services(self) -> StreamServices[Any]: ...
    @property
    def store(self) -> Store: ...
    @property
    def core(self) -> StreamCore: ...
    @property
    def policy(self) -> Policy: ...
    @property
    def stream_id(self) -> str: ...
    @property
    def kind(self) -> StreamKind: ...
    @property
    def scope(self) -> Scope: ...
    @property
    def path(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def session_id(self) -> str | None: ...
    @property
    def request_id(self) -> Any: ...
