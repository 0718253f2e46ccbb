"""`ResumeMiddleware`: the stream engine as one pure-ASGI middleware.

It decides, per HTTP request on the MCP path, whether the engine takes over (a
JSON-RPC request that may be answered with SSE, a resume, a stream URL, the
standalone GET stream) or the app sees the request exactly as it was sent.
Whatever it cannot classify goes to the app untouched, so error behaviour stays
the app's own.

A POST's body is read once (bounded by `max_body_bytes`) and then sorted
(`post_sorting.py`, a pure function): a session held by another node is relayed
there; a client's `notifications/cancelled` goes to `client_cancels.py`; a JSON-RPC
request that may be answered with SSE is routed (its `Policy`, its protocol revision,
a well-formed `Idempotency-Key`), offered to the feature layers in front
(`features.py`) and else hosted by the engine through its port (`engine/retried_posts.py`
claims the key first); anything else goes to the app as it was sent. A store outage
met before anything was sent hands the request to the app without the store
(`outage.py`). A resumed GET is `resume.py`.

The app's requests run on tasks of the engine's, inside the app's lifespan when
it reaches us: its shutdown first waits for them (`drain_s`), then stops what is
left, and only then is the app told (its requests may need what its shutdown
closes).
"""

from __future__ import annotations

import contextlib
import logging
import math
import secrets
from collections.abc import Awaitable, Sequence
from typing import Any

import anyio

from mcp_resume_asgi.core import mrtr
from mcp_resume_asgi.engine.adoption import SessionAliases
from mcp_resume_asgi.engine.cluster import ALIVE, Node
from mcp_resume_asgi.engine.engine import Engine
from mcp_resume_asgi.engine.port import (
    PLAIN,
    Delivery,
    Drained,
    Feature,
    RequestContext,
    ServeOptions,
)
from mcp_resume_asgi.engine.relayed_caller import CallerGuard, principal_with_relays
from mcp_resume_asgi.http.bodies import read_body_or_refuse, replay_receive
from mcp_resume_asgi.http.client_answers import ClientAnswers
from mcp_resume_asgi.http.client_cancels import ClientCancels
from mcp_resume_asgi.http.misconfig import WrongPathDetector
from mcp_resume_asgi.http.outage import TrackedSend, send_unavailable, without_store
from mcp_resume_asgi.http.post_sorting import INVALID_KEY, Post, Sorted, idempotency_key, sort_post
from mcp_resume_asgi.http.resume import Resumes
from mcp_resume_asgi.http.signals import hold_app_streams, on_shutdown_signal
from mcp_resume_asgi.policy import Policy, RoutesSpec, RouteTable
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import Store, StoreFullError
from mcp_resume_asgi.store.encrypted import encrypted
from mcp_resume_asgi.store.health import StoreHealth
from mcp_resume_asgi.store.observed import observed
from mcp_resume_asgi.store.urls import store_from_setting
from mcp_resume_asgi.telemetry import TelemetrySetting, telemetry_from
from mcp_resume_asgi.wire import header_rules
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.asgi import ASGIApp, Message, Receive, Scope, Send, check_asgi_app
from mcp_resume_asgi.wire.headers import accepts_sse, header, header_count, is_json, named_once
from mcp_resume_asgi.wire.principal import PrincipalOf, default_principal
from mcp_resume_asgi.wire.replies import send_bytes, send_jsonrpc_error
from mcp_resume_asgi.wire.scope_keys import ENGINE_PASSED, FEATURES_KEY, RELAYED_FROM, STREAM_SEGMENT
from mcp_resume_asgi.wire.session_record import STATE_METHODS
from mcp_resume_asgi.wire.store_cipher import StoreCipher
from mcp_resume_asgi.wire.tokens import TokenSigner, new_stream_id

__all__ = [
    "DEFAULT_DRAIN_S",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_NODE_TIMEOUT_S",
    "DEFAULT_SESSION_TTL_S",
    "ResumeMiddleware",
]

