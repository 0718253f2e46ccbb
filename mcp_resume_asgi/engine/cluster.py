"""Several processes, one service: relaying a session's requests to the process that holds it.

An MCP app keeps each session in the memory of the process that answered its
`initialize`. Behind a load balancer without session affinity, the session's next
request may land anywhere; unwrapped, that process answers 404. With a shared store
every process (a *node*) records which node owns each session, keeps a heartbeat,
and listens on a channel named after itself. A request of a session owned by
another live node is relayed there over the store's pub/sub and its answer relayed
back, byte for byte; resumes need no relay at all, since every node reads the same
recorded events.

Relay messages are JSON: `req` (the HTTP request: method, path, headers, body, and
its caller), `start` and `body` (the answer, in order), `gone` (the client left). A
`req` is served as the caller who sent it, whatever layer authenticated them
(`relayed_caller.py`), and only if a node of the cluster sealed it, for this node,
once (`wire/relay_seal.py`). Pub/sub is at most once: a lost part ends the relayed
answer early, which a resumable client treats like any dropped connection; a part that comes
again (late, or replayed by whoever can publish) is dropped. The owner publishes an answer
from a task of the relayed request's own, in the order its `send` took the messages: `send`
takes a message whole or not at all, so a write the engine gives up (stalled) was either
sent or is written again, never both.

A node's channel is open to whoever can publish on the store: a message that is too long, is not
JSON (or nests too deep to parse), or is not a relay message is dropped, counted (`Node.dropped`)
and logged once per reason and `WARN_EVERY_S`; nothing a message holds stops the node's inbox.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from cachetools import TTLCache
from starlette.types import Message, Receive, Scope, Send

from mcp_resume_asgi.engine.held_sessions import HeldSessions
from mcp_resume_asgi.engine.relayed_caller import describe, seat
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import Store
from mcp_resume_asgi.store.health import OutageLog
from mcp_resume_asgi.wire.asgi import http_scope
from mcp_resume_asgi.wire.jsonrpc import STREAM_ERROR, error_message
from mcp_resume_asgi.wire.principal import PrincipalOf, default_principal
from mcp_resume_asgi.wire.relay_seal import RelayRequest, RelaySeal
from mcp_resume_asgi.wire.replies import send_json
from mcp_resume_asgi.wire.scope_keys import RELAYED_FROM
from mcp_resume_asgi.wire.tokens import TokenSigner

__all__ = [
    "MESSAGE_OVERHEAD_BYTES",
    "OUTBOX_MESSAGES",
    "PART_BYTES",
    "WARN_EVERY_S",
    "Node",
]

logger = logging.getLogger(__name__)

ASGIHandler = Callable[[Scope, Receive, Send], Awaitable[None]]
#: A node's heartbeat value while it serves its sessions.
ALIVE = "alive"
#: A node's heartbeat value once its drain began: alive for what it still runs (relays of its
#: streams, answers to its requests), but its sessions are other nodes' to take over.
LEAVING = "leaving"
#: How often, at most, messages dropped for one reason are logged as a warning.
WARN_EVERY_S = 60.0
#: Most nodes the roll call holds (`keys.nodes_index`): far above any fleet.
MAX_NODES = 10_000
#: The most answer bytes one relay message carries: a longer body chunk travels in several parts.
PART_BYTES = 256 * 1024
#: The most messages of a relayed answer taken from its app and not published yet: past them,
#: its `send` waits for room before it takes the next.
OUTBOX_MESSAGES = 16
#: What a relay message may hold besides its request's body (base64, in JSON in JSON): headers,
#: the seal, the caller.
MESSAGE_OVERHEAD_BYTES = 1024 * 1024
#: The request body bound a `Node` assumes when not told (the middleware's `max_body_bytes`).
_MAX_BODY_BYTES = 4 * 1024 * 1024
_HOP_BY_HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"content-length", b"upgrade"}


class _Replies:
    """Where the answer of a relay under way goes, on the node that relayed it: its messages each
    once, the parts in order (a copy of one taken already - late, or replayed by whoever can
    publish - is dropped before it is queued, so copies cannot fill the queue either)."""

    __slots__ = ("into", "next_part", "seen")

    def __init__(self, into: MemoryObjectSendStream[dict[str, Any]]) -> None:
        self.into = into
        self.seen: set[str] = set()
        """The kinds of message taken that come once (`ack`, `start`)."""
        self.next_part = 1

    def new(self, message: dict[str, Any]) -> bool:
        """Whether `message` (opened) was not taken already: if so, it counts as taken now."""
        kind = str(message.get("t"))
        if kind != "body":
            if kind in self.seen:
                return False
            self.seen.add(kind)
            return True
        part = message.get("seq")
        if isinstance(part, bool) or not isinstance(part, int) or part < self.next_part:
            return False
        self.next_part = part + 1  # (one past it missing: the reader ends the answer there)
        return True


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: Any) -> bytes:
    return base64.b64decode(text) if isinstance(text, str) else b""


class Node:
    """This process's membership in the cluster: heartbeat, inbox, and the relays through it."""

    def __init__(
        self,
        store: Store,
        *,
        node_id: str | None = None,
        timeout_s: float = 5.0,
        signer: TokenSigner | None = None,
        principal: PrincipalOf = default_principal,
        max_body_bytes: int = _MAX_BODY_BYTES,
    ) -> None:
        """`signer` holds the secret the cluster's nodes share (relays are sealed with it);
        `principal` names the caller of a request relayed from here (`wire/principal.py`);
        `max_body_bytes`, the longest request body relayed (what bounds the messages taken)."""
        if timeout_s <= 0:
            raise ValueError("node_timeout_s must be positive")
        self.store = store
        self.node_id = node_id or secrets.token_hex(6)
        self.timeout_s = timeout_s
        self.principal = principal
        self.seal = RelaySeal(signer if signer is not None else TokenSigner(None), self.node_id)
        self.max_message_bytes = 2 * max_body_bytes + MESSAGE_OVERHEAD_BYTES
        """Longer messages on this node's channel are dropped unread."""
        self.dropped: Counter[str] = Counter()
        """How many messages of this node's channel were dropped (unread or refused), by why."""
        self._warned: TTLCache[str, bool] = TTLCache(maxsize=64, ttl=WARN_EVERY_S)
        self.running = False
        self.leaving = False
        """Draining: off the roll call of the nodes that may serve clients (`leave`)."""
        self.status = ALIVE
        """What this node's heartbeat says: `ALIVE`, or `LEAVING` once its drain began (its
        sessions are then taken over by other nodes, `engine/adoption.py`)."""
        self._up: anyio.Event | None = None
        """Set when `running` becomes True, for whoever waits for it (`wait_running`)."""
        self._handler: ASGIHandler | None = None
        self._replies: dict[str, _Replies] = {}
        self._served: dict[str, anyio.Event] = {}
        self._relayed_streams: set[anyio.CancelScope] = set()
        """The relays from here whose client may resume them elsewhere (`let_streams_go` ends
        them): GET streams, and SSE answers once an event with an id went through."""
        self._let_go: set[anyio.CancelScope] = set()
        self._task_group: anyio.abc.TaskGroup | None = None
        self.link = OutageLog(f"node {self.node_id}: cluster link", level=logging.ERROR, log_to=logger)
        self.heartbeats = OutageLog(f"node {self.node_id}: heartbeat", level=logging.WARNING, log_to=logger)
        self.held = HeldSessions(timeout_s)
        """The sessions the store said this node holds, while its heartbeat holds (`holds_own`)."""

    @property
    def channel(self) -> str:
        return keys.node(self.node_id)

    async def run(self, handler: ASGIHandler) -> None:
        """Heartbeat and inbox, until cancelled (run for the lifetime of the app, from its lifespan)."""
        self._handler = handler
        async with anyio.create_task_group() as tg, self.store.subscribe(self.channel) as inbox:
            self._task_group = tg
            await self._beat()
            await self._on_roll_call()
            self.running = True
            up, self._up = self._up, None
            if up is not None:
                up.set()
            self.link.recovered()
            self.heartbeats.recovered()
            tg.start_soon(self._heartbeat)
            try:
                async for raw in inbox:
                    self._receive(raw)
            finally:
                self.running = False
                self.held.lapsed()
                tg.cancel_scope.cancel()

    async def wait_running(self, within_s: float) -> bool:
        """Wait until the node runs (its heartbeat set, its inbox subscribed), at most `within_s`
        seconds: whether it does."""
        if not self.running:
            if self._up is None:
                self._up = anyio.Event()
            with anyio.move_on_after(within_s):
                await self._up.wait()
        return self.running

    async def run_forever(self, handler: ASGIHandler, *, retry_s: float = 1.0) -> None:
        """`run`, rejoining every `retry_s` through store outages, until cancelled."""
        while True:
            try:
                await self.run(handler)
            except Exception as exc:
                self.link.failed(exc)
            await anyio.sleep(retry_s)

    async def _heartbeat(self) -> None:
        while True:
            await anyio.sleep(self.timeout_s / 3)
            try:
                await self._beat()
                await self._on_roll_call()
            except Exception as exc:
                self.heartbeats.failed(exc)
            else:
                self.heartbeats.recovered()

    async def _beat(self) -> None:
        """Write the heartbeat (the key lives `timeout_s`), noting how long it is known to hold."""
        started = time.monotonic()
        await self.store.set_key(self.channel, self.status, self.timeout_s)
        self.held.beat(started, time.monotonic())

    def holds_own(self, session_id: str) -> bool:
        """Whether this node holds the session without asking the store: the store said so, and
        the node has served its sessions since, its heartbeat holding (`held_sessions.py`)."""
        return self.status == ALIVE and self.running and self.held.holds(session_id, time.monotonic())

    async def _on_roll_call(self) -> None:
        """On the roll call of the nodes that may serve clients until the heartbeat lapses,
        unless this node is leaving."""
        if not self.leaving:
            await self.store.index_add(
                keys.nodes_index(), self.node_id, time.time() + self.timeout_s, cap=MAX_NODES
            )

    async def leave(self) -> bool:
        """This node drains: it takes itself off the roll call, and answers whether another
        node is on it (alive, not draining), that can serve its clients from the store."""
        self.leaving = True
        self.status = LEAVING  # its sessions are other nodes' to take over from now on
        try:
            await self.store.set_key(self.channel, LEAVING, self.timeout_s)
        except Exception as exc:
            self.heartbeats.failed(exc)
        await self.store.index_remove(keys.nodes_index(), self.node_id)
        listed = await self.store.index_page(keys.nodes_index(), limit=2)
        return any(member != self.node_id for member, _ in listed)

    async def alive(self, node_id: str) -> bool:
        return node_id == self.node_id or await self.store.get_key(keys.node(node_id)) is not None

    async def holds_sessions(self, node_id: str) -> bool:
        """Whether node `node_id` is alive and not leaving: its sessions are its own to serve."""
        if node_id == self.node_id:
            return self.status == ALIVE
        return await self.store.get_key(keys.node(node_id)) == ALIVE

    def let_streams_go(self) -> None:
        """This node drains: end every stream it relays that its client may resume elsewhere
        (a GET stream, an SSE answer: its client resumes it, on a node that stays), as it ends
        its own."""
        for scope in self._relayed_streams:
            self._let_go.add(scope)
            scope.cancel()
        self._relayed_streams.clear()

    async def left(self) -> None:
        """This node exits cleanly: its heartbeat goes at once, so no node waits `timeout_s`
        for it (a relay to it fails at once, its sessions are taken over)."""
        self.status = LEAVING
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.timeout_s):
            try:
                await self.store.delete_key(self.channel)
            except Exception as exc:
                self.heartbeats.failed(exc)

    def _receive(self, raw: bytes) -> None:
        """Dispatch one message of this node's channel, or drop it: nothing it holds may end the
        inbox (a parser's recursion limit included)."""
        if len(raw) > self.max_message_bytes:
            self._refused(None, f"it is longer than {self.max_message_bytes} bytes")
            return
        try:
            message = json.loads(raw)
        except (ValueError, RecursionError):
            self._refused(None, "it is not JSON, or nests too deep")
            return
        if not isinstance(message, dict) or not isinstance(message.get("id"), str):
            self._refused(None, "it is not a relay message")
            return
        try:
            self._dispatch(message)
        except Exception as exc:
            self._refused(message["id"], f"it could not be read ({type(exc).__name__})")
            logger.debug("node %s: the message it could not read", self.node_id, exc_info=exc)

    def _dispatch(self, message: dict[str, Any]) -> None:
        kind = message.get("t")
        if kind == "req" and self._task_group is not None:
            opened = self.seal.open(message, time.time())
            if isinstance(opened, str):
                self._refused(message["id"], opened)
            else:
                self._task_group.start_soon(self._serve_relayed, opened)
        elif kind == "gone":
            gone = self._served.get(message["id"])
            if gone is not None and self._opened(message) is not None:
                gone.set()
        elif kind in ("ack", "start", "body"):
            replies = self._replies.get(message["id"])
            if replies is None or (taken := self._opened(message)) is None:
                return
            if not replies.new(taken):
                self._refused(message["id"], f"a {kind!r} message of its answer came again")
                return
            try:
                replies.into.send_nowait(taken)
            except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                logger.warning("relay %s: reader is behind; dropping the relay", message["id"])
                self._replies.pop(message["id"], None)
                replies.into.close()

    def _opened(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """A relay's reply or "gone" message as it was sealed, or None (refused, logged)."""
        opened = self.seal.open_message(message)
        if isinstance(opened, str):
            self._refused(message["id"], f"a {message.get('t')!r} message: {opened}")
            return None
        return opened

    async def _tell_gone(self, owner: str, relay_id: str) -> None:
        """Tell `owner` that the client of a relay it serves is gone (a relay this node let go)."""
        with contextlib.suppress(Exception):
            await self._publish(keys.node(owner), {"t": "gone", "id": relay_id})

    async def _publish(self, channel: str, payload: dict[str, Any]) -> int:
        """Publish a message of a relay under way, sealed (`RelaySeal.seal_message`)."""
        return await self.store.publish(channel, json.dumps(self.seal.seal_message(payload)).encode())

    def _refused(self, relay_id: str | None, why: str) -> None:
        """Drop a message of this node's channel: counted by why, and logged as a warning once per
        why and `WARN_EVERY_S` (each other drop meanwhile at DEBUG)."""
        self.dropped[why] += 1
        level = logging.DEBUG
        if why not in self._warned:
            self._warned[why] = True
            level = logging.WARNING
        logger.log(
            level,
            "node %s: dropped a message of its channel (relay %.32r): %s (%d dropped for this)",
            self.node_id,
            relay_id,
            why,
            self.dropped[why],
        )

    # -- the owner's side ------------------------------------------------------------------
    async def _serve_relayed(self, opened: RelayRequest) -> None:
        """Run a request relayed from another node as if it had arrived here, as its caller."""
        relay_id, reply_to, request = opened.relay_id, opened.reply_to, opened.request
        handler = self._handler
        if handler is None:
            return
        try:
            scope = http_scope(
                str(request.get("method", "GET")),
                str(request.get("scheme", "http")),
                str(request.get("path", "/")),
                _unb64(request.get("query")),
                [(_unb64(k), _unb64(v)) for k, v in request.get("headers", [])],
            )
            scope[RELAYED_FROM] = reply_to
            body = _unb64(request.get("body"))
        except (ValueError, TypeError):
            self._refused(relay_id, "its request is malformed")
            return
        if not seat(scope, opened.caller):
            self._refused(relay_id, "its caller is malformed")
            return
        gone = anyio.Event()
        self._served[relay_id] = gone
        try:
            await self._publish(reply_to, {"t": "ack", "id": relay_id})
        except Exception:
            logger.warning("relay %s: cannot acknowledge", relay_id, exc_info=True)
            self._served.pop(relay_id, None)
            return
        sent = False
        seq = 0
        outbox_in, outbox = anyio.create_memory_object_stream[Message](OUTBOX_MESSAGES)

        async def receive() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(out: Message) -> None:
            # A message is taken whole, or not at all: `send` waits only for room, before it
            # takes it, and what it took goes out (`publish_answer`) however long the store
            # takes. A writer that gives up a send under way (a stalled write: the engine then
            # writes it again, `engine/delivery.py`) has sent nothing of it.
            if not gone.is_set():
                await outbox_in.send(out)

        async def publish_answer() -> None:
            async for out in outbox:
                if not gone.is_set():  # (else nobody reads it: dropped)
                    await publish(out)

        async def publish(out: Message) -> None:
            nonlocal seq
            if out["type"] == "http.response.start":
                headers = [[_b64(k), _b64(v)] for k, v in out.get("headers", [])]
                await answer({"t": "start", "id": relay_id, "status": out["status"], "headers": headers})
            elif out["type"] == "http.response.body":
                # In parts of at most PART_BYTES: every message stays within `max_message_bytes`.
                chunk: bytes = out.get("body", b"")
                more = bool(out.get("more_body", False))
                for at in range(0, max(len(chunk), 1), PART_BYTES):
                    seq += 1
                    part = chunk[at : at + PART_BYTES]
                    last = at + PART_BYTES >= len(chunk)
                    payload = {
                        "t": "body",
                        "id": relay_id,
                        "seq": seq,
                        "body": _b64(part),
                        "more": more or not last,
                    }
                    if not await answer(payload):
                        return

        async def answer(payload: dict[str, Any]) -> bool:
            if gone.is_set():
                return False
            try:
                await self._publish(reply_to, payload)
            except Exception:
                logger.warning("relay %s: cannot answer", relay_id, exc_info=True)
                gone.set()
                return False
            return True

        async def serve() -> None:
            try:
                await handler(scope, receive, send)
            except Exception:
                logger.exception("relay %s: the relayed request failed", relay_id)
            finally:
                outbox_in.close()  # (what it took is published first)

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(publish_answer)
                await serve()
        finally:
            outbox.close()
            self._served.pop(relay_id, None)

    # -- the receiving node's side ---------------------------------------------------------
    async def relay(
        self, owner: str, scope: Scope, receive: Receive, send: Send, body: bytes, *, give_back: bool = False
    ) -> bool:
        """Send this request to `owner` and stream its answer back to our client. True once
        answered; with `give_back`, False when `owner` did not take it (nothing was sent: the
        caller serves it another way), else that is a 503."""
        relay_id = secrets.token_hex(8)
        replies_in, replies = anyio.create_memory_object_stream[dict[str, Any]](1024)
        self._replies[relay_id] = _Replies(replies_in)
        headers = [[_b64(k), _b64(v)] for k, v in scope["headers"] if k not in _HOP_BY_HOP]
        request = {
            "method": scope["method"],
            "scheme": scope.get("scheme", "http"),
            "path": scope["path"],
            "query": _b64(scope.get("query_string", b"")),
            "headers": headers,
            "body": _b64(body),
        }
        message = self.seal.seal(
            relay_id,
            to=owner,
            reply_to=self.channel,
            request=request,
            caller=describe(scope, self.principal),
            now=time.time(),
        )
        started = False
        sse = False
        acknowledged = False
        ended = False
        # Set instead of raised inside the task group, which would wrap it in an ExceptionGroup.
        owner_lost = False
        try:
            if await self.store.publish(keys.node(owner), json.dumps(message).encode()) == 0:
                raise LookupError("nobody listens")
            async with anyio.create_task_group() as tg:
                if scope["method"] == "GET":
                    self._relayed_streams.add(tg.cancel_scope)

                async def tell_owner_when_gone() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    await self._publish(keys.node(owner), {"t": "gone", "id": relay_id})
                    tg.cancel_scope.cancel()

                tg.start_soon(tell_owner_when_gone)
                expected = 1
                while True:
                    reply: dict[str, Any] | None = None
                    with anyio.move_on_after(self.timeout_s):
                        reply = await replies.receive()
                    if reply is None:
                        # Not acknowledged in time: the owner did not take the request. Once
                        # acknowledged, it may take long to start its answer (a JSON answer
                        # comes at the end): keep waiting while it is alive.
                        if not acknowledged or not await self.alive(owner):
                            owner_lost = True
                            break
                        continue
                    if reply["t"] == "ack":
                        acknowledged = True
                        continue
                    if reply["t"] == "start" and not started:
                        started = True
                        head = [(_unb64(k), _unb64(v)) for k, v in reply.get("headers", [])]
                        sse = any(
                            k.lower() == b"content-type" and v.startswith(b"text/event-stream")
                            for k, v in head
                        )
                        await send(
                            {
                                "type": "http.response.start",
                                "status": int(reply.get("status", 502)),
                                "headers": head,
                            }
                        )
                        continue
                    if reply["t"] != "body" or not started:
                        continue
                    if reply.get("seq") != expected:  # (a copy of one taken is dropped before)
                        logger.warning("relay %s: a part of the answer was lost; ending it", relay_id)
                        await send({"type": "http.response.body", "body": b"", "more_body": False})
                        ended = True
                        break
                    expected += 1
                    more = bool(reply.get("more"))
                    part = _unb64(reply.get("body"))
                    await send({"type": "http.response.body", "body": part, "more_body": more})
                    if not more:
                        ended = True
                        break
                    if sse and b"\nid:" in b"\n" + part:
                        # Its client has an event id to resume from: a drain here may let it go.
                        self._relayed_streams.add(tg.cancel_scope)
                tg.cancel_scope.cancel()
            # (A drain that let it go once its answer was complete, as this task left: nothing to end.)
            let_go = tg.cancel_scope in self._let_go and not ended
            self._let_go.discard(tg.cancel_scope)
            self._relayed_streams.discard(tg.cancel_scope)
            if let_go:
                # Told from the node's own tasks: the client's call ends now, and no server's
                # graceful timeout finds it waiting on the store (it would cancel it).
                if self.running and self._task_group is not None:
                    self._task_group.start_soon(self._tell_gone, owner, relay_id)
                else:
                    await self._tell_gone(owner, relay_id)
            if owner_lost or let_go:
                raise LookupError("the owner died, or this node let the relay go")
        except LookupError:
            if started:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            elif give_back and not acknowledged:
                logger.info("relay %s: node %s did not answer; serving the request here", relay_id, owner)
                return False
            else:
                logger.warning("relay %s: node %s did not answer", relay_id, owner)
                await send_json(
                    send,
                    503,
                    error_message(None, STREAM_ERROR, "the server holding this session is not answering"),
                    [(b"retry-after", b"1")],
                )
        finally:
            self._replies.pop(relay_id, None)
            replies_in.close()
        return True
