"""Adoption: a node takes over a 2025-era session whose node is gone.

A session lives in the app instance that answered its `initialize`. When that node is gone
(dead by its heartbeat, draining, or this very node in an earlier life: a restarted process
has a new node id), a request of the session reaching another node would be answered 404 by
its app. Instead that node *adopts* the session: it replays the session's record
(`wire/session_record.py`: the client's `initialize`, `notifications/initialized`, the state
requests) into its own app, as the caller, and from then on maps the id the client knows
(which never changes) to the id its app gave (`SessionAliases`, around the app): the
`Mcp-Session-Id` of every request of the session going in, and of every answer coming out.
The engine, the store and the client see only the client's id.

One adoption per loss, fleet-wide: the node that adopts takes `keys.session_adoption(session,
lost node)` with `add_key` first; a node that finds it taken relays the request to the winner
(which, adopting meanwhile, serves it once it is done), or, if the winner is gone too, claims
the session from it in turn. Only the session's principal causes an adoption: the caller is
who the wrapper's principal function names, else who the app's own auth names (a `ping`,
`Admission.identify`); anyone else, and a session without a record that opens (unknown, or
forged), is served as if no wrapper were there: by the app, which knows no such session (404).

What cannot move: whatever the app keeps in memory per session (beyond what the record
replays) is not in the adopting node's app.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable

import anyio

from mcp_resume_asgi.engine.admission import Admission, post_to_app
from mcp_resume_asgi.engine.cluster import Node
from mcp_resume_asgi.engine.port import Refusal
from mcp_resume_asgi.engine.sessions import Sessions
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import Store
from mcp_resume_asgi.telemetry import OFF, Telemetry
from mcp_resume_asgi.wire.asgi import ASGIApp, Message, Receive, Scope, Send
from mcp_resume_asgi.wire.headers import header
from mcp_resume_asgi.wire.principal import PrincipalOf

__all__ = ["MAX_ADOPTED", "MAX_CLAIM_HOPS", "Adoptions", "SessionAliases"]

logger = logging.getLogger(__name__)

#: The most sessions one node keeps adopted (the oldest mapping goes first past it).
MAX_ADOPTED = 100_000
#: How many gone adopters in a row a node follows before it gives up on a session's claim.
MAX_CLAIM_HOPS = 4
_SESSION_HEADER = b"mcp-session-id"


class SessionAliases:
    """Wraps the app: an adopted session's id, as the client knows it, is the app's own id here
    (see the module docstring). Requests of other sessions pass untouched."""

    def __init__(self, app: ASGIApp, max_adopted: int = MAX_ADOPTED) -> None:
        self.app = app
        self.max_adopted = max_adopted
        self.app_ids: dict[str, str] = {}
        """The app's session id here, by the id the client knows (oldest first)."""

    def add(self, client_id: str, app_id: str) -> None:
        self.app_ids.pop(client_id, None)
        while len(self.app_ids) >= self.max_adopted:
            del self.app_ids[next(iter(self.app_ids))]
        self.app_ids[client_id] = app_id

    def forget(self, client_id: str) -> None:
        self.app_ids.pop(client_id, None)

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        """The app's own call for every request but an adopted session's (no frame of ours)."""
        if not self.app_ids or scope["type"] != "http":
            return self.app(scope, receive, send)
        client_id = header(scope, _SESSION_HEADER)
        app_id = self.app_ids.get(client_id) if client_id is not None else None
        if client_id is None or app_id is None:
            return self.app(scope, receive, send)
        return self._aliased(client_id, app_id, scope, receive, send)

    async def _aliased(self, client_id: str, app_id: str, scope: Scope, receive: Receive, send: Send) -> None:
        inner = dict(scope)
        inner["headers"] = [(k, app_id.encode() if k == _SESSION_HEADER else v) for k, v in scope["headers"]]

        def sync() -> None:
            # What the app's own layers set on the scope (its auth's `user`) is seen outside too,
            # as when the app gets the scope itself; the headers stay the client's.
            for key, value in inner.items():
                if key != "headers" and scope.get(key) is not value:
                    scope[key] = value

        async def aliased_receive() -> Message:
            sync()
            return await receive()

        async def aliased_send(message: Message) -> None:
            sync()
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = [
                    (k, client_id.encode() if k == _SESSION_HEADER and v == app_id.encode() else v)
                    for k, v in message.get("headers", [])
                ]
            await send(message)

        await self.app(inner, aliased_receive, aliased_send)


