"""What the engine remembers of a session: its negotiated revision and declared capabilities.

Later requests of the session are governed by the revision it negotiated (clients
are known to send an older `MCP-Protocol-Version` header than that), and with
several nodes the session's owner is recorded so requests can be relayed there.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any, Protocol

from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import SessionInfo, Store
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.asgi import Scope
from mcp_resume_asgi.wire.scope_keys import DECLARED_CAPABILITIES

__all__ = ["SessionRequest", "Sessions"]

logger = logging.getLogger(__name__)


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
    ) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self.owner = owner
        """This node's id where several nodes share the store (the session's requests are
        relayed to it), else None."""
        self.store_outage = store_outage

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
        if self.owner is not None:
            await self.store.set_key(keys.session_owner(hosted.session_id), self.owner, self.ttl_s)
        logger.debug("session %s negotiated %s", hosted.session_id, version)
