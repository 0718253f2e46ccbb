"""The stream engine: an app's SSE answer, detached from the connection that asked for it.

An MCP server writes its answer to a request as an SSE stream on the POST that
carried it, so when that connection drops, the answer is gone. The engine hosts
the request (`hosted.py`): each event gets an id of the engine's own, is recorded
in the store and goes to whichever client connection is attached now. A client
that comes back (GET with `Last-Event-ID`, or GET on the `Link` URL) becomes the
attached connection and is sent exactly what it has not seen (`serve`): by the
hosted stream itself when its app runs here (`delivery.py`), else from the store
(`follower.py`). Every decision about a stream's life is in `core/` (`core/stream.py`
for its life, `core/resume.py` for what a resume is answered); every timer is in the
engine's one `Scheduler`.

This module is the way in: one method per kind of HTTP request the middleware
hands over, plus what the feature layers share (admission, links, the store). A POST's
`Idempotency-Key` is claimed, and a retry answered, before the engine hosts the request
(`retried_posts.py`: the port's `host`, which the front and the feature layers call). What the engine's
collaborators use of it is `StreamServices` (`services.py`), handed to them instead of the
engine; what the layers in front may ask of it is its `EnginePort` (`port.py`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from mcp_resume_asgi.core import resume
from mcp_resume_asgi.core.lifecycle import Record
from mcp_resume_asgi.core.resume import Resume
from mcp_resume_asgi.core.stream import Reason, close_cancels, primed
from mcp_resume_asgi.engine import rerun
from mcp_resume_asgi.engine.admission import Admission, post_to_app
from mcp_resume_asgi.engine.adoption import Adoptions, SessionAliases
from mcp_resume_asgi.engine.cancellation import cancel_app
from mcp_resume_asgi.engine.cluster import Node
from mcp_resume_asgi.engine.connection import Connection
from mcp_resume_asgi.engine.follower import follow
from mcp_resume_asgi.engine.hosted import HostedStream
from mcp_resume_asgi.engine.mrtr import Retries
from mcp_resume_asgi.engine.orphans import end_orphan
from mcp_resume_asgi.engine.port import (
    AppAnswer,
    BecomingTask,
    Delivery,
    Drained,
    EnginePort,
    Refusal,
    RequestContext,
    ServeOptions,
)
from mcp_resume_asgi.engine.retried_posts import RetriedPosts
from mcp_resume_asgi.engine.scheduler import spawn
from mcp_resume_asgi.engine.services import Drain, StreamServices
from mcp_resume_asgi.engine.sweep import Sweep
from mcp_resume_asgi.policy import Policy, RouteTable, running_ttl
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import GapError, Store, StreamKind, StreamMeta, StreamState
from mcp_resume_asgi.store.health import describe_error
from mcp_resume_asgi.telemetry import OFF, Telemetry
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.asgi import ASGIApp, Message, Receive, Scope, Send
from mcp_resume_asgi.wire.headers import header
from mcp_resume_asgi.wire.principal import PrincipalOf
from mcp_resume_asgi.wire.replies import send_bytes, send_json
from mcp_resume_asgi.wire.tokens import TokenSigner

__all__ = ["DRAIN_END_S", "RERUN_TAKEOVER_S", "Engine"]

logger = logging.getLogger(__name__)

#: How long a drain waits for the requests it stopped to conclude (their stream's end recorded).
DRAIN_END_S = 5.0
#: How long a node that lost the claim of a re-run waits for the winner to take the record over.
RERUN_TAKEOVER_S = 2.0


async def _gone() -> Message:
    """The `receive` of a re-run's first connection: its client is gone (there is none)."""
    return {"type": "http.disconnect"}


async def _discard(message: Message) -> None:
    """The `send` of a re-run's first connection: nothing goes to it."""