class Adoptions:
    """This node's adoptions of sessions whose node is gone (see the module docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        aliases: SessionAliases,
        *,
        sessions: Sessions,
        store: Store,
        node_id: str,
        node: Node | None,
        principal: PrincipalOf,
        admission: Admission,
        telemetry: Telemetry = OFF,
    ) -> None:
        self.app = app
        self.aliases = aliases
        self.sessions = sessions
        self.store = store
        self.node_id = node_id
        self.node = node
        self.principal = principal
        self.admission = admission
        self.telemetry = telemetry
        self._pending: dict[str, anyio.Event] = {}

    def holds(self, session_id: str) -> bool:
        """Whether this node adopted the session (its app holds it under another id)."""
        return session_id in self.aliases.app_ids

    async def settled(self, session_id: str) -> None:
        """Wait for this node's adoption of the session, if one is under way."""
        pending = self._pending.get(session_id)
        if pending is not None:
            await pending.wait()

    def forget(self, session_id: str) -> None:
        """The session ended: its mapping here goes."""
        self.aliases.forget(session_id)

    async def take_over(self, scope: Scope, send: Send, session_id: str, lost: str) -> str | None:
        """A request of `session_id`, whose node `lost` is gone, reached this node. Returns None
        to serve it here (adopted here, or not this caller's to adopt: the app refuses it),
        a node id to relay it to (the node that adopted it), or "" when it was answered (the
        app's auth refused the caller)."""
        record = await self.sessions.record(session_id)
        if record is None:
            return None  # unknown, expired, or forged: the app answers it (404)
        version = record.protocol_version
        caller = self.principal(scope)
        if caller != record.principal:
            found = await self.admission.identify(scope, scope["path"], version)
            if isinstance(found, Refusal):
                await found.send(send)
                return ""
            caller = found
        if caller != record.principal:
            logger.info("session %s: not taken over for a caller it is not bound to", session_id)
            return None
        for _ in range(MAX_CLAIM_HOPS):
            winner = await self.store.add_key(
                keys.session_adoption(session_id, lost), self.node_id, self.sessions.ttl_s
            )
            if winner is None:
                await self._adopt(scope, session_id, lost)
                return None
            if winner == self.node_id:
                await self.settled(session_id)
                return None
            if self.node is not None and await self.node.holds_sessions(winner):
                return winner
            lost = winner  # the winner is gone too: its adoption is the one to take over
        logger.warning(
            "session %s: adopted and lost %d times over; not taken over", session_id, MAX_CLAIM_HOPS
        )
        return None

    async def for_rerun(self, scope: Scope, session_id: str) -> None:
        """A lost call of the session runs again here (`Engine.rerun`, `scope`: its stored
        request, its caller seated): the session is taken over here first if its node is gone
        too; if another node holds it now, this node's app opens it for the re-run alone (the
        session stays where it is)."""
        await self.settled(session_id)
        if self.holds(session_id):
            return
        owner = await self.store.get_key(keys.session_owner(session_id))
        if owner is None or owner == self.node_id:
            return
        record = await self.sessions.record(session_id)
        if record is None or self.principal(scope) != record.principal:
            return
        lost = owner
        for _ in range(MAX_CLAIM_HOPS):
            if self.node is not None and await self.node.holds_sessions(lost):
                await self._adopt(scope, session_id, lost, moved=False)
                return
            winner = await self.store.add_key(
                keys.session_adoption(session_id, lost), self.node_id, self.sessions.ttl_s
            )
            if winner is None:
                await self._adopt(scope, session_id, lost)
                return
            if winner == self.node_id:
                await self.settled(session_id)
                return
            lost = winner

    async def _adopt(self, scope: Scope, session_id: str, lost: str, *, moved: bool = True) -> None:
        pending = self._pending[session_id] = anyio.Event()
        try:
            await self._replay(scope, session_id, lost, moved, time.monotonic())
        finally:
            del self._pending[session_id]
            pending.set()

    async def _replay(self, scope: Scope, session_id: str, lost: str, moved: bool, began: float) -> None:
        record = await self.sessions.record(session_id)
        if record is None:
            return
        path, version = scope["path"], record.protocol_version
        reply = await post_to_app(self.app, scope, path, None, version, record.initialize.encode())
        app_id = next((v.decode("latin-1") for k, v in reply.headers if k.lower() == _SESSION_HEADER), None)
        if reply.status >= 400 or app_id is None:
            logger.warning(
                "session %s: its app refused its initialize on adoption (HTTP %s); not taken over",
                session_id,
                reply.status,
            )
            return
        self.aliases.add(session_id, app_id)
        for message in record.replay():
            answer = await post_to_app(
                self.app, scope, path, session_id, version, json.dumps(message).encode()
            )
            if answer.status >= 400:
                logger.warning(
                    "session %s: its app refused %s on adoption (HTTP %s)",
                    session_id,
                    message["method"],
                    answer.status,
                )
        if not moved:
            logger.info("session %s: opened here for a re-run; it stays on node %s", session_id, lost)
            return
        await self.store.set_key(keys.session_owner(session_id), self.node_id, self.sessions.ttl_s)
        self.telemetry.session_adopted()
        logger.info(
            "session %s: taken over from node %s, now on node %s (replayed in %.3f s)",
            session_id,
            lost,
            self.node_id,
            time.monotonic() - began,
        )
