"""What the engine remembers of a session: its negotiated revision and declared capabilities.

Later requests of the session are governed by the revision it negotiated (clients
are known to send an older `MCP-Protocol-Version` header than that), and with
several nodes the session's owner is recorded so requests can be relayed there.
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import TYPE_CHECKING, Any

from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import SessionInfo
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.scope_keys import DECLARED_CAPABILITIES

if TYPE_CHECKING:
    from mcp_resume_asgi.engine import Engine
    from mcp_resume_asgi.hosted import HostedStream

logger = logging.getLogger(__name__)


class Sessions:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def remember(self, hosted: HostedStream, answer: Any) -> None:
        """Record the session an `initialize` answer opened (a store outage only costs a warning)."""
        try:
            await self._store(hosted, answer)
        except Exception as exc:
            if not self.engine.store_outage(exc):
                raise
            # The session works without it: later requests take the revision from their header.
            logger.warning("session %s: not recorded, the store is unavailable", hosted.session_id)

    async def _store(self, hosted: HostedStream, answer: Any) -> None:
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
        engine = self.engine
        await engine.store.put_session(info, engine.session_ttl_s)
        if engine.node is not None:
            await engine.store.set_key(
                keys.session_owner(hosted.session_id), engine.node_id, engine.session_ttl_s
            )
        logger.debug("session %s negotiated %s", hosted.session_id, version)
