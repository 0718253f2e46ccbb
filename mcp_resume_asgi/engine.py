"""The stream engine: an app's SSE response, detached from the connection that asked for it.

An MCP server writes its answer to a request as an SSE stream on the POST that
carried it, so when that connection drops, the answer is gone. The engine runs
the app's request with a `receive` that never reports the disconnect and a `send`
that lands here: each event gets an id of the engine's own, is recorded in the
store, and goes to whichever client connection is attached *now* (zero or one).
A client that comes back (GET with `Last-Event-ID`, or GET on the `Link` URL)
becomes the attached connection and is sent exactly what it has not seen.

The app's request runs inside the ASGI call that brought it (so it keeps that
call's context); that call simply outlives its HTTP response. It ends when the
app is done, or when nobody has been attached for the policy's `max_wait_s`:
then the app's work is cancelled the way its protocol revision says and the
stream is freed.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_resume_asgi import protocol as p
from mcp_resume_asgi._http import UNAVAILABLE_HEADER, Headers, header, send_bytes, send_json
from mcp_resume_asgi.admission import NOT_FOUND, Admission, Refusal, post_to_app
from mcp_resume_asgi.cluster import Node, owner_key
from mcp_resume_asgi.policy import Policy, RouteTable
from mcp_resume_asgi.sse import (
    KEEPALIVE,
    SSEError,
    SSEEvent,
    SSEParser,
    encode_payload,
    priming_frame,
    retry_frame,
    single_event_frame,
)
from mcp_resume_asgi.store.base import GapError, SessionInfo, Store, StreamKind, StreamMeta, StreamState
from mcp_resume_asgi.tokens import TokenSigner, new_stream_id

logger = logging.getLogger(__name__)

READ_BATCH = 512
#: Write-behind (stores with `write_behind`): how much the app may send ahead of the
#: store before its `send` waits for the write in flight.
WRITE_BEHIND_FRAMES = 512
#: How long a finished answer waits for the server to report it (see `_stop_watching`).
WATCH_GRACE_S = 1.0
WRITE_BEHIND_BYTES = 1024 * 1024
CLIENT_CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"
#: Stream URLs are `<mcp path>/streams/<token>`.
STREAM_SEGMENT = "/streams/"
#: Grace given to an app to wind a cancelled request down before the next, harder step.
CANCEL_GRACE_S = 5.0
#: A write to the first connection that takes longer than this (a client that stopped
#: reading) is handed to a task of its own, so the app's `send` never waits on it.
DIRECT_STALL_S = 0.25
#: Until the app has answered, the first connection's watcher looks at the answer this
#: often (doubling up to 0.25 s): its timers (keep-alive, at-will closes, the held head)
#: start with the answer.
DECISION_POLL_S = 0.05
#: The first connection's headers and priming event wait this long for the app's first
#: event, so that a quick answer goes out in as few writes as the bare app makes.
HOLD_HEAD_S = 0.005
#: A request whose stream opens before the app answers (Idempotency-Key, SEP-975...)
#: holds its client's answer this long for the app's status, so that the app's own
#: refusal (404, 400) reaches the client as that status.
STATUS_HOLD_S = 1.0
#: Why a connection was closed on purpose; the client is told when to come back.
AT_WILL_REASONS = frozenset({"max_connection", "idle", "input", "replaced"})
_SSE_HEADERS: Headers = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"x-accel-buffering", b"no"),
]
_SKIP_APP_HEADERS = {b"content-length", b"link", b"transfer-encoding"}


class Mode(enum.Enum):
    PASSTHROUGH = 1
    """The app answered with something other than an SSE stream; it goes to the client untouched."""
    STREAM = 2
    """The app answered with SSE; the engine records and relays it."""
    UPGRADED = 3
    """The app was slow to answer, so the engine opened an SSE stream itself (`upgrade_json_after_s`)."""


@dataclass(slots=True)
class Delivery:
    """How one client connection is served, where a feature layer needs more than the default.

    `deadline_s`: end the connection this long after it attached, writing the frame
    `on_deadline(cursor)` returns (the resume-token layer's interim result).
    `transform(seq, payload)`: rewrite an event on its way out (not in the store).
    `at_will`: allow the policy's at-will closes (they would cut a deadline-driven answer short).
    """

    deadline_s: float | None = None
    on_deadline: Callable[[int], Awaitable[bytes]] | None = None
    transform: Callable[[int, bytes], bytes] | None = None
    at_will: bool = True


class Flag:
    """A one-way flag whose `anyio.Event` is made only if somebody waits for it.

    A request sets or checks several of these and waits on few, if any: creating an
    event costs more than most of what the engine does per request.
    """

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: anyio.Event | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        if not self._set:
            self._set = True
            if self._event is not None:
                self._event.set()

    async def wait(self) -> None:
        if self._set:
            return
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()


class Client:
    """One client HTTP connection: how to write to it and whether it is still there."""

    __slots__ = (
        "_receive",
        "_send",
        "cancel_scope",
        "cursor",
        "finished",
        "gone",
        "gone_at",
        "on_gone",
        "started",
        "watch_scope",
    )

    def __init__(self, send: Send, receive: Receive) -> None:
        self._send = send
        self._receive = receive
        self.gone = Flag()
        self.gone_at = 0.0
        self.started = False
        self.finished = False
        self.cursor = 0
        """The seq of the last event written to this connection."""
        self.on_gone: Callable[[], None] | None = None
        self.cancel_scope: anyio.CancelScope | None = None
        """Cancelled when the client leaves: what is serving it stops at once."""
        self.watch_scope: anyio.CancelScope | None = None
        """Cancelled when a failed write says the client left: its watcher stops waiting."""

    async def watch(self) -> None:
        """Wait for `http.disconnect` (run as a task once the request body is read)."""
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                break
        self.mark_gone()

    async def receive(self) -> Message:
        return await self._receive()

    def mark_gone(self) -> None:
        if not self.gone.is_set():
            self.gone_at = time.time()
            self.gone.set()
            if self.cancel_scope is not None:
                self.cancel_scope.cancel()
            if self.watch_scope is not None:
                self.watch_scope.cancel()
            if self.on_gone is not None:
                self.on_gone()

    async def send(self, message: Message) -> bool:
        if self.gone.is_set() or self.finished:
            return False
        try:
            await self._send(message)
        except Exception:  # the server reports a dead socket in its own way (OSError, ClientDisconnected...)
            logger.debug("client connection failed on send", exc_info=True)
            self.mark_gone()
            return False
        if message["type"] == "http.response.start":
            self.started = True
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            self.finished = True
        return True

    async def send_message(self, message: Message) -> None:
        """`send` with the ASGI signature, for the response helpers."""
        await self.send(message)

    async def write(self, data: bytes) -> bool:
        return await self.send({"type": "http.response.body", "body": data, "more_body": True})

    async def finish(self, data: bytes = b"") -> None:
        if self.started and not self.finished:
            await self.send({"type": "http.response.body", "body": data, "more_body": False})


class Live:
    """The owner's side of one stream: the app call it hosts and what the app has sent."""

    __slots__ = (
        "_wake",
        "_written",
        "answer_started",
        "app_disconnect",
        "app_scope",
        "app_started",
        "backlog",
        "backlog_bytes",
        "body",
        "client_headers",
        "decided",
        "delivery",
        "direct",
        "done",
        "expired",
        "final_seq",
        "first_messages",
        "first_outcome",
        "group",
        "head",
        "idempotency_key",
        "json_chunks",
        "json_size",
        "json_status",
        "kind",
        "last_event",
        "last_input_seq",
        "last_write",
        "meta_created",
        "method",
        "mode",
        "parser",
        "passthrough_body",
        "path",
        "pending_release",
        "policy",
        "prefix",
        "principal",
        "request_id",
        "route",
        "scope",
        "sending",
        "seq",
        "session_id",
        "stream_id",
        "upgraded_sse",
        "version",
        "write_since",
        "writers",
        "writing",
    )

    def __init__(
        self,
        *,
        stream_id: str | None = None,
        kind: StreamKind,
        scope: Scope,
        body: bytes,
        route: int,
        policy: Policy,
        version: str,
        session_id: str | None,
        principal: str | None,
        request_id: Any = None,
        method: str | None = None,
        path: str,
    ) -> None:
        self.kind = kind
        self.scope = scope
        self.body = body
        self.route = route
        self.policy = policy
        self.version = version
        self.session_id = session_id
        self.principal = principal
        self.request_id = request_id
        self.method = method
        self.path = path
        self.stream_id = stream_id or new_stream_id()
        self._wake: anyio.Event | None = None
        self.first_messages: list[dict[str, Any]] = []
        self.delivery: Delivery | None = None
        self.first_outcome: tuple[str, int] | None = None
        self.mode: Mode | None = None
        self.decided = Flag()
        self.done = Flag()
        self.app_disconnect = Flag()
        self.app_scope = anyio.CancelScope()
        self.parser = SSEParser(policy.max_event_bytes)
        self.seq = 0
        self.prefix = b""
        self.final_seq: int | None = None
        self.meta_created = False
        self.client_headers: Headers = []
        self.app_started = False
        self.json_status = 200
        self.upgraded_sse = False
        self.json_chunks: list[bytes] = []
        self.json_size = 0
        self.passthrough_body: list[bytes] = []
        self.expired = False
        # Write-behind: frames sent by the app and not yet handed to the store, in order.
        self.writers: anyio.abc.TaskGroup | None = None
        self.backlog: list[tuple[bytes, bytes]] = []
        self.backlog_bytes = 0
        self.writing = False
        self._written: anyio.Event | None = None
        # The direct path: the first connection, written from the app's own `send`.
        self.direct: Client | None = None
        self.group: anyio.abc.TaskGroup | None = None
        self.sending = False
        self.pending_release: str | None = None
        self.last_input_seq = 0
        self.answer_started = 0.0
        self.write_since = 0.0
        """When the write to the first connection in flight began (0: none)."""
        self.head: bytes | None = None
        self.idempotency_key: str | None = None
        """The store key of the request's Idempotency-Key, when it came with one."""
        """The first connection's priming event, while its headers wait for the first event."""
        self.last_event = 0.0
        self.last_write = 0.0

    def take_backlog(self) -> list[tuple[bytes, bytes]]:
        batch, self.backlog, self.backlog_bytes = self.backlog, [], 0
        return batch

    def signal_written(self) -> None:
        if self._written is not None:
            self._written.set()
            self._written = None

    async def wait_written(self) -> None:
        if self._written is None:
            self._written = anyio.Event()
        await self._written.wait()

    def poke(self) -> None:
        """Wake the hosting task: the app decided, finished, or the client left."""
        if self._wake is not None:
            self._wake.set()

    async def wait_wake(self, within_s: float) -> None:
        self._wake = anyio.Event()
        with anyio.move_on_after(within_s):
            await self._wake.wait()
        self._wake = None

    @property
    def can_close_at_will(self) -> bool:
        return p.at_least(self.version, p.RESUMABLE_VERSION)


class Engine:
    """Runs streams for one middleware stack; shared by every feature layer in it."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        routes: RouteTable,
        store: Store,
        signer: TokenSigner,
        principal: Callable[[Scope], str | None],
        session_ttl_s: float,
        node_id: str,
        node: Node | None = None,
        direct: bool = True,
    ) -> None:
        self.app = app
        self.routes = routes
        self.store = store
        self.signer = signer
        self.principal = principal
        self.session_ttl_s = session_ttl_s
        self.node_id = node_id
        self.node = node
        self.direct = direct
        """Serve a request's first connection from the app's own task (`_host_direct`)."""
        self.known_features: Any = ()
        """The feature layers in front of this engine, as last seen (relayed requests get them too)."""
        self.on_store_outage: Callable[[BaseException], None] | None = None
        """Told when a store call made inside the app's `send` finds the store down."""
        self.admission = Admission(app, principal=principal, store=store, node=node)
        self.live: dict[str, Live] = {}

    # ------------------------------------------------------------------ helpers
    def link_header(self, mcp_path: str, stream_id: str, after_seq: int) -> tuple[bytes, bytes]:
        """`Link: </mcp/streams/<token>>; rel="stream"` for a response that starts after `after_seq`.

        An absolute path, not a URL: it is same-origin by construction, whatever
        Host header a client (or an attacker) sent.
        """
        url = f"{mcp_path.rstrip('/')}{STREAM_SEGMENT}{self.signer.link_token(stream_id, after_seq)}"
        return b"link", f'<{url}>; rel="stream"'.encode()

    async def admit(self, scope: Scope, meta: StreamMeta) -> Refusal | None:
        """None when the app accepts this request for the stream's session and principal
        (see `admission.py`); else what to answer instead of the stream."""
        return await self.admission.check(scope, meta)

    async def admitted(self, scope: Scope, send: Send, meta: StreamMeta | None) -> StreamMeta | None:
        """`meta` when it exists and the app admits this request to it; else None, answered."""
        refusal = NOT_FOUND if meta is None else await self.admit(scope, meta)
        if refusal is not None:
            await refusal.send(send)
            return None
        return meta

    async def client_capabilities(self, session_id: str | None, message: dict[str, Any]) -> dict[str, Any]:
        """Per-request capabilities (2026-07-28 `_meta`) or those the session declared."""
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        if isinstance(meta, dict):
            declared = meta.get(CLIENT_CAPABILITIES_META)
            if isinstance(declared, dict):
                return declared
        if session_id is not None:
            info = await self.store.get_session(session_id)
            if info is not None:
                return info.capabilities
        return {}

    async def version_for(self, scope: Scope, session_id: str | None) -> str:
        """The revision that governs a request: the session's, else the header's.

        The session's comes first because clients are known to send an older header
        than they negotiated (the conformance suite does), and priming an old client
        would break it.
        """
        if session_id is not None:
            info = await self.store.get_session(session_id)
            if info is not None:
                return info.protocol_version
        return p.valid_version(header(scope, b"mcp-protocol-version")) or p.DEFAULT_VERSION

    def _sse_headers(self, scope: Scope, meta: StreamMeta, after_seq: int) -> Headers:
        headers = list(_SSE_HEADERS)
        if meta.session_id is not None:
            headers.append((b"mcp-session-id", meta.session_id.encode()))
        headers.append(self.link_header(meta.path, meta.stream_id, after_seq))
        return headers

    # ------------------------------------------------------------------ requests (POST)
    async def handle_request(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        *,
        body: bytes,
        message: dict[str, Any],
        route: int,
        policy: Policy,
        version: str,
        session_id: str | None,
        accepts_sse: bool,
        idempotency_key: str | None = None,
        stream_id: str | None = None,
        first_messages: list[dict[str, Any]] | None = None,
        delivery: Delivery | None = None,
    ) -> tuple[str, int] | None:
        """Run a JSON-RPC request of the app detached from `send`'s connection.

        Returns how the first client connection ended (see `serve`), None when it was
        not served from the stream (a JSON answer passed through, or a retried POST).
        """
        method = message["method"]
        live = Live(
            stream_id=stream_id,
            kind=StreamKind.REQUEST,
            scope=scope,
            body=body,
            route=route,
            policy=policy,
            version=version,
            session_id=session_id,
            principal=self.principal(scope),
            request_id=message["id"],
            method=method,
            path=scope["path"],
        )
        upgrade_after = policy.upgrade_json_after_s if accepts_sse and method != "initialize" else None
        if idempotency_key is not None and accepts_sse and method != "initialize":
            scope_name = session_id or live.principal or "-"
            key = f"idem:{scope_name}:{idempotency_key}"
            digest = hashlib.sha256(body).hexdigest()
            existing = await self.store.add_key(key, f"{live.stream_id} {digest}", self._running_ttl(policy))
            if existing is not None:
                await self._retry_of(scope, receive, send, existing, digest)
                return None
            live.idempotency_key = key
            # The stream must exist before the client can lose its answer: open it at once.
            upgrade_after = 0.0
        if first_messages:
            upgrade_after = 0.0
            live.first_messages = first_messages
        if delivery is not None:
            upgrade_after = 0.0
            live.delivery = delivery
        if upgrade_after is None and self.direct:
            return await self._host_direct(live, Client(send, receive))
        return await self._host(live, Client(send, receive), upgrade_after=upgrade_after)

    async def _retry_of(self, scope: Scope, receive: Receive, send: Send, existing: str, digest: str) -> None:
        """A POST repeating an Idempotency-Key attaches to the request already running."""
        stream_id, _, first_digest = existing.partition(" ")
        meta = await self.store.get_stream(stream_id)
        with anyio.move_on_after(2.0):  # the first attempt may still be opening its stream
            while meta is None and stream_id in self.live:
                await anyio.sleep(0.02)
                meta = await self.store.get_stream(stream_id)
        if meta is None:
            await send_json(
                send,
                409,
                p.error_message(
                    None, p.INVALID_REQUEST, "the request with this Idempotency-Key is no longer available"
                ),
            )
            return
        refusal = await self.admit(scope, meta)
        if refusal is not None:
            await refusal.send(send)
            return
        if first_digest != digest:
            await send_json(
                send,
                422,
                p.error_message(
                    None, p.INVALID_REQUEST, "this Idempotency-Key was used for a different request"
                ),
            )
            return
        after = 0
        last_event_id = header(scope, b"last-event-id")
        if last_event_id is not None:
            parsed = self.signer.parse_event_id(last_event_id.strip())
            if parsed is None or parsed[0] != stream_id or parsed[1] > meta.last_seq:
                await send_json(
                    send,
                    400,
                    p.error_message(None, p.INVALID_REQUEST, "Last-Event-ID does not belong to this request"),
                )
                return
            after = parsed[1]
        logger.debug("stream %s: a retried POST attaches after %s", stream_id, after)
        await self.serve_stream(scope, receive, send, meta, after)

    async def _host(
        self, live: Live, client: Client, *, upgrade_after: float | None
    ) -> tuple[str, int] | None:
        self.live[live.stream_id] = live
        outcome = None
        hold = upgrade_after
        try:
            if upgrade_after == 0:
                # Open the stream's record before the app runs (a retry or a resume can find
                # it at once), but not the client's answer: that waits for the app's status.
                await self._upgrade(live, decide=False)
                hold = STATUS_HOLD_S
                if live.first_messages:
                    await self._record(
                        live, [SSEEvent(data=p.dumps(m), event=b"message") for m in live.first_messages]
                    )
            client.on_gone = live.poke
            async with anyio.create_task_group() as tg:
                if self.store.write_behind:
                    live.writers = tg
                tg.start_soon(client.watch)
                tg.start_soon(self._run_app, live, client)
                if hold is not None and not live.decided.is_set():
                    with anyio.move_on_after(hold):
                        await live.decided.wait()
                    if live.mode is Mode.UPGRADED:
                        live.decided.set()  # opened already: the app is slow to answer; serve it
                    elif not live.decided.is_set():
                        await self._upgrade(live)
                await self._await_decision(live, client)
                if (
                    live.mode in (Mode.STREAM, Mode.UPGRADED)
                    and live.meta_created
                    and not client.gone.is_set()
                    and not live.expired
                ):
                    outcome = await self.serve(
                        live.stream_id,
                        client,
                        scope=live.scope,
                        after_seq=0,
                        headers=live.client_headers,
                        priming=live.can_close_at_will,
                        policy=live.policy,
                        version=live.version,
                        delivery=live.delivery,
                    )
                    live.first_outcome = outcome
                await self._await_done(live, client)
                await _stop_watching(client, tg)
            return outcome
        finally:
            self.live.pop(live.stream_id, None)

    async def _host_direct(self, live: Live, client: Client) -> tuple[str, int] | None:
        """Host a request on its own task, writing its events to the first connection directly.

        The common case - the client that asked stays until the answer is complete -
        costs one extra task (`_keep`: the connection's watcher and timers) and no
        round trip through the store between the app and the client. The connection
        is let go (`_release`) when the answer is complete, at will, when a resume
        replaces it or when it leaves; a stalled one is handed to a serving task of
        its own (`_serve_demoted`). After that the request is hosted as in `_host`.
        """
        self.live[live.stream_id] = live
        live.direct = client
        client.on_gone = live.poke
        try:
            async with anyio.create_task_group() as tg:
                live.group = tg
                if self.store.write_behind:
                    live.writers = tg
                tg.start_soon(self._keep, live, client)
                await self._run_app(live, client)
                if live.direct is client:
                    await self._release(live, "ended")
            return live.first_outcome
        finally:
            live.group = None
            self.live.pop(live.stream_id, None)

    async def _keep(self, live: Live, client: Client) -> None:
        """Watch the first connection (its timers too), then host the request as `_host` does."""
        poll = DECISION_POLL_S
        finished_at: float | None = None
        while not client.gone.is_set():
            now = time.monotonic()
            if live.direct is client and live.answer_started:
                timeout = await self._direct_timers(live, client, now)
            elif client.finished or live.done.is_set():
                # The answer is over: the server reports that to `receive()` (cheap), or we stop soon.
                finished_at = finished_at or now
                timeout = finished_at + WATCH_GRACE_S - now
                if timeout <= 0:
                    break
            elif live.mode is None:
                timeout = poll
                poll = min(poll * 2, 0.25)
            else:
                timeout = math.inf
            with anyio.CancelScope(deadline=anyio.current_time() + timeout) as scope:
                client.watch_scope = scope
                message = await client.receive()
            client.watch_scope = None
            if not scope.cancelled_caught and message["type"] == "http.disconnect":
                client.mark_gone()
        if live.direct is client:
            await self._release(live, "gone")
        await self._await_decision(live, client)
        await self._await_done(live, client)

    async def _direct_timers(self, live: Live, client: Client, now: float) -> float:
        """Stalls, the held head, keep-alives and at-will closes of the first connection.

        Returns when to look again. While the answer runs this is at least every
        `DIRECT_STALL_S`: a write of the app's side that has not finished by then is
        cancelled, and the connection is served by a task of its own (`_demote`).
        """
        policy = live.policy
        timeout = DIRECT_STALL_S
        if live.write_since:
            stalled = now - live.write_since
            if stalled >= DIRECT_STALL_S:
                if client.cancel_scope is not None:
                    client.cancel_scope.cancel()
                return DIRECT_STALL_S
            timeout = DIRECT_STALL_S - stalled
        if live.head is not None:
            left = live.answer_started + HOLD_HEAD_S - now
            if left > 0:
                return min(left, timeout)
            if not live.sending:
                await self._keeper_write(live, client, None)
        if policy.keepalive_s is not None:
            left = live.last_write + policy.keepalive_s - now
            if left <= 0 and not live.sending:
                await self._keeper_write(live, client, KEEPALIVE)
                left = policy.keepalive_s
            timeout = min(timeout, max(left, 0.01))
        if live.can_close_at_will:
            reason = None
            if policy.max_connection_s is not None:
                left = live.answer_started + policy.max_connection_s - now
                if left <= 0:
                    reason = "max_connection"
                timeout = min(timeout, left)
            if policy.idle_disconnect_s is not None:
                left = live.last_event + policy.idle_disconnect_s - now
                if left <= 0:
                    reason = reason or "idle"
                timeout = min(timeout, left)
            if reason is not None:
                await self._release(live, reason)
                return WATCH_GRACE_S
        return timeout

    async def _keeper_write(self, live: Live, client: Client, data: bytes | None) -> None:
        """The watcher's own write (the held head, or a keep-alive), then whatever the app
        sent meanwhile (its side skips writing while another write is in flight)."""
        live.sending = True
        try:
            with anyio.move_on_after(DIRECT_STALL_S):  # nobody watches the watcher's own writes
                if data is None:
                    await self._send_head(live, client)
                else:
                    await client.write(data)
            live.last_write = time.monotonic()
        finally:
            live.sending = False
        if live.direct is client and client.cursor < live.seq:
            await self._deliver(live, [])
        elif live.pending_release is not None and live.direct is client:
            await self._release(live, live.pending_release)

    async def _write_direct(
        self, live: Live, client: Client, data: bytes, *, end: bool = False
    ) -> bool | None:
        """Write to the first connection: True, False when it is gone, None when it stalled
        (the watcher cancels a write that takes longer than `DIRECT_STALL_S`).

        A server's `send` usually completes without waiting (its transport has room), and
        then it needs no cancel scope: the send is started by hand and only one that
        waits is finished inside a scope the watcher can cancel.
        """
        done, outcome = _start(
            client.send({"type": "http.response.body", "body": data, "more_body": not end})
        )
        if done:
            return bool(outcome)
        written = False
        with anyio.CancelScope() as scope:
            client.cancel_scope = scope
            live.write_since = time.monotonic()
            try:
                written = await outcome
            finally:
                live.write_since = 0.0
                client.cancel_scope = None
        if scope.cancelled_caught:
            return False if client.gone.is_set() else None
        return written

    async def _deliver(self, live: Live, batch: list[tuple[int, bytes]]) -> None:
        """Write what was just recorded to the first connection (and whatever it still lacks)."""
        client = live.direct
        if client is None or live.sending or not live.answer_started:
            return
        live.sending = True
        try:
            id_head = b"id: " + live.prefix
            events: list[tuple[int, bytes]] | None = batch
            while live.direct is client and live.pending_release is None:
                if not events or events[0][0] != client.cursor + 1:
                    try:
                        events = await self.store.read(live.stream_id, client.cursor, READ_BATCH)
                    except GapError as gap:
                        meta = await self.store.get_stream(live.stream_id)
                        if meta is not None:
                            await self._write_direct(live, client, self._gap_frame(meta, gap))
                        live.pending_release = "gap"
                        break
                    if not events:
                        break
                if len(events) == 1:
                    data = id_head + str(events[0][0]).encode() + b"\n" + events[0][1]
                else:
                    data = b"".join(
                        [id_head + str(seq).encode() + b"\n" + payload for seq, payload in events]
                    )
                complete = live.final_seq is not None and events[-1][0] >= live.final_seq
                if live.head is not None:
                    head, live.head = live.head, None
                    data = head + data
                    if not await client.send(self._direct_start(live)):
                        return
                written = await self._write_direct(live, client, data, end=complete)
                if written is None:
                    self._demote(live, client)
                    return
                if not written:
                    return
                client.cursor = events[-1][0]
                live.last_event = live.last_write = time.monotonic()
                if live.final_seq is not None and client.cursor >= live.final_seq:
                    live.pending_release = "complete"
                elif (
                    live.last_input_seq
                    and client.cursor >= live.last_input_seq
                    and live.policy.disconnect_on_input_request
                    and live.can_close_at_will
                ):
                    live.pending_release = "input"
                elif client.cursor >= live.seq:
                    break
                events = None
        finally:
            live.sending = False
        if live.pending_release is not None and live.direct is client:
            await self._release(live, live.pending_release)

    def _demote(self, live: Live, client: Client) -> None:
        """A stalled first connection is served by a task of its own from now on."""
        logger.debug("stream %s: the first connection stalled; serving it apart", live.stream_id)
        live.direct = None
        live.pending_release = None
        assert live.group is not None
        live.group.start_soon(self._serve_demoted, live, client)

    async def _serve_demoted(self, live: Live, client: Client) -> None:
        meta = None
        try:
            meta = await self.store.get_stream(live.stream_id)
        finally:
            if meta is None:  # gone from the store, or the store failed: end the answer all the same
                with anyio.CancelScope(shield=True):
                    await self._end_connection(live.stream_id, client, "deleted", 1, live.policy, None)
        if meta is None:
            live.first_outcome = ("deleted", client.cursor)
            return
        reason = await self._serve_connection(
            live.stream_id,
            client,
            meta,
            1,
            live.prefix,
            client.cursor,
            live.policy,
            live.can_close_at_will,
            Delivery(),
            None,
            None,
        )
        live.first_outcome = (reason, client.cursor)

    async def _release(self, live: Live, reason: str) -> None:
        """Let the first connection go: finish its answer (with `retry:` when closed at will)."""
        client = live.direct
        if client is None:
            return
        if live.sending:
            live.pending_release = reason  # the write in flight releases it when done
            return
        live.direct = None
        live.pending_release = None
        live.first_outcome = (reason, client.cursor)
        if live.head is not None:
            await self._send_head(live, client)
        if not live.meta_created:
            await client.finish()
            return
        # A connection replaced by a resume leaves the stream's record to the newer one:
        # `_end_connection` updates it only while generation 1 (the first connection) holds it.
        await self._end_connection(live.stream_id, client, reason, 1, live.policy, None)

    async def _run_app(self, live: Live, client: Client) -> None:
        body_sent = False

        async def app_receive() -> Message:
            nonlocal body_sent
            if not body_sent:
                body_sent = True
                return {"type": "http.request", "body": live.body, "more_body": False}
            await live.app_disconnect.wait()
            return {"type": "http.disconnect"}

        async def app_send(message: Message) -> None:
            await self._on_app_send(live, client, message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                # What a server tells an app whose response is complete: its disconnect
                # listener ends normally instead of being cancelled (cancellations leave
                # reference cycles that only the slow, full garbage collection reclaims).
                live.app_disconnect.set()

        try:
            with live.app_scope:
                await self.app(live.scope, app_receive, app_send)
        except Exception:
            if live.mode in (Mode.STREAM, Mode.UPGRADED):
                logger.exception("app failed while streaming %s", live.stream_id)
            elif not live.app_started:
                raise  # as unwrapped: the server answers 500
            else:
                logger.exception("app failed after starting its response")
        finally:
            # Bookkeeping that must survive a cancellation; with a store that answers at
            # once (memory) it never waits, and then it needs no shielding scope.
            done, rest = _start(self._app_finished(live, client))
            if not done:
                with anyio.CancelScope(shield=True):
                    await rest

    async def _app_finished(self, live: Live, client: Client) -> None:
        try:
            await self._flush_backlog(live)
            live.writers = None
            if live.mode is Mode.UPGRADED and live.json_chunks is not None and not live.final_seq:
                await self._record_json_answer(live)
            if live.mode in (Mode.STREAM, Mode.UPGRADED) and live.meta_created:
                tail = live.parser.pending
                if tail.strip():
                    with contextlib.suppress(SSEError):
                        await self._record(live, live.parser.feed(b"\n\n"))
                if live.kind is StreamKind.REQUEST and live.final_seq is None and not live.expired:
                    await self._record_error(live, "the server ended the stream without a response")
                if live.expired:
                    await self.store.delete_stream(live.stream_id)  # nobody is coming back for it
                else:
                    await self.store.update_stream(
                        live.stream_id, ttl_s=live.policy.retain_completed_s, state=StreamState.COMPLETED
                    )
            elif live.mode is None and not client.started and not client.gone.is_set():
                await send_bytes(
                    client.send_message, 500, b"Internal Server Error", content_type=b"text/plain"
                )
        finally:
            live.done.set()
            live.decided.set()
            live.poke()

    async def _on_app_send(self, live: Live, client: Client, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            live.app_started = True
            status = int(message["status"])
            headers: Headers = list(message.get("headers", []))
            content_type = b""
            for key, value in headers:
                if key.lower() == b"content-type":
                    content_type = value.split(b";", 1)[0].strip().lower()
            if live.mode is Mode.UPGRADED:
                if status >= 400 and not live.decided.is_set():
                    await self._refused_before_opening(live, client, message)
                    return
                principal = self.principal(live.scope)
                if principal != live.principal:
                    # Opened before the app ran: its auth has only now said who is calling.
                    live.principal = principal
                    await self.store.update_stream(live.stream_id, principal=principal)
                live.json_status = status
                live.upgraded_sse = content_type == b"text/event-stream"
                live.decided.set()
                live.poke()
                return
            if status == 200 and content_type == b"text/event-stream":
                for key, value in headers:
                    if key.lower() == b"mcp-session-id" and live.session_id is None:
                        live.session_id = value.decode("latin-1")
                live.mode = Mode.STREAM
                try:
                    await self._create_meta(live, attached=live.direct is not None)
                except Exception as exc:
                    if not self._store_outage(exc):
                        raise
                    # Without a store there is nothing to resume from: the app's answer goes
                    # out as it is, and says so (the store error must not reach the app's
                    # `send`, whose SSE writer would swallow it and leave the client a 500).
                    live.mode = Mode.PASSTHROUGH
                    live.decided.set()
                    live.poke()
                    await client.send(dict(message, headers=[*headers, UNAVAILABLE_HEADER]))
                    return
                extra = [(k, v) for k, v in headers if k.lower() not in _SKIP_APP_HEADERS]
                if not any(k.lower() == b"x-accel-buffering" for k, _ in extra):
                    extra.append((b"x-accel-buffering", b"no"))
                live.client_headers = [
                    *extra,
                    self.link_header(live.path, live.stream_id, 0),
                ]
                live.decided.set()
                live.poke()
                if live.direct is not None:
                    await self._start_direct(live, live.direct)
                return
            live.mode = Mode.PASSTHROUGH
            live.decided.set()
            live.poke()
            await client.send(message)
            return
        if kind != "http.response.body":
            if live.mode is Mode.PASSTHROUGH:
                await client.send(message)
            return
        body: bytes = message.get("body", b"")
        more = bool(message.get("more_body", False))
        if live.mode is Mode.STREAM or (live.mode is Mode.UPGRADED and live.upgraded_sse):
            frame = None if live.parser.pending else single_event_frame(body)
            if frame is not None:  # the usual shape, one whole event per chunk: no parsing, no copy
                if live.writers is None:
                    await self._write_frames(live, [frame])
                else:
                    await self._record_frames(live, [frame])
                return
            try:
                events = live.parser.feed(body) if body else []
            except SSEError:
                logger.error("stream %s: the app sent an oversized event; ending the stream", live.stream_id)
                await self._record_error(
                    live, "the server produced an event larger than the configured limit"
                )
                live.app_disconnect.set()
                return
            if events:
                await self._record(live, events)
        elif live.mode is Mode.UPGRADED:
            live.json_size += len(body)
            if live.json_size <= live.policy.max_event_bytes:
                live.json_chunks.append(body)
            if not more:
                await self._record_json_answer(live)
        elif live.mode is Mode.PASSTHROUGH:
            if live.method == "initialize" and live.json_size < 65536:
                live.json_size += len(body)
                live.passthrough_body.append(body)
                if not more:
                    await self._learn_session_from_json(live, b"".join(live.passthrough_body), message)
            await client.send(message)

    async def _start_direct(self, live: Live, client: Client) -> None:
        """Open the SSE answer on the first connection, holding its head for the first event.

        The headers and the priming event go out with the first event when it comes
        within `HOLD_HEAD_S`, else on their own (the watcher's timer).
        """
        live.answer_started = live.last_event = live.last_write = time.monotonic()
        live.head = priming_frame(live.prefix + b"0", live.policy.retry_ms) if live.can_close_at_will else b""

    @staticmethod
    def _direct_start(live: Live) -> Message:
        return {"type": "http.response.start", "status": 200, "headers": live.client_headers}

    async def _send_head(self, live: Live, client: Client) -> None:
        """Send the held headers and priming event of the first connection now."""
        head, live.head = live.head, None
        if head is not None and await client.send(self._direct_start(live)) and head:
            await self._write_direct(live, client, head)

    async def _learn_session_from_json(self, live: Live, body: bytes, _message: Message) -> None:
        try:
            answer = json.loads(body)
        except ValueError:
            return
        if live.session_id is None:
            return
        await self._remember_session(live, answer)

    async def _remember_session(self, live: Live, answer: Any) -> None:
        try:
            await self._store_session(live, answer)
        except Exception as exc:
            if not self._store_outage(exc):
                raise
            # The session works without it: later requests take the revision from their header.
            logger.warning("session %s: not recorded, the store is unavailable", live.session_id)

    async def _store_session(self, live: Live, answer: Any) -> None:
        if not isinstance(answer, dict) or live.session_id is None:
            return
        result = answer.get("result")
        version = result.get("protocolVersion") if isinstance(result, dict) else None
        version = p.valid_version(version) if isinstance(version, str) else None
        if version is None:
            return
        capabilities: dict[str, Any] = {}
        with contextlib.suppress(ValueError):
            request = json.loads(live.body)
            requested = request.get("params", {}).get("capabilities") if isinstance(request, dict) else None
            if isinstance(requested, dict):
                capabilities = requested
        info = SessionInfo(
            session_id=live.session_id,
            protocol_version=version,
            principal=live.principal,
            capabilities=capabilities,
        )
        await self.store.put_session(info, self.session_ttl_s)
        if self.node is not None:
            await self.store.set_key(owner_key(live.session_id), self.node_id, self.session_ttl_s)
        logger.debug("session %s negotiated %s", live.session_id, version)

    async def _create_meta(self, live: Live, *, attached: bool = False) -> None:
        live.prefix = self.signer.event_prefix(live.stream_id)
        # Now that the app has seen the request, its own auth may have said who is calling.
        live.principal = self.principal(live.scope)
        meta = StreamMeta(
            stream_id=live.stream_id,
            kind=live.kind,
            session_id=live.session_id,
            principal=live.principal,
            protocol_version=live.version,
            path=live.path,
            request_id=live.request_id,
            method=live.method,
            owner=self.node_id,
            route=live.route,
            attached=attached,
            attach_gen=1 if attached else 0,
            last_contact=time.time(),
        )
        await self.store.create_stream(meta, ttl_s=self._running_ttl(live.policy))
        live.meta_created = True
        if live.kind is StreamKind.STANDALONE and live.session_id is not None:
            # The app accepted the GET: from now on a second GET of the session resumes this one.
            await self.store.set_key(
                _standalone_key(live.session_id), live.stream_id, self._running_ttl(live.policy)
            )

    @staticmethod
    def _running_ttl(policy: Policy) -> float:
        # Expiry is driven by the owner (max_wait_s); the TTL only reclaims streams of a dead owner.
        return policy.max_wait_s * 2 + 3600

    async def _upgrade(self, live: Live, *, decide: bool = True) -> None:
        """Open an SSE stream for a request the app has not answered in time (or, with
        `decide=False`, one whose answer must be resumable from the start)."""
        live.mode = Mode.UPGRADED
        await self._create_meta(live)
        headers = list(_SSE_HEADERS)
        if live.session_id is not None:
            headers.append((b"mcp-session-id", live.session_id.encode()))
        headers.append(self.link_header(live.path, live.stream_id, 0))
        live.client_headers = headers
        if decide:
            live.decided.set()
            live.poke()

    async def _refused_before_opening(self, live: Live, client: Client, start: Message) -> None:
        """The app refused a request whose stream was opened ahead of its answer (a 404
        "Session not found", a 400): the client gets that status, not an event in a 200
        (stock clients start a new session only on an HTTP 404). Nothing ran, so the
        stream and its Idempotency-Key are forgotten: a retry is a new request."""
        live.mode = Mode.PASSTHROUGH
        live.decided.set()
        live.poke()
        try:
            await self.store.delete_stream(live.stream_id)
            if live.idempotency_key is not None:
                await self.store.delete_key(live.idempotency_key)
        except Exception as exc:
            if not self._store_outage(exc):
                raise
        live.meta_created = False
        await client.send(start)

    def _store_outage(self, exc: BaseException) -> bool:
        """Whether `exc` says the store is down; if so, the middleware is told (once per call)."""
        if not self.store.is_unavailable_error(exc):
            return False
        if self.on_store_outage is not None:
            self.on_store_outage(exc)
        return True

    async def _record_json_answer(self, live: Live) -> None:
        body = b"".join(live.json_chunks)
        live.json_chunks = []
        try:
            answer = json.loads(body) if body else None
        except ValueError:
            answer = None
        if isinstance(answer, dict) and answer.get("id") == live.request_id and p.is_response(answer):
            await self._record(live, [SSEEvent(data=p.dumps(answer), event=b"message")])
        elif isinstance(answer, dict) and "error" in answer:
            fixed = dict(answer, id=live.request_id)
            await self._record(live, [SSEEvent(data=p.dumps(fixed), event=b"message")])
        else:
            await self._record_error(live, f"the server answered with HTTP {live.json_status}")

    async def _record_error(self, live: Live, text: str) -> None:
        if live.kind is not StreamKind.REQUEST or live.final_seq is not None or not live.meta_created:
            return
        error = p.error_message(live.request_id, p.STREAM_ERROR, text)
        await self._record(live, [SSEEvent(data=p.dumps(error), event=b"message")])

    async def _record(self, live: Live, events: list[SSEEvent]) -> None:
        """Give the app's events ids and store them; notice inputs and the final response."""
        await self._record_frames(
            live, [(encode_payload(event.data, event.event), event.data) for event in events if event.data]
        )

    async def _record_frames(self, live: Live, frames: list[tuple[bytes, bytes]]) -> None:
        """Record `(frame without id, data)` pairs, at once or (write-behind) in order soon.

        With a store that pays a round trip per write, an app sending events one by
        one would otherwise wait a round trip per event: while a write is in flight,
        what the app sends queues up (bounded) and goes to the store as one batch.
        """
        writers = live.writers
        if writers is None:
            await self._write_frames(live, frames)
            return
        live.backlog.extend(frames)
        live.backlog_bytes += sum(len(payload) for payload, _ in frames)
        if not live.writing:
            live.writing = True
            writers.start_soon(self._write_behind, live)
            return
        while live.writing and (
            len(live.backlog) >= WRITE_BEHIND_FRAMES or live.backlog_bytes >= WRITE_BEHIND_BYTES
        ):
            await live.wait_written()

    async def _write_behind(self, live: Live) -> None:
        try:
            while live.backlog:
                batch = live.take_backlog()
                await self._write_frames(live, batch)
                live.signal_written()
        finally:
            live.writing = False
            live.signal_written()

    async def _flush_backlog(self, live: Live) -> None:
        """Wait for the write in flight, then write what is left (the writer may have been cancelled)."""
        while live.writing:
            await live.wait_written()
        if live.backlog:
            batch = live.take_backlog()
            await self._write_frames(live, batch)

    async def _write_frames(self, live: Live, frames: list[tuple[bytes, bytes]]) -> None:
        """Record `(frame without id, data)` pairs; empty data (an app's own priming) is skipped."""
        batch: list[tuple[int, bytes]] = []
        inputs: list[list[Any]] = []
        final: int | None = None
        final_data: bytes | None = None
        for payload, data in frames:
            if not data:  # the app's own priming events and empty frames carry nothing to deliver
                continue
            if final is not None or live.final_seq is not None:
                break  # nothing after the final response belongs to this stream
            live.seq += 1
            seq = live.seq
            batch.append((seq, payload))
            kind, message_id = p.classify(data)
            if kind is p.Kind.SERVER_REQUEST and p.valid_id(message_id):
                inputs.append([message_id, seq])
                live.last_input_seq = seq
            elif (
                kind is p.Kind.RESPONSE and live.kind is StreamKind.REQUEST and message_id == live.request_id
            ):
                final = seq
                final_data = data
        if not batch:
            return
        policy = live.policy
        await self.store.append(
            live.stream_id,
            batch,
            max_events=policy.max_events_per_stream,
            max_bytes=policy.max_bytes_per_stream,
        )
        if inputs:
            meta = await self.store.get_stream(live.stream_id)
            if meta is not None:
                pending = meta.pending_inputs + inputs
                issued = (meta.issued_inputs + [i for i, _ in inputs])[-1000:]
                await self.store.update_stream(live.stream_id, pending_inputs=pending, issued_inputs=issued)
                if live.session_id is not None:
                    for message_id, _ in inputs:
                        await self.store.set_key(
                            _input_key(live.session_id, message_id), live.stream_id, self._running_ttl(policy)
                        )
        if final is not None:
            live.final_seq = final
            await self.store.update_stream(live.stream_id, final_seq=final, state=StreamState.COMPLETED)
            if live.method == "initialize" and final_data is not None:
                with contextlib.suppress(ValueError):
                    await self._remember_session(live, json.loads(final_data))
        if live.direct is not None:
            await self._deliver(live, batch)

    # ------------------------------------------------------------------ expiry
    async def _await_decision(self, live: Live, client: Client) -> None:
        """Wait for the app's answer to start; expire if the client left and nobody came back."""
        while not live.decided.is_set():
            timeout = math.inf
            if client.gone.is_set():
                timeout = client.gone_at + live.policy.max_wait_s - time.time()
                if timeout <= 0:
                    await self._expire(live)
                    return
            await live.wait_wake(timeout)

    async def _await_done(self, live: Live, client: Client) -> None:
        """Host the app until it is done, expiring the stream when nobody is in contact.

        This runs in the ASGI call that brought the request, after its client left:
        one task per detached stream, sleeping until the next moment expiry is possible.
        """
        max_wait = live.policy.max_wait_s
        while not live.done.is_set():
            if live.mode is Mode.PASSTHROUGH:
                # An answer already on its way as JSON: the client leaving means what it does unwrapped.
                if client.gone.is_set():
                    live.app_disconnect.set()
                    await live.done.wait()
                    return
                await live.wait_wake(math.inf)
                continue
            if live.expired:
                await live.done.wait()
                return
            meta = await self.store.get_stream(live.stream_id) if live.meta_created else None
            if meta is None:
                await self._cancel_app(live, "the stream was deleted")
                continue
            if meta.state is not StreamState.RUNNING:
                await live.done.wait()
                return
            remaining = meta.last_contact + max_wait - time.time()
            if remaining <= 0:
                await self._expire(live)
                continue
            await live.wait_wake(remaining)

    async def _expire(self, live: Live) -> None:
        logger.info(
            "stream %s: nobody resumed within %ss; cancelling", live.stream_id, live.policy.max_wait_s
        )
        live.expired = True
        if live.meta_created:
            await self.store.update_stream(live.stream_id, state=StreamState.EXPIRED)
        await self._cancel_app(live, "the client did not resume within the resume window")
        if live.meta_created:
            await self.store.delete_stream(live.stream_id)

    async def _cancel_app(self, live: Live, reason: str) -> None:
        """Stop the app's work for a stream the way its protocol revision expects."""
        live.expired = True
        if (
            live.kind is StreamKind.REQUEST
            and live.session_id is not None
            and not p.at_least(live.version, p.SINGLE_EXCHANGE_VERSION)
        ):
            notification = {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": live.request_id, "reason": reason},
            }
            try:
                await self.call_app(
                    live.scope, live.path, live.session_id, live.version, p.dumps(notification)
                )
            except Exception:
                logger.exception("stream %s: could not deliver the cancellation", live.stream_id)
            with anyio.move_on_after(CANCEL_GRACE_S):
                await live.done.wait()
        live.app_disconnect.set()
        with anyio.move_on_after(CANCEL_GRACE_S):
            await live.done.wait()
        if not live.done.is_set():
            logger.warning("stream %s: the app ignored the cancellation; stopping it", live.stream_id)
            live.app_scope.cancel()

    async def cancel_stream(self, stream_id: str, reason: str) -> None:
        live = self.live.get(stream_id)
        if live is not None and not live.done.is_set():
            await self._cancel_app(live, reason)
        await self.store.delete_stream(stream_id)

    # ------------------------------------------------------------------ the app, called by us
    async def call_app(
        self, template: Scope, path: str, session_id: str | None, version: str, body: bytes
    ) -> tuple[int, bytes]:
        """POST `body` to the app's MCP endpoint as the client would (client answers, cancellations)."""
        reply = await post_to_app(self.app, template, path, session_id, version, body)
        return reply.status, reply.body

    # ------------------------------------------------------------------ standalone GET stream
    async def standalone_running(self, session_id: str) -> bool:
        stream_id = await self.store.get_key(_standalone_key(session_id))
        meta = await self.store.get_stream(stream_id) if stream_id else None
        return meta is not None and meta.state is StreamState.RUNNING

    async def handle_standalone(self, scope: Scope, receive: Receive, send: Send, session_id: str) -> None:
        """The session's GET stream: a running one is resumed, else the app opens a new one.

        Its record (`standalone:<session>`) is written only once the app accepted the
        GET: a request the app refuses (another principal's, a stale session) must not
        touch the stream of the session it names.
        """
        version = await self.version_for(scope, session_id)
        stream_id = await self.store.get_key(_standalone_key(session_id))
        meta = await self.store.get_stream(stream_id) if stream_id else None
        if meta is not None and meta.state is StreamState.RUNNING:
            if await self.admitted(scope, send, meta) is not None:
                await self.serve_stream(scope, receive, send, meta, meta.last_seq)
            return
        route, policy = self.routes.choose(scope["path"], None, None)
        app_scope = dict(scope)
        app_scope["headers"] = [(k, v) for k, v in scope["headers"] if k != b"last-event-id"]
        live = Live(
            kind=StreamKind.STANDALONE,
            scope=app_scope,
            body=b"",
            route=route,
            policy=policy,
            version=version,
            session_id=session_id,
            principal=self.principal(scope),
            path=scope["path"],
        )
        try:
            await self._host(live, Client(send, receive), upgrade_after=None)
        finally:
            key = _standalone_key(session_id)
            if live.meta_created and await self.store.get_key(key) == live.stream_id:
                await self.store.delete_key(key)

    # ------------------------------------------------------------------ serving a client
    async def serve(
        self,
        stream_id: str,
        client: Client,
        *,
        scope: Scope,
        after_seq: int,
        headers: Headers,
        priming: bool,
        policy: Policy,
        version: str,
        delivery: Delivery | None = None,
    ) -> tuple[str, int]:
        """Attach `client` to the stream and send it everything after `after_seq`, then live events.

        Returns when the client leaves, the stream ends, a newer connection replaces
        this one, or a policy closes the connection at will (after a `retry:` field):
        why (`"complete"`, `"gone"`, `"deadline"`, ...) and the seq of the last event written.
        """
        delivery = delivery or Delivery()
        meta = await self.store.attach(stream_id, time.time())
        if meta is None:
            await send_json(
                client.send_message,
                404,
                p.error_message(None, p.INVALID_REQUEST, "unknown or expired stream"),
            )
            return "deleted", after_seq
        generation = meta.attach_gen
        live = self.live.get(stream_id)
        if live is not None and live.direct is not None:
            await self._release(live, "replaced")
        prefix = self.signer.event_prefix(stream_id)
        at_will = delivery.at_will and p.at_least(version, p.RESUMABLE_VERSION)
        start: Message = {"type": "http.response.start", "status": 200, "headers": headers}
        opening = priming_frame(prefix + str(after_seq).encode(), policy.retry_ms) if priming else None
        reason = await self._serve_connection(
            stream_id, client, meta, generation, prefix, after_seq, policy, at_will, delivery, start, opening
        )
        return reason, client.cursor

    async def _serve_connection(
        self,
        stream_id: str,
        client: Client,
        meta: StreamMeta,
        generation: int,
        prefix: bytes,
        cursor: int,
        policy: Policy,
        at_will: bool,
        delivery: Delivery,
        start: Message | None,
        opening: bytes | None,
    ) -> str:
        """Serve an attached client until `_serve_loop` ends (or it leaves), then let it go.

        `start` and `opening` open its answer first; a connection whose answer is open
        already (a stalled first connection handed over) passes None for both.
        """
        reason = "gone"
        try:
            with anyio.CancelScope() as serving:
                client.cancel_scope = serving
                if client.gone.is_set():
                    serving.cancel()
                client.cursor = cursor
                if start is None or await client.send(start):
                    if opening is not None:
                        await client.write(opening)
                    reason, _ = await self._serve_loop(
                        stream_id, client, meta, generation, prefix, cursor, policy, at_will, delivery
                    )
        finally:
            client.cancel_scope = None
            with anyio.CancelScope(shield=True):
                await self._end_connection(stream_id, client, reason, generation, policy, delivery)
        return reason

    async def _end_connection(
        self,
        stream_id: str,
        client: Client,
        reason: str,
        generation: int,
        policy: Policy,
        delivery: Delivery | None,
    ) -> None:
        """Finish a client's answer and note where it stopped (unless a newer connection took over)."""
        if reason == "deadline" and delivery is not None and delivery.on_deadline is not None:
            await client.finish(await delivery.on_deadline(client.cursor))
        elif reason in AT_WILL_REASONS and policy.retry_ms is not None:
            await client.finish(retry_frame(policy.retry_ms))
        else:
            await client.finish()
        await self.store.update_stream_if(
            stream_id,
            {"attach_gen": generation},
            attached=False,
            last_contact=time.time(),
            delivered_seq=max(client.cursor, 0),
        )
        logger.debug("stream %s: connection detached (%s) at %s", stream_id, reason, client.cursor)

    async def _serve_loop(
        self,
        stream_id: str,
        client: Client,
        meta: StreamMeta,
        generation: int,
        prefix: bytes,
        cursor: int,
        policy: Policy,
        at_will: bool,
        delivery: Delivery,
    ) -> tuple[str, int]:
        started = last_event = last_write = last_beat = time.monotonic()
        deadline = None if delivery.deadline_s is None else started + delivery.deadline_s
        transform = delivery.transform
        heartbeat = min(max(policy.max_wait_s / 3, 0.05), 10.0)
        owner_check = self.node.timeout_s / 2 if self.node is not None else math.inf
        next_owner_check = started + owner_check
        id_head = b"id: " + prefix
        start_cursor = cursor
        while True:
            try:
                events, meta_now = await self.store.read_with_meta(stream_id, cursor, READ_BATCH)
            except GapError as gap:
                await client.write(self._gap_frame(meta, gap))
                return "gap", cursor
            if events:
                parts = []
                for seq, payload in events:
                    if transform is not None:
                        payload = transform(seq, payload)
                    parts.append(id_head + str(seq).encode() + b"\n" + payload)
                if not await client.write(b"".join(parts)):
                    return "gone", cursor
                cursor = events[-1][0]
                client.cursor = cursor  # survives this loop being cancelled when the client leaves
                last_event = last_write = time.monotonic()
            if meta_now is None:
                return "deleted", cursor
            meta = meta_now
            if meta.attach_gen != generation:
                return "replaced", cursor
            if meta.final_seq is not None and cursor >= meta.final_seq:
                return "complete", cursor
            if meta.state is not StreamState.RUNNING and cursor >= meta.last_seq:
                return "ended", cursor
            seen_version = meta.version
            if (
                at_will
                and policy.disconnect_on_input_request
                and any(start_cursor < seq <= cursor for _, seq in meta.pending_inputs)
            ):
                return "input", cursor
            if events and cursor < meta.last_seq:
                continue
            now = time.monotonic()
            if self.node is not None and meta.owner != self.node_id and now >= next_owner_check:
                next_owner_check = now + owner_check
                if cursor >= meta.last_seq and not await self.node.alive(meta.owner):
                    # Everything the dead owner recorded was delivered; nothing more will come.
                    logger.warning("stream %s: its owner %s stopped", stream_id, meta.owner)
                    await self.store.update_stream(stream_id, state=StreamState.EXPIRED)
                    if meta.kind is StreamKind.REQUEST:
                        error = p.error_message(
                            meta.request_id, p.STREAM_ERROR, "the server running this request stopped"
                        )
                        await client.write(encode_payload(p.dumps(error), b"message"))
                    return "owner_dead", cursor
            if now - last_beat >= heartbeat:
                await self.store.update_stream(stream_id, last_contact=time.time(), delivered_seq=cursor)
                last_beat = now
            timeout = min(heartbeat - (now - last_beat), max(next_owner_check - now, 0.01))
            if deadline is not None:
                if now >= deadline:
                    return "deadline", cursor
                timeout = min(timeout, deadline - now)
            if at_will and policy.max_connection_s is not None:
                left = started + policy.max_connection_s - now
                if left <= 0:
                    return "max_connection", cursor
                timeout = min(timeout, left)
            if at_will and policy.idle_disconnect_s is not None:
                left = last_event + policy.idle_disconnect_s - now
                if left <= 0:
                    return "idle", cursor
                timeout = min(timeout, left)
            if policy.keepalive_s is not None:
                left = last_write + policy.keepalive_s - now
                if left <= 0:
                    if not await client.write(KEEPALIVE):
                        return "gone", cursor
                    last_write = now
                    left = policy.keepalive_s
                timeout = min(timeout, left)
            await self.store.wait(stream_id, cursor, within_s=max(timeout, 0.001), version=seen_version)

    @staticmethod
    def _gap_frame(meta: StreamMeta, gap: GapError) -> bytes:
        text = (
            f"cannot resume: events {gap.after_seq + 1}..{gap.first_seq - 1} of this stream were dropped "
            "to stay within the server's buffer limits"
        )
        error = p.error_message(meta.request_id, p.STREAM_ERROR, text)
        return encode_payload(p.dumps(error), b"message")

    # ------------------------------------------------------------------ resuming
    async def handle_resume(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        stream_id: str,
        after_seq: int | None,
        *,
        via_link: bool,
    ) -> None:
        meta = await self.store.get_stream(stream_id)
        meta = await self.admitted(scope, send, meta)
        if meta is None:
            return
        if after_seq is None:
            after_seq = meta.delivered_seq
        if after_seq > meta.last_seq:
            await send_json(
                send, 400, p.error_message(None, p.INVALID_REQUEST, "Last-Event-ID is ahead of the stream")
            )
            return
        if via_link and _nothing_to_send(meta, after_seq):
            await send_bytes(send, 204)
            return
        if meta.final_seq is not None and after_seq >= meta.final_seq:
            # A client that already holds the final response is told the stream is over
            # (some clients, e.g. the TypeScript SDK's, resume even after an error response).
            await send_bytes(send, 204)
            return
        await self.serve_stream(scope, receive, send, meta, after_seq)

    async def serve_stream(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        meta: StreamMeta,
        after_seq: int,
        delivery: Delivery | None = None,
    ) -> tuple[str, int] | None:
        """Answer a resuming client with the stream after `after_seq` (see `serve`)."""
        if after_seq + 1 < meta.first_seq:
            if meta.kind is StreamKind.STANDALONE:
                await send_json(
                    send,
                    410,
                    p.error_message(
                        None, p.STREAM_ERROR, "cannot resume: events after Last-Event-ID were dropped"
                    ),
                )
                return None
            headers = self._sse_headers(scope, meta, after_seq)
            gap = GapError(meta.stream_id, after_seq, meta.first_seq)
            await send_bytes(send, 200, self._gap_frame(meta, gap), headers)
            return None
        client = Client(send, receive)
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.watch)
            outcome = await self.serve(
                meta.stream_id,
                client,
                scope=scope,
                after_seq=after_seq,
                headers=self._sse_headers(scope, meta, after_seq),
                priming=p.at_least(meta.protocol_version, p.RESUMABLE_VERSION),
                policy=self.routes.by_index(meta.route),
                version=meta.protocol_version,
                delivery=delivery,
            )
            await _stop_watching(client, tg)
        return outcome

    # ------------------------------------------------------------------ client answers
    async def deliver_answers(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        stream_id: str,
        answers: list[dict[str, Any]],
        after_seq: int | None,
    ) -> None:
        """SEP-1335: answers POSTed to the Link URL go to the app; the reply continues the stream."""
        meta = await self.store.get_stream(stream_id)
        meta = await self.admitted(scope, send, meta)
        if meta is None:
            return
        issued = meta.issued_inputs
        stray = [a["id"] for a in answers if a["id"] not in issued]
        if stray:
            await send_json(
                send,
                400,
                p.error_message(None, p.INVALID_PARAMS, "the body answers requests this stream never sent"),
            )
            return
        pending_ids = [entry[0] for entry in meta.pending_inputs]
        for answer in answers:
            if answer["id"] not in pending_ids:
                continue  # already delivered (a retried POST): answering twice would confuse the app
            status, body = await self.call_app(
                scope, meta.path, meta.session_id, meta.protocol_version, p.dumps(answer)
            )
            if status >= 300:
                logger.warning("stream %s: the app refused a client answer with HTTP %s", stream_id, status)
                await send_bytes(send, status, body, content_type=b"application/json")
                return
            await self.answered(meta.session_id, answer["id"], stream_id)
        updated = await self.store.update_stream(stream_id, turn=meta.turn + 1)
        if updated is None:
            await send_json(send, 404, p.error_message(None, p.INVALID_REQUEST, "unknown or expired stream"))
            return
        start = updated.delivered_seq if after_seq is None else after_seq
        if start > updated.last_seq:
            await send_json(
                send, 400, p.error_message(None, p.INVALID_REQUEST, "Last-Event-ID is ahead of the stream")
            )
            return
        if _nothing_to_send(updated, start):
            await send_bytes(send, 204)
            return
        await self.serve_stream(scope, receive, send, updated, start)

    async def answered(self, session_id: str | None, message_id: Any, stream_id: str | None = None) -> None:
        """Note that a server-to-client request was answered (by any route)."""
        if stream_id is None:
            if session_id is None:
                return
            stream_id = await self.store.get_key(_input_key(session_id, message_id))
            if stream_id is None:
                return
        meta = await self.store.get_stream(stream_id)
        if meta is None:
            return
        pending = [entry for entry in meta.pending_inputs if entry[0] != message_id]
        if len(pending) != len(meta.pending_inputs):
            await self.store.update_stream(stream_id, pending_inputs=pending)
        if session_id is not None:
            await self.store.delete_key(_input_key(session_id, message_id))

    # ------------------------------------------------------------------ sessions
    async def end_session(self, session_id: str) -> None:
        stream_ids = await self.store.delete_session(session_id)
        await self.store.delete_key(_standalone_key(session_id))
        for stream_id in stream_ids:
            live = self.live.get(stream_id)
            if live is not None:
                live.expired = True
                live.app_disconnect.set()
            await self.store.delete_stream(stream_id)


class _Rest:
    """The rest of a coroutine that `_start` ran up to its first suspension: awaiting it
    hands that suspension to the event loop and continues the coroutine as `await` would
    (values sent in and exceptions thrown in, cancellation included, pass straight through)."""

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine[Any, Any, Any], first: Any) -> None:
        self._coro = coro
        self._first = first

    def __await__(self) -> Generator[Any, Any, Any]:
        pending = self._first
        while True:
            try:
                sent = yield pending
            except GeneratorExit:
                self._coro.close()
                raise
            except BaseException as exc:  # thrown in by the event loop (a cancellation): pass it on
                try:
                    pending = self._coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    pending = self._coro.send(sent)
                except StopIteration as stop:
                    return stop.value


def _start(coro: Coroutine[Any, Any, Any]) -> tuple[bool, Any]:
    """Run `coro` until it completes or first suspends: `(True, result)` or `(False, rest)`,
    where `await rest` finishes it. Lets a caller skip setting up what only a wait needs."""
    try:
        first = coro.send(None)
    except StopIteration as stop:
        return True, stop.value
    return False, _Rest(coro, first)


async def _stop_watching(client: Client, group: anyio.abc.TaskGroup) -> None:
    """End `client.watch` (and anything else left in `group`) once the answer is over.

    Servers report a finished response to `receive()` as `http.disconnect` (uvicorn,
    hypercorn), which ends the watcher by itself within a loop iteration; that is
    much cheaper than cancelling it (anyio formats the cancelling task's repr on
    every `cancel()`), so cancelling is the fallback after `WATCH_GRACE_S`.
    """
    if client.finished and not client.gone.is_set():
        with anyio.move_on_after(WATCH_GRACE_S):
            await client.gone.wait()
    if not client.gone.is_set():
        if client.finished:
            logger.debug("the server did not report a finished answer within %ss", WATCH_GRACE_S)
        group.cancel_scope.cancel()


def _nothing_to_send(meta: StreamMeta, after_seq: int) -> bool:
    """SEP-1335's 204: the stream is over for this client, or it waits for the client's input."""
    if meta.final_seq is not None and after_seq >= meta.final_seq:
        return True
    if meta.state is not StreamState.RUNNING and after_seq >= meta.last_seq:
        return True
    return meta.waiting_for_input and after_seq >= meta.last_seq


def _input_key(session_id: str, message_id: Any) -> str:
    return f"input:{session_id}:{json.dumps(message_id)}"


def _standalone_key(session_id: str) -> str:
    return f"standalone:{session_id}"