logger = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
#: How long a lifespan shutdown waits for the app's running requests before stopping them.
DEFAULT_DRAIN_S = 30.0
#: How long a session's record is kept after its last request.
DEFAULT_SESSION_TTL_S = 24 * 3600.0
#: How long a node's heartbeat holds: past it, the node counts as gone.
DEFAULT_NODE_TIMEOUT_S = 5.0


class ResumeMiddleware:
    """Makes the Streamable HTTP traffic of the wrapped MCP app resumable.

    Usable as `Starlette(middleware=[Middleware(ResumeMiddleware, ...)])` or
    directly: `ResumeMiddleware(app, ...)`.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        policy: Policy | None = None,
        routes: RoutesSpec | None = None,
        store: Store | str | None = None,
        secret: str | bytes | None = None,
        encryption_key: str | bytes | None = None,
        path: str | Sequence[str] = "/mcp",
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        principal: PrincipalOf = default_principal,
        session_ttl_s: float = DEFAULT_SESSION_TTL_S,
        node_timeout_s: float = DEFAULT_NODE_TIMEOUT_S,
        telemetry: TelemetrySetting = True,
        drain_s: float = DEFAULT_DRAIN_S,
    ) -> None:
        """`store`: a `Store` or a store URL (`store.urls`); none given, `MCP_RESUME_STORE` or a
        `MemoryStore`. `drain_s`: the drain's budget (`drain`): how long the app's running requests go on
        once the server's shutdown began before they are ended (each stream then ends with an
        error event its client can read, a task is `failed`).

        `encryption_key` (16 or more characters or bytes, the same on every node; needs the
        `encryption` extra): what the store and its pub/sub carry that may be secret - events
        (the app's answers), key values (stored requests with their credentials, task and REST
        records), relayed requests and answers - is encrypted before it leaves the process
        (`store/encrypted.py`; `docs/security.md` says what a reader of the store sees)."""
        check_asgi_app(app, wrapper="ResumeMiddleware")
        paths = [path] if isinstance(path, str) else list(path)
        if not paths or not all(isinstance(x, str) and x.startswith("/") for x in paths):
            raise ValueError("path must be one or more absolute paths such as '/mcp'")
        # Checked here, whatever the store: an option its store does not use yet (`node_timeout_s`
        # on the memory store) would otherwise fail only once the store changes.
        if isinstance(max_body_bytes, bool) or not isinstance(max_body_bytes, int):
            raise TypeError(f"max_body_bytes must be an int, not {max_body_bytes!r}")
        if max_body_bytes <= 0:
            raise ValueError("max_body_bytes must be positive")
        _check_seconds("session_ttl_s", session_ttl_s, allow_zero=False)
        _check_seconds("node_timeout_s", node_timeout_s, allow_zero=False)
        _check_seconds("drain_s", drain_s, allow_zero=True)
        self.drain_s = float(drain_s)
        # A session this node took over is known to its app by another id (`SessionAliases`),
        # and a relayed request is served as its caller; the app's auth may not name another.
        aliases = SessionAliases(app)
        app = CallerGuard(aliases, principal)
        self.app = app
        self.paths = {x.rstrip("/") or "/" for x in paths}
        self._wrong_path = WrongPathDetector(self.paths, self._local_path)
        self.max_body_bytes = max_body_bytes
        self.routes = RouteTable(policy or Policy(), routes)
        telemetry_of = telemetry_from(telemetry)  # (`telemetry`: OpenTelemetry if installed, else off)
        cipher = StoreCipher(encryption_key) if encryption_key is not None else None
        self.store = observed(encrypted(store_from_setting(store), cipher), telemetry_of)
        if self.store.shared and secret is None:
            raise ValueError(
                "a store shared by several processes needs a shared `secret`: a stream URL or event id "
                "minted by one process must verify in the others"
            )
        if secret is None:
            secret = self.store.own_secret()  # (a durable store's: tokens outlive a restart)
        signer = TokenSigner(secret)
        self.node = (
            Node(
                self.store,
                timeout_s=node_timeout_s,
                signer=signer,
                principal=principal,
                max_body_bytes=max_body_bytes,
            )
            if self.store.shared or self.store.durable
            else None
        )
        self.outage = StoreHealth(self.store)
        self.engine = Engine(
            app,
            routes=self.routes,
            store=self.store,
            signer=signer,
            principal=principal_with_relays(principal),
            session_ttl_s=session_ttl_s,
            node_id=self.node.node_id if self.node is not None else secrets.token_hex(6),
            node=self.node,
            on_store_outage=self.outage.failed,
            request_bound=max_body_bytes,
            telemetry=telemetry_of,
            aliases=aliases,
        )
        engine = self.engine
        self.answers = ClientAnswers(self.store, engine.port)
        """SEP-1335: a client's answers to the app's requests, POSTed to a stream's Link URL."""
        self.cancels = ClientCancels(engine.services, engine.admission)
        """A client's `notifications/cancelled` for a request its close does not cancel."""
        self.resumes = Resumes(
            engine.port,
            store=self.store,
            signer=signer,
            node=self.node,
            answers=self.answers,
            max_body_bytes=max_body_bytes,
        )
        self._features: Any = ()
        """The feature layers in front of this middleware, as last seen on a request: a request
        another node relays here passes through them too (`_relayed`)."""

    # ------------------------------------------------------------------ routing
    def _local_path(self, scope: Scope) -> str:
        path: str = scope.get("path", "")
        root: str = scope.get("root_path", "") or ""
        if root and path.startswith(root):
            path = path[len(root) :] or "/"
        return path

    def _classify_path(self, scope: Scope) -> tuple[str, str | None] | None:
        """('endpoint', None) for the MCP endpoint, ('stream', token) for a stream URL."""
        path = self._local_path(scope)
        trimmed = path.rstrip("/") or "/"
        if trimmed in self.paths:
            return "endpoint", None
        for base in self.paths:
            prefix = base.rstrip("/") + STREAM_SEGMENT
            if path.startswith(prefix):
                return "stream", path[len(prefix) :]
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        features = scope.get(FEATURES_KEY)
        if features:
            self._features = features
        where = self._classify_path(scope)
        if where is None:
            # Says once if MCP traffic comes here on another path (a wrong `path=` turns us off silently).
            await self.app(scope, self._wrong_path.watch(scope, receive), send)
            return
        outage = self.outage
        if outage.skipping:
            await without_store(
                self.app,
                scope,
                receive,
                send,
                stream_url=where[0] == "stream",
                max_body_bytes=self.max_body_bytes,
            )
            return
        tracked = TrackedSend(send)
        try:
            await self._dispatch(scope, receive, tracked, where)
            outage.maybe_recovered()
        except StoreFullError:
            logger.warning("store full: refusing a new stream")
            await send_bytes(
                send,
                503,
                b'{"error":"the server is at its stream capacity"}',
                [(b"retry-after", b"5")],
                b"application/json",
            )
        except Exception as exc:
            if not outage.is_outage(exc):
                raise
            outage.failed(exc)
            if not tracked.started:
                await send_unavailable(send)
            else:
                # Mid-stream: end the answer cleanly; the client resumes (and meets the 503 above).
                with contextlib.suppress(Exception):
                    await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _dispatch(
        self, scope: Scope, receive: Receive, send: Send, where: tuple[str, str | None]
    ) -> Awaitable[None]:
        """The awaitable that serves the request (a function, not a coroutine: one frame fewer
        held by every request in flight)."""
        if where[0] == "stream":
            return self.resumes.stream_url(scope, receive, send, where[1] or "")
        method = scope["method"]
        if method == "POST":
            return self._post(scope, receive, send)
        if method == "GET":
            return self._get(scope, receive, send)
        if method == "DELETE":
            return self._delete(scope, receive, send)
        return self.app(scope, receive, send)

    # ------------------------------------------------------------------ lifespan, cluster
    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The app's lifespan, around which the app's requests run (`AppTasks.lifespan`); its
        shutdown drains them before the app hears of it (`Engine.drain`)."""
        engine = self.engine
        scope = {**scope, ENGINE_PASSED: True}  # (a feature layer inside says it is misplaced)

        async def receive_draining() -> Message:
            message = await receive()
            if message["type"] == "lifespan.shutdown":
                await self.drain()
                await self._flush_store()
            return message

        undo = on_shutdown_signal(self.drain)  # (the server's signal comes long before its shutdown)
        release = hold_app_streams()  # (the drain ends the app's streams, not the SSE library)
        try:
            async with engine.services.scheduler.apps.lifespan():
                if self.node is None:
                    await self.app(scope, receive_draining, send)
                else:
                    await self._lifespan_with_node(scope, receive_draining, send)
        finally:
            release()
            undo()

    async def _flush_store(self) -> None:
        """What the drained work recorded, written before the server exits (a store whose writes
        return before they are written: `SQLiteStore`; uvicorn ends the process with the signal it
        got, and no exit hook runs then)."""
        try:
            await self.store.flush()
        except Exception as exc:
            if not self.store.is_unavailable_error(exc):
                raise
            logger.error("the store could not write what the drained work recorded: %s", exc)

    async def drain(self) -> Drained:
        """Drain this node now (`Engine.drain`): where another node can serve its clients, every
        connection a client may resume there is closed at once after `retry:` (elsewhere they stay
        attached, answered on), the app's work goes on for up to `drain_s`, then what is
        left ends with an error that says the server shut down. The server's SIGTERM/SIGINT
        starts it, and the lifespan's shutdown waits for it; a host that handles signals itself
        awaits this. Calls after the first wait for its end."""
        return await self.engine.drain(self.drain_s)

    async def _lifespan_with_node(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The app's lifespan, with this node's heartbeat and inbox running alongside. Its startup
        is complete once the node runs too (a node serving before it could not relay a session's
        request to the node that holds it, nor be relayed to), waiting up to `node_timeout_s`."""
        assert self.node is not None
        node = self.node

        sweep = self.engine.sweep

        async def send_once_running(message: Message) -> None:
            if message["type"] == "lifespan.startup.complete":
                if not await node.wait_running(node.timeout_s):
                    logger.warning(
                        "node %s: the cluster link is not up %.1f s into the startup; serving without it "
                        "meanwhile (a session held by another node is not relayed there until it is)",
                        node.node_id,
                        node.timeout_s,
                    )
                if sweep is not None:
                    sweep.start()  # now, and every node_timeout_s: calls of nodes that are gone
            await send(message)

        async with anyio.create_task_group() as tg:

            async def run_node() -> None:
                # Through store outages: rejoins when it is back, logging the cause once per outage.
                await node.run_forever(self._relayed)

            tg.start_soon(run_node)
            try:
                await self.app(scope, receive, send_once_running)
                await node.left()  # (a clean exit: no node waits for this one's heartbeat to lapse)
            finally:
                if sweep is not None:
                    sweep.stop()
                tg.cancel_scope.cancel()

    async def _relayed(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A request another node relayed to us: through the same layers as our own traffic."""
        scope[FEATURES_KEY] = self._features
        await self(scope, receive, send)

    async def _owner_elsewhere(self, scope: Scope, send: Send) -> str | None:
        """The live node that holds this request's session, if not us (None: serve it here).

        A session whose node is gone (dead, draining, or this node in an earlier life) is taken
        over here (`engine/adoption.py`), or relayed to the node that took it over. Returns ""
        when the request was answered."""
        session_id = header(scope, b"mcp-session-id")
        node = self.node
        if session_id is None or node is None:
            return None
        adoptions = self.engine.adoptions
        await adoptions.settled(session_id)
        if (
            RELAYED_FROM in scope
            or not node.running
            or adoptions.holds(session_id)
            or node.holds_own(session_id)
        ):
            return None
        epoch = node.held.epoch
        owner = await self.store.get_key(keys.session_owner(session_id))
        if owner is None:
            return None
        if owner == node.node_id:
            node.held.keep(session_id, epoch)
            return None
        if await node.holds_sessions(owner):
            return owner
        if node.status != ALIVE and await node.alive(owner):
            return owner  # (both leaving: the one that holds it serves it while it can)
        # (A node leaving takes over too: its next request goes on to a node that stays.)
        return await adoptions.take_over(scope, send, session_id, owner)

    async def _relay_session(
        self, owner: str, scope: Scope, receive: Receive, send: Send, body: bytes
    ) -> bool:
        """Relay a session's request to `owner`; if it did not take the request (it left or
        died meanwhile), the session is taken over here or relayed to its adopter. True when
        answered; False: serve it here."""
        assert self.node is not None
        if await self.node.relay(owner, scope, receive, send, body, give_back=True):
            return True
        session_id = header(scope, b"mcp-session-id")
        if session_id is None:
            await send_jsonrpc_error(
                send, 503, p.STREAM_ERROR, "the server holding this session is not answering"
            )
            return True
        adopter = await self.engine.adoptions.take_over(scope, send, session_id, owner)
        if adopter is None:
            return False
        if adopter:
            await self.node.relay(adopter, scope, receive, send, body)
        return True

    # ------------------------------------------------------------------ POST /mcp
    async def _post(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not is_json(scope):
            await self.app(scope, receive, send)
            return
        body = await read_body_or_refuse(receive, send, self.max_body_bytes)
        if body is None:
            return
        # `__call__` already tracks this request's send (nothing was sent since): one wrapper is enough.
        tracked = send if isinstance(send, TrackedSend) else TrackedSend(send)
        try:
            # A request to host comes back as its awaitable, awaited here: the frames that sorted
            # and prepared it (and the parsed JSON they hold) are gone while its call watches
            # its client, which a burst of requests in flight holds at once.
            # (a function of its own before: one call fewer per POST)
            hosting = await (
                self._post_here(scope, receive, tracked, body)
                if self.node is None
                else self._post_on_node(scope, receive, tracked, body)
            )
            if hosting is not None:
                await hosting
        except Exception as exc:
            if tracked.started or not self.outage.is_outage(exc):
                raise
            self.outage.failed(exc)
            await without_store(
                self.app,
                scope,
                receive,
                send,
                stream_url=False,
                max_body_bytes=self.max_body_bytes,
                body=body,
            )

    async def _post_on_node(
        self, scope: Scope, receive: Receive, send: Send, body: bytes
    ) -> Awaitable[Any] | None:
        owner = await self._owner_elsewhere(scope, send)
        if owner is not None and (not owner or await self._relay_session(owner, scope, receive, send, body)):
            return None
        return await self._post_here(scope, receive, send, body)

    def _post_here(
        self, scope: Scope, receive: Receive, send: Send, body: bytes
    ) -> Awaitable[Awaitable[Any] | None]:
        named = named_once(scope)  # (its headers read once: several are read below)
        sort = sort_post(scope, body, named)
        if sort.kind is Post.REQUEST:
            return self._request(scope, receive, send, body, sort.message, named)
        return self._post_other(scope, receive, send, body, sort)

    async def _post_other(
        self, scope: Scope, receive: Receive, send: Send, body: bytes, sort: Sorted
    ) -> None:
        """A POST that is not a request to host: refused, a cancel notice, or passed to the app."""
        if sort.kind is Post.NOT_JSON:
            await send_jsonrpc_error(send, 400, p.PARSE_ERROR, "Parse error: NaN and Infinity are not JSON")
        elif sort.kind is Post.CANCEL_NOTICE:
            assert sort.notice is not None
            await self.cancels.handle(scope, receive, send, body, sort.notice)
        else:
            accepted = False

            async def watch(message: Message) -> None:
                nonlocal accepted
                if message["type"] == "http.response.start":
                    accepted = 200 <= int(message["status"]) < 300
                await send(message)

            await self.app(scope, replay_receive(body, receive), watch)
            session_id = header(scope, b"mcp-session-id")
            for answered in sort.answered:
                await self.answers.answered(session_id, answered)
            if accepted and session_id is not None:
                await self._note_state(scope, session_id, sort.message)

    async def _request(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        body: bytes,
        message: dict[str, Any],
        named: dict[bytes, bytes] | None = None,
    ) -> Awaitable[Any] | None:
        """Answer a request here (refused, or a feature layer's), or return the awaitable that
        hosts it (the engine port's `host`: awaited by `_post`). `named`: its headers by name,
        if none repeats (`headers.named_once`)."""
        method: str = message["method"]
        params = message.get("params")
        tool = params.get("name") if method == "tools/call" and isinstance(params, dict) else None
        route, policy = self.routes.choose(
            self._local_path(scope), method, tool if isinstance(tool, str) else None
        )
        if named is None:
            session_id = header(scope, b"mcp-session-id")
        else:
            value = named.get(b"mcp-session-id")
            session_id = None if value is None else value.decode("latin-1")
        if method == "initialize":
            requested = params.get("protocolVersion") if isinstance(params, dict) else None
            version = p.valid_version(requested if isinstance(requested, str) else None) or p.DEFAULT_VERSION
        else:
            version = self.engine.known_version(scope, session_id) or await self.engine.version_for(
                scope, session_id
            )
        handed_over = mrtr.retry_state(message, version)
        if handed_over is not None:
            # The retry of a call a draining node handed over: served the call's stream, never the app.
            await self.engine.retries.serve(scope, receive, send, message, handed_over)
            return None
        key = idempotency_key(scope, named)
        if key is INVALID_KEY:
            await send_jsonrpc_error(
                send, 400, p.INVALID_REQUEST, "Idempotency-Key must be 1-255 printable ASCII characters"
            )
            return None
        features: tuple[Feature, ...] = scope.get(FEATURES_KEY, ())
        if (
            features
            and any(method in feature.answers for feature in features)
            and await self._refused_as_the_app_would(scope, send, message, session_id)
        ):
            return None
        engine = self.engine
        ctx = RequestContext(
            port=engine.port,
            scope=scope,
            body=body,
            message=message,
            method=method,
            tool=tool if isinstance(tool, str) else None,
            session_id=session_id,
            version=version,
            principal=engine.principal(scope),
            route=route,
            policy=policy,
            stream_id=new_stream_id(),
        )
        if not features:
            hosting = engine.port.host(
                ctx, receive, send, PLAIN if key is None else ServeOptions(idempotency_key=key)
            )
            if method in STATE_METHODS and session_id is not None:
                return self._noted(hosting, scope, session_id, message)
            return hosting
        ctx.capabilities = await engine.client_capabilities(session_id, message)
        for feature in features:
            if await feature.intercept(ctx, receive, send):
                return None
        first_messages: list[dict[str, Any]] = []
        for feature in features:
            first_messages += await feature.first_messages(ctx)
        options = ServeOptions(
            delivery=Delivery(survives_close=True) if ctx.survives_close else None,
            first_messages=tuple(first_messages),
            idempotency_key=key,
        )
        hosting = engine.port.host(ctx, receive, send, options)
        if method in STATE_METHODS and session_id is not None:
            return self._noted(hosting, scope, session_id, message)
        return hosting

    async def _noted(
        self, hosting: Awaitable[Any], scope: Scope, session_id: str, message: dict[str, Any]
    ) -> None:
        """Host a session-state request, then keep its effect in the session's record."""
        await hosting
        await self._note_state(scope, session_id, message)

    async def _note_state(self, scope: Scope, session_id: str, message: Any) -> None:
        """A message that sets session state (`STATE_METHODS`), kept in the session's record if
        it came from the session's principal (who the app's auth, having run, names)."""
        if self.node is None or not isinstance(message, dict) or message.get("method") not in STATE_METHODS:
            return
        await self.engine.services.sessions.note_state(session_id, self.engine.principal(scope), message)

    async def _refused_as_the_app_would(
        self, scope: Scope, send: Send, message: dict[str, Any], session_id: str | None
    ) -> bool:
        """A request a feature layer answers itself gets the app's refusals first: the transport's
        header rules (`wire/header_rules.py`) and, for a session's request whose session the store
        does not know (none named, or one the store lost), the app's word on that session. True
        when refused (answered)."""
        refusal = header_rules.refusal(scope["headers"], message)
        if refusal is not None:
            content_type = [(b"content-type", b"application/json")] if refusal.body else []
            await send_bytes(send, refusal.status, refusal.body, content_type)
            return True
        if header_rules.era_of(scope["headers"]) is not header_rules.Era.SESSION:
            return False
        if session_id is not None and await self.engine.store.get_session(session_id) is not None:
            return False
        version = header(scope, b"mcp-protocol-version") or p.DEFAULT_VERSION
        refused = await self.engine.admission.session_refusal(
            scope, self._local_path(scope), session_id, version
        )
        if refused is None:
            return False
        await refused.send(send)
        return True

    # ------------------------------------------------------------------ GET /mcp
    async def _get(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not accepts_sse(scope):
            await self.app(scope, receive, send)
            return
        last_event_id = header(scope, b"last-event-id")
        session_id = header(scope, b"mcp-session-id")
        if last_event_id is not None and not await self._reopens_standalone(scope, last_event_id, session_id):
            await self.resumes.last_event_id(scope, receive, send, last_event_id)
            return
        if session_id is None or not session_id.isprintable() or len(session_id) > 256:
            await self.app(scope, receive, send)
            return
        if not await self.engine.standalone_running(session_id):
            owner = await self._owner_elsewhere(scope, send)
            if owner is not None and (
                not owner or await self._relay_session(owner, scope, receive, send, b"")
            ):
                return
        await self.engine.handle_standalone(scope, receive, send, session_id)

    async def _reopens_standalone(self, scope: Scope, last_event_id: str, session_id: str | None) -> bool:
        """Whether a GET resuming after `last_event_id` is served as the session's GET stream
        anew: the id names the session's own GET stream, which is over with nothing left for the
        client (its node drained or died, its app let it go). Its session is then served where it
        lives now - taken over here, or relayed to its adopter - as a GET without the id, and
        the app judges the session as for any GET (a forged or foreign one: its 404)."""
        if session_id is None or header_count(scope, b"last-event-id") > 1:
            return False
        parsed = self.resumes.signer.parse_event_id(last_event_id.strip())
        if parsed is None:
            return False
        return await self.engine.standalone_ended(parsed[0], parsed[1], session_id)

    # ------------------------------------------------------------------ DELETE /mcp
    async def _delete(self, scope: Scope, receive: Receive, send: Send) -> None:
        owner = await self._owner_elsewhere(scope, send)
        if owner is not None and (not owner or await self._relay_session(owner, scope, receive, send, b"")):
            return
        status = 0

        held: list[Message] = []

        async def watch_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                held.append(message)  # answered once the session's streams are gone
                return
            await send(message)

        await self.app(scope, receive, watch_status)
        session_id = header(scope, b"mcp-session-id")
        if 200 <= status < 300 and session_id is not None:
            if self.node is not None:
                self.node.held.forget(session_id)
            await self.engine.end_session(session_id)
        for message in held:
            await send(message)


def _check_seconds(name: str, value: object, *, allow_zero: bool) -> None:
    """A duration option: a number (TypeError), finite and positive, or zero where `allow_zero`
    (ValueError)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, not {value!r}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        kind = "non-negative" if allow_zero else "positive"
        raise ValueError(f"{name} must be a {kind} finite number of seconds, not {value!r}")
