"""What the engine remembers of a session: its negotiated revision and declared capabilities.

Later requests of the session are governed by the revision it negotiated (clients
are known to send an older `MCP-Protocol-Version` header than that), and with
several nodes the session's owner is recorded so requests can be relayed there.

What makes the session (its `initialize`, the state requests that followed) is recorded
too, sealed (`wire/session_record.py`): a node that takes the session over replays it into
its own app (`adoption.py`).

Every request reads its session's revision (and, with feature layers, its capabilities):
each node keeps what it read, for a while (`Sessions.info`), instead of asking the store
each time (a round trip on Redis).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import SessionInfo, Store
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.asgi import Scope
from mcp_resume_asgi.wire.scope_keys import DECLARED_CAPABILITIES
from mcp_resume_asgi.wire.session_record import SessionRecord, open_record, seal_record
from mcp_resume_asgi.wire.tokens import TokenSigner

__all__ = ["CACHE_MAX_SESSIONS", "CACHE_TTL_S", "SessionRequest", "Sessions"]

logger = logging.getLogger(__name__)

#: How long a node keeps a session's revision and capabilities as read, and how many it keeps.
CACHE_TTL_S = 30.0
CACHE_MAX_SESSIONS = 10_000


class SessionRequest(Protocol):
    """The `initialize` request whose answer opened a session, as far as the record needs it."""

    @property
    def session_id(self) -> str | None: ...
    @property
    def scope(self) -> Scope: ...
    @property
    def body(self) -> bytes: ...
    @property
    def principal(self) -> str | None: ...


class Sessions:
    """Records the sessions the app's `initialize` answers open (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        *,
        ttl_s: float,
        owner: str | None,
        store_outage: Callable[[BaseException], bool],
        cache_ttl_s: float = CACHE_TTL_S,
        cache_max: int = CACHE_MAX_SESSIONS,
        clock: Callable[[], float] = time.monotonic,
        signer: TokenSigner | None = None,
    ) -> None:
        self.store = store
        self.signer = signer if signer is not None else TokenSigner(None)
        self.ttl_s = ttl_s
        self.owner = owner
        """This node's id where several nodes share the store (the session's requests are
        relayed to it), else None."""
        self.store_outage = store_outage
        self.cache_ttl_s = cache_ttl_s
        self.cache_max = max(1, cache_max)
        self.clock = clock
        self._cache: dict[str, tuple[SessionInfo, float]] = {}
        """Session records as read here, with when each stops being used (oldest first)."""

    async def info(self, session_id: str) -> SessionInfo | None:
        """The session's record: as read here less than `cache_ttl_s` ago, else from the store.

        Only what the session negotiated is kept - its revision and declared capabilities,
        fixed at `initialize` - so a copy is never wrong while the session lives. It may
        outlive the session: one ended here is forgotten at once (`forget`); one ended on
        another node, or expired in the store, is still read here for at most `cache_ttl_s`,
        and a request naming it meanwhile is framed by the revision it had negotiated instead
        of its header's. That grants nothing: whether the session is valid is still the app's
        to say (it refuses the request, 404), and no stream is found through this record (a
        resume reads the stream's own record and asks the app, `http/resume.py`). What needs
        the session to exist now (the feature layers' refusals, the Tasks layer) asks the
        store, not this. A session the store does not know is not kept (it may be recorded a
        moment later, on another node).
        """
        info = self.cached(session_id)
        if info is not None:
            return info
        info = await self.store.get_session(session_id)
        if info is not None:
            self._keep(info, self.clock())
        return info

    def cached(self, session_id: str) -> SessionInfo | None:
        """The session's record as read here less than `cache_ttl_s` ago, or None (`info` asks
        the store then): without a coroutine, as most requests of a session find it."""
        cache = self._cache
        item = cache.get(session_id)
        if item is not None:
            if item[1] > self.clock():
                return item[0]
            del cache[session_id]
        return None

    def forget(self, session_id: str) -> None:
        """The session ended here: its record is no longer used (`info` asks the store)."""
        self._cache.pop(session_id, None)

    def _keep(self, info: SessionInfo, now: float) -> None:
        cache = self._cache
        cache.pop(info.session_id, None)
        while len(cache) >= self.cache_max:
            # The oldest entry goes first (a dict keeps insertion order; a re-read moves to the end).
            del cache[next(iter(cache))]
        cache[info.session_id] = (info, now + self.cache_ttl_s)

    async def remember(self, hosted: SessionRequest, answer: Any) -> None:
        """Record the session an `initialize` answer opened (a store outage only costs a warning)."""
        try:
            await self._store(hosted, answer)
        except Exception as exc:
            if not self.store_outage(exc):
                raise
            # The session works without it: later requests take the revision from their header.
            logger.warning("session %s: not recorded, the store is unavailable", hosted.session_id)

    async def _store(self, hosted: SessionRequest, answer: Any) -> None:
        if not isinstance(answer, dict) or hosted.session_id is None:
            return
        result = answer.get("result")
        version = result.get("protocolVersion") if isinstance(result, dict) else None
        version = p.valid_version(version) if isinstance(version, str) else None
        if version is None:
            return
        capabilities: dict[str, Any] = {}
        declared = hosted.scope.get(DECLARED_CAPABILITIES)
        if isinstance(declared, dict):  # a layer took its own part out of what the app saw
            capabilities = declared
        else:
            with contextlib.suppress(ValueError):
                request = json.loads(hosted.body)
                params = request.get("params") if isinstance(request, dict) else None
                requested = params.get("capabilities") if isinstance(params, dict) else None
                if isinstance(requested, dict):
                    capabilities = requested
        info = SessionInfo(
            session_id=hosted.session_id,
            protocol_version=version,
            principal=hosted.principal,
            capabilities=capabilities,
        )
        await self.store.put_session(info, self.ttl_s)
        self._keep(info, self.clock())
        initialize = hosted.body.decode("utf-8", "surrogateescape")
        record = SessionRecord(hosted.session_id, version, hosted.principal, initialize)
        await self.write_record(record)
        if self.owner is not None:
            await self.store.set_key(keys.session_owner(hosted.session_id), self.owner, self.ttl_s)
        logger.debug("session %s negotiated %s", hosted.session_id, version)

    async def record(self, session_id: str) -> SessionRecord | None:
        """The session's sealed record, if the store holds one that opens (else None: unknown)."""
        return open_record(self.signer, session_id, await self.store.get_key(keys.session_record(session_id)))

    async def write_record(self, record: SessionRecord) -> None:
        sealed = seal_record(self.signer, record)
        if sealed is None:
            logger.warning(
                "session %s: its record is too large to keep; another node cannot take it over",
                record.session_id,
            )
            return
        await self.store.set_key(keys.session_record(record.session_id), sealed, self.ttl_s)

    async def note_state(self, session_id: str, principal: str | None, message: dict[str, Any]) -> None:
        """A state request of the session (`STATE_METHODS`) the app accepted from `principal`:
        kept in its record, if it is the session's principal (a store outage costs a warning)."""
        try:
            record = await self.record(session_id)
            if record is None or record.principal != principal:
                return
            changed = record.applied(message)
            if changed is not None:
                await self.write_record(changed)
        except Exception as exc:
            if not self.store_outage(exc):
                raise
            logger.warning(
                "session %s: its state change is not recorded, the store is unavailable", session_id
            )