class Engine:
    """Runs streams for one middleware stack; shared by every feature layer in it."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        routes: RouteTable,
        store: Store,
        signer: TokenSigner,
        principal: PrincipalOf,
        session_ttl_s: float,
        node_id: str,
        node: Node | None = None,
        on_store_outage: Callable[[BaseException], None] | None = None,
        request_bound: int | None = None,
        telemetry: Telemetry = OFF,
        aliases: SessionAliases | None = None,
    ) -> None:
        """`on_store_outage` is told when a store call (one made inside the app's `send`, say)
        finds the store down.
        `request_bound`: the largest request body the front takes (the REST face keeps to it).
        `aliases`: the layer around the app that maps adopted sessions' ids (`adoption.py`),
        if the front put one there (else adopted sessions are not mapped)."""
        self.services: StreamServices[HostedStream] = StreamServices(
            app,
            store=store,
            signer=signer,
            principal=principal,
            node_id=node_id,
            node=node,
            session_ttl_s=session_ttl_s,
            on_store_outage=on_store_outage,
            telemetry=telemetry,
        )
        services = self.services
        services.rerun = self.rerun
        services.end_orphan = self.end_orphan
        # What the feature layers, Tasks and REST read of the engine itself (the rest through its port).
        self.app = app
        self.routes = routes
        self.store = store
        self.signer = signer
        self.principal = principal
        self.node_id = node_id
        self.node = node
        self.live = services.live
        self.recovery = services.recovery
        self._drain_done: anyio.Event | None = None
        self.drained: Drained | None = None
        """What this node's drain did, once it is over (`drain`)."""
        self.admission = Admission(app, principal=principal, store=store, node=node)
        self.retries = Retries(
            store=store, signer=signer, routes=routes, admission=self.admission, serve=self.serve_stream
        )
        """Serves the retries of 2026-07-28 calls a drain handed over through MRTR (`mrtr.py`)."""
        self.adoptions = Adoptions(
            app,
            aliases if aliases is not None else SessionAliases(app),
            sessions=services.sessions,
            store=store,
            node_id=node_id,
            node=node,
            principal=principal,
            admission=self.admission,
            telemetry=telemetry,
        )
        """The sessions this node took over from a node that was gone."""
        self.sweep = (
            Sweep(store, node, services.scheduler, self.rerun, self.end_orphan) if node is not None else None
        )
        """Finds what nodes that are gone left running (started once the node runs)."""
        self.port = EnginePort(
            host=RetriedPosts(services, self.handle_request, admit=self.admit, serve=self.serve_stream).host,
            serve=self.serve_stream,
            cancel=self.cancel_stream,
            is_live=self.is_live,
            admit=self.admit,
            call_app=services.call_app,
            # -- what the faces (Tasks, REST, the feature layers) read
            store=store,
            signer=signer,
            node_id=node_id,
            node=node,
            routes=routes,
            principal=principal,
            identify=self.admission.identify,
            hosted_principal=self.hosted_principal,
            stop=self.stop,
            cancel_soon=self.cancel_soon,
            resumable=self.resumable,
            becoming_task=self.becoming_task,
            store_outage=self.store_outage,
            ask_app=self.ask_app,
            owner_gone=self.owner_gone,
            rerun=self.rerun,
            end_orphan=self.end_orphan,
            request_bound=request_bound,
            telemetry=telemetry,
        )

    # ------------------------------------------------------------------ helpers
    async def admit(self, scope: Scope, meta: StreamMeta) -> Refusal | None:
        """None when the app accepts this request for the stream's session and principal
        (see `admission.py`); else what to answer instead of the stream."""
        return await self.admission.check(scope, meta)

    async def ask_app(
        self, template: Scope, path: str, session_id: str | None, version: str, body: bytes
    ) -> AppAnswer:
        """POST `body` to the app as the client would: its answer, and whom its auth saw."""
        reply = await post_to_app(self.app, template, path, session_id, version, body)
        return AppAnswer(reply.status, reply.headers, reply.body, self.principal(reply.scope))

    async def owner_gone(self, owner: str) -> bool:
        """Whether the node `owner` is known dead (never on a single node nor for this one)."""
        node = self.node
        return node is not None and node.running and owner != node.node_id and not await node.alive(owner)

    def is_live(self, stream_id: str) -> bool:
        """Whether the stream's request runs on this node now."""
        return stream_id in self.live

    # -- what the Tasks layer asks of a stream hosted here, by its id
    def hosted_principal(self, stream_id: str, scope: Scope) -> str | None:
        """The principal of the stream hosted here (as its request was admitted), else the scope's."""
        hosted = self.live.get(stream_id)
        return hosted.principal if hosted is not None else self.principal(scope)

    def stop(self, stream_id: str, reason: str) -> bool:
        """Cancel the app's work of a stream hosted here unless it finished (spawned: the caller
        does not wait; the record stays): whether it was running here."""
        hosted = self.live.get(stream_id)
        if hosted is None or hosted.done.is_set() or hosted.core.expired:
            return False
        spawn(cancel_app, hosted, reason)
        return True

    def cancel_soon(self, stream_id: str, reason: str) -> None:
        """`cancel_stream`, spawned (the caller does not wait for it)."""
        spawn(self.cancel_stream, stream_id, reason)

    def resumable(self, stream_id: str) -> bool:
        """Whether a stream hosted here has a first connection its client can resume from."""
        hosted = self.live.get(stream_id)
        return hosted is not None and hosted.core.resumable

    def becoming_task(self, stream_id: str) -> BecomingTask | None:
        """The request hosted here if it still waits for the deadline that makes it a task."""
        hosted = self.live.get(stream_id)
        if hosted is None or hosted.core.expired or hosted.done.is_set():
            return None
        delivery, answer_by = hosted.delivery, hosted.core.answer_by
        if delivery is None or delivery.on_deadline is None or answer_by is None:
            return None
        return BecomingTask(delivery, answer_by) if hosted.core.may_become_task() else None

    async def client_capabilities(self, session_id: str | None, message: dict[str, Any]) -> dict[str, Any]:
        """Per-request capabilities (2026-07-28 `_meta`) or those the session declared."""
        declared = p.request_capabilities(message)
        if declared is not None:
            return declared
        if session_id is not None:
            info = await self.services.sessions.info(session_id)
            if info is not None:
                return info.capabilities
        return {}

    async def version_for(self, scope: Scope, session_id: str | None) -> str:
        """The revision that governs a request: the session's, else the header's.

        The session's comes first because clients are known to send an older header
        than they negotiated (the conformance suite does), and priming an old client
        would break it.
        """
        known = self.known_version(scope, session_id)
        if known is not None:
            return known
        assert session_id is not None
        info = await self.services.sessions.info(session_id)  # (kept per node, `Sessions.info`)
        if info is not None:
            return info.protocol_version
        return p.valid_version(header(scope, b"mcp-protocol-version")) or p.DEFAULT_VERSION

    def known_version(self, scope: Scope, session_id: str | None) -> str | None:
        """`version_for` when it needs no store: without a session, or with one read here lately
        (most requests: no coroutine then); None: ask `version_for`."""
        if session_id is None:
            return p.valid_version(header(scope, b"mcp-protocol-version")) or p.DEFAULT_VERSION
        info = self.services.sessions.cached(session_id)
        return None if info is None else info.protocol_version

    # ------------------------------------------------------------------ requests (POST)
    def handle_request(
        self,
        ctx: RequestContext,
        receive: Receive,
        send: Send,
        options: ServeOptions,
        claimed_key: str | None = None,
    ) -> Awaitable[tuple[str, int] | None]:
        """Host a JSON-RPC request of the app, detached from `send`'s connection.

        Returns (awaitable) how the first client connection was let go (why, and the seq of the
        last event it got), None when it was not served from the stream (a JSON
        answer passed through). `claimed_key`: the store key of the request's
        `Idempotency-Key`, claimed for the request's stream by the front (freed if the app refuses).
        Not a coroutine: its frame, its `ctx` and the request's parsed JSON are not held while
        the request's call watches its client (`HostedStream.host`).
        """
        hosted = HostedStream.request(self.services, ctx, options, claimed_key)
        return hosted.host(Connection(send, receive))

    # ------------------------------------------------------------------ serving a client
    async def serve_stream(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        meta: StreamMeta,
        after_seq: int,
        delivery: Delivery | None = None,
    ) -> tuple[str, int] | None:
        """Answer a resuming client with the stream after `after_seq`: why it was let go, and where."""
        served = resume.from_cursor(meta, after_seq)
        if served is not Resume.SERVE:
            if served is Resume.GONE:
                await send_json(
                    send,
                    410,
                    p.error_message(
                        None, p.STREAM_ERROR, "cannot resume: events after Last-Event-ID were dropped"
                    ),
                )
                return None
            gap = GapError(meta.stream_id, after_seq, meta.first_seq)
            await send_bytes(
                send,
                200,
                self.services.gap_frame(meta.request_id, gap),
                self.services.sse_headers(meta.session_id, meta.path, meta.stream_id, after_seq),
            )
            return None
        conn = Connection(send, receive)
        conn.delivery = delivery
        link = not close_cancels(meta.protocol_version, meta.resumable_opt_in)
        conn.headers = self.services.sse_headers(
            meta.session_id, meta.path, meta.stream_id, after_seq, link=link
        )
        attached = await self.store.attach(meta.stream_id, time.time())
        if attached is None:
            await send_json(send, 404, p.error_message(None, p.INVALID_REQUEST, "unknown or expired stream"))
            return Reason.DELETED, after_seq
        priming = primed(attached.protocol_version, attached.resumable_opt_in)
        hosted = self.live.get(meta.stream_id)
        if hosted is not None and hosted.core.store_record is Record.OPEN and not hosted.done.is_set():
            return await hosted.serve(conn, gen=attached.attach_gen, after_seq=after_seq, priming=priming)
        policy = self.routes.by_index(attached.route)
        return await follow(self.services, conn, attached, after_seq, policy, priming=priming)

    # ------------------------------------------------------------------ standalone GET stream
    async def standalone_running(self, session_id: str) -> bool:
        stream_id = await self.store.get_key(keys.standalone(session_id))
        meta = await self.store.get_stream(stream_id) if stream_id else None
        return meta is not None and meta.state is StreamState.RUNNING

    async def standalone_ended(self, stream_id: str, after_seq: int, session_id: str) -> bool:
        """Whether `stream_id` is `session_id`'s GET stream, over (its app let it go: a drain,
        its node gone), with nothing recorded after `after_seq`: a client resuming it is owed
        the session's GET stream as it is now, not a stream that ends at once."""
        meta = await self.store.get_stream(stream_id)
        return (
            meta is not None
            and meta.kind is StreamKind.STANDALONE
            and meta.session_id == session_id
            and meta.state is not StreamState.RUNNING
            and after_seq >= meta.last_seq
        )

    async def handle_standalone(self, scope: Scope, receive: Receive, send: Send, session_id: str) -> None:
        """The session's GET stream: a running one is resumed, else the app opens a new one.

        Its record (`standalone:<session>`) is written only once the app accepted the
        GET: a request the app refuses (another principal's, a stale session) must not
        touch the stream of the session it names.
        """
        version = await self.version_for(scope, session_id)
        key = keys.standalone(session_id)
        stream_id = await self.store.get_key(key)
        meta = await self.store.get_stream(stream_id) if stream_id else None
        if meta is not None and meta.state is StreamState.RUNNING:
            if await self.port.admitted(scope, send, meta) is not None:
                await self.serve_stream(scope, receive, send, meta, meta.last_seq)
            return
        route, policy = self.routes.choose(scope["path"], None, None)
        hosted = HostedStream.standalone(
            self.services, scope, route=route, policy=policy, version=version, session_id=session_id
        )
        await hosted.host(Connection(send, receive))

    # ------------------------------------------------------------------ re-running a lost call
    async def rerun(self, meta: StreamMeta, policy: Policy | None = None) -> bool:
        """The node running `meta`'s request was lost (or its drain's budget stopped it, handing
        it over) before its answer: run the request again here if its route allows it
        (`Policy.rerun_on_loss`) and its stored request is still there (`rerun.py`). True when
        the call goes on - re-run here, or by another node that took this loss first (its events
        reach every follower through the store); False when it ends here (the caller
        records the loss as an error, or the task fails).

        At most one node re-runs one loss: the claim of its round (`add_key`), then the record
        taken over from the dead owner with a compare-and-set, which a node that read the record
        before another's re-run began fails. The re-run continues the record: the first run's
        events stay, its ids go on past every one the lost node can have handed out
        (`core.orphans.after_loss`), and its first event is the marker (`rerun.marker`).
        It runs as a relayed request does (its caller seated, `CallerGuard` applying), with no
        client connection of its own: its clients follow it through the store. `policy`: the
        one to run it under, if not its route's (the Tasks layer's, whose work outlives clients)."""
        route_policy = self.routes.by_index(meta.route)
        node = self.node
        if self.services.draining is not None:
            # This node stops: the others run it (its clients resume there); a follower here goes on.
            return route_policy.rerun_on_loss and meta.kind is StreamKind.REQUEST
        if (
            not route_policy.rerun_on_loss
            or node is None
            or meta.kind is not StreamKind.REQUEST
            or meta.state is not StreamState.RUNNING
            or meta.final_seq is not None
            or meta.owner == self.node_id
        ):
            return False
        policy = policy or route_policy
        stream_id, lost = meta.stream_id, meta.owner
        stored = await rerun.load(self.store, self.signer, stream_id)
        if isinstance(stored, rerun.Refused):
            logger.warning(
                "stream %s: its node %s was lost and its stored request is refused (%s): it is not run again",
                stream_id,
                lost,
                stored.why,
            )
            await rerun.forget(self.store, stream_id)  # (the call ends: nothing to keep)
            return False
        if stored is None:
            current = await self.store.get_stream(stream_id)
            if current is not None and (current.owner != lost or current.final_seq is not None):
                return True  # re-run and answered meanwhile (its request forgotten): read on
            logger.warning(
                "stream %s: its node %s was lost and its request is not kept (too large, or expired): "
                "it is not run again",
                stream_id,
                lost,
            )
            return False
        if stored.stream != rerun.bound(
            meta.principal, meta.session_id, meta.request_id, meta.method, meta.route
        ):
            logger.warning(
                "stream %s: its node %s was lost and its record does not name the caller, session or "
                "request its sealed request was kept for (the record was rewritten): it is not run again",
                stream_id,
                lost,
            )
            await rerun.forget(self.store, stream_id)
            return False
        scope = rerun.scope_of(stored)
        if scope is None:
            logger.warning("stream %s: its stored caller is malformed; it is not run again", stream_id)
            await rerun.forget(self.store, stream_id)
            return False
        ttl = running_ttl(policy)
        if not await rerun.claim(self.store, self.node_id, stream_id, stored.round, ttl):
            return await self._rerun_elsewhere(stream_id, lost)
        applied, taken = await self.store.update_stream_if(
            stream_id,
            {"owner": lost, "state": StreamState.RUNNING},
            ttl_s=ttl,
            owner=self.node_id,
            last_contact=time.time(),
        )
        if not applied or taken is None or taken.final_seq is not None:
            # Another node took it over first (this node read the record, or the stored request's
            # round, before): its claim of the next loss is not this node's to hold.
            if not applied:
                await rerun.release(self.store, self.node_id, stream_id, stored.round)
            return taken is not None and (taken.owner != lost or taken.final_seq is not None)
        round_ = stored.round + 1
        await rerun.save(self.store, self.signer, stream_id, dataclasses.replace(stored, round=round_), ttl)
        if meta.session_id is not None:
            await self.adoptions.for_rerun(scope, meta.session_id)  # (its app must know the session)
        hosted = HostedStream.rerun(self.services, taken, scope, stored.body, policy, round_=round_)
        logger.warning(
            "stream %s: its node %s was lost before the answer; its request runs again here (re-run %d)",
            stream_id,
            lost,
            round_,
        )
        spawn(self._host_rerun, hosted)
        return True

    async def end_orphan(self, meta: StreamMeta, found_by: str) -> bool:
        """End `meta`'s stream, whose node is gone and which is not run again, once fleet-wide
        (`orphans.end_orphan`): True when it is over or goes on, False when its record is gone."""
        policy = self.routes.by_index(meta.route)
        return await end_orphan(self.store, self.node_id, meta, policy, found_by)

    async def _host_rerun(self, hosted: HostedStream) -> None:
        """Host a re-run: its first connection is a client already gone (nobody sent it; its
        clients follow the record), so the record is opened ahead and never attached to it."""
        await hosted.host(Connection(_discard, _gone))

    async def _rerun_elsewhere(self, stream_id: str, lost: str) -> bool:
        """Another node claimed this loss: whether it took the record over (then the call goes on
        there). Waits a moment for it: the claim comes just before the record changes hands."""
        with anyio.move_on_after(RERUN_TAKEOVER_S):
            while True:
                meta = await self.store.get_stream(stream_id)
                if meta is None or meta.final_seq is not None or meta.owner != lost:
                    return meta is not None  # taken over (or answered already): followers read on
                await self.store.wait(stream_id, meta.last_seq, within_s=0.2, version=meta.version)
        return False

    # ------------------------------------------------------------------ shutdown
    async def drain(self, drain_s: float) -> Drained:
        """This node stops: close every attached connection a client may resume on another node,
        let the app's work run on (recorded) for up to `drain_s`, then end what is left cleanly.

        At once, where another node can serve this node's clients (a shared store with live
        peers: `_served_elsewhere`): each connection of a stream hosted here, and each served
        from the store, whose client may be closed at will (2025-era, or 2026-07-28 with the
        resumable-streams opt-in) is closed on an event boundary after `retry:` (`Reason.DRAIN`);
        its client resumes on another node, which serves it from the store while the app here
        goes on recording. A 2026-07-28 request whose close cancels it is handed over through MRTR
        if it is a `tools/call`, `prompts/get` or `resources/read` whose answer is not recorded
        yet: on an event boundary its connection is answered `input_required` with a sealed
        `requestState` (`mrtr.py`), its close cancels nothing from then on, and the retry its
        client sends at once follows the stream on another node; any other such request keeps its
        connection and is left to finish. Requests that arrive meanwhile are served as usual, but a connection
        attached since is closed the same way as soon as its priming event is out (with the app's
        first event if that comes within the head's hold: a quick call completes). Where no other
        node can serve them (the memory store, or no live peer), connections stay attached: the
        work that finishes within `drain_s` is answered on them. Either way a session's GET stream
        is told to end (it has no end of its own to wait for), and what is still attached when
        the drain ends is closed then: the server's graceful timeout must not be what ends a
        connection.
        At `drain_s`, what still runs is cancelled: its stream ends with an error event that says
        the server shut down (`SHUT_DOWN`; a task is `failed` with it), never a record left running
        - except a call on a route with `Policy.rerun_on_loss` (and a shared store), whose record
        is left running, owned by no live node, for another node to run it again (`rerun`).

        Called on the server's shutdown signal (`http/middleware.py`), by the lifespan's shutdown,
        or by a host that handles its own signals; a second call waits for the first's end."""
        if self._drain_done is not None:
            await self._drain_done.wait()
            assert self.drained is not None
            return self.drained
        self._drain_done = anyio.Event()
        try:
            self.drained = await self._drain(drain_s)
        finally:
            self._drain_done.set()
        return self.drained

    async def _drain(self, drain_s: float) -> Drained:
        services = self.services
        apps = services.scheduler.apps
        started = time.monotonic()
        services.draining = Drain.CLOSING
        services.drain_closes = await self._served_elsewhere()  # (its sessions: adoptable from now on)
        if services.drain_closes:
            self._close_attached()
        for hosted in list(self.live.values()):
            if hosted.kind is StreamKind.STANDALONE:
                hosted.disconnect_app()  # a session's GET stream has no end to wait for
        running = apps.running
        logger.log(
            logging.INFO if running else logging.DEBUG,
            "drain: waiting up to %ss for %d running request(s); attached connections %s",
            drain_s,
            running,
            "closed with retry:"
            if services.drain_closes
            else "kept (no other node can serve their clients: the answers go on them)",
        )
        with anyio.move_on_after(max(drain_s - (time.monotonic() - started), 0.0)):
            await apps.idle()
        left = [hosted for hosted in self.live.values() if not hosted.done.is_set()] if apps.running else []
        if left:
            services.draining = Drain.STOPPING
            logger.warning("drain: ending %d request(s) still running after %ss", len(left), drain_s)
            for hosted in left:
                if (
                    self.node is not None
                    and hosted.kind is StreamKind.REQUEST
                    and hosted.policy.rerun_on_loss
                ):
                    hosted.hand_over()  # run again by another node (`rerun`), not ended with an error
                else:
                    hosted.stop_app()  # (not expired: its client may still come back for the error)
        if apps.running:
            with anyio.move_on_after(DRAIN_END_S):
                await apps.idle()
        self._close_attached()  # (whatever attached while it ran, and was not let go yet)
        drained = Drained(
            seconds=time.monotonic() - started,
            running=running,
            finished=max(running - len(left), 0),
            stopped=len(left),
        )
        services.telemetry.drained(drained.seconds, "stopped" if left else "finished")
        logger.log(
            logging.INFO if running else logging.DEBUG,
            "drain over in %.2fs: %d request(s) finished, %d ended at the budget",
            drained.seconds,
            drained.finished,
            drained.stopped,
        )
        return drained

    async def _served_elsewhere(self) -> bool:
        """Whether another node can serve this node's clients: a shared store with live peers
        (`Node.leave`, which takes this node off their roll call). Not where the store cannot say
        within `node_timeout_s`: closing a connection nobody can serve loses its answer."""
        node = self.node
        if node is None:
            return False
        with anyio.move_on_after(node.timeout_s):
            try:
                return await node.leave()
            except Exception as exc:
                logger.warning("drain: the store cannot say which nodes live (%s)", describe_error(exc))
        return False

    def _close_attached(self) -> None:
        """Close every connection a client may resume elsewhere, on an event boundary, after
        `retry:` (`Writer.drain`; a follower's wait is interrupted)."""
        for hosted in list(self.live.values()):
            hosted.drain()
        for close in list(self.services.followers):
            close()
        if self.node is not None:
            self.node.let_streams_go()

    # ------------------------------------------------------------------ sessions and shared helpers
    async def end_session(self, session_id: str) -> None:
        stream_ids = await self.store.delete_session(session_id)
        self.services.sessions.forget(session_id)  # (after: a read meanwhile would keep it again)
        self.adoptions.forget(session_id)
        await self.store.delete_key(keys.standalone(session_id))
        await self.store.delete_key(keys.session_record(session_id))
        for stream_id in stream_ids:
            hosted = self.live.get(stream_id)
            if hosted is not None:
                hosted.core.expired = True
                hosted.disconnect_app()
            await self.store.delete_stream(stream_id)

    async def cancel_stream(self, stream_id: str, reason: str) -> None:
        hosted = self.live.get(stream_id)
        if hosted is not None and not hosted.done.is_set():
            await hosted.cancel(reason)
        await self.store.delete_stream(stream_id)

    def store_outage(self, exc: BaseException) -> bool:
        """Whether `exc` says the store is down; if so, the middleware is told (once per call)."""
        return self.services.store_outage(exc)
