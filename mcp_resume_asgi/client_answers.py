"""SEP-1335: a client's answers to the server's requests, and the stream that continues after them.

A stream that asked the client something (elicitation, sampling, roots) waits for
its input; the client POSTs its answers to the stream's Link URL. They go to the
app as the client would have sent them, each at most once (a retried POST must
not answer twice), and the reply continues the stream where the client left it.
Answers POSTed to the endpoint instead (what stock clients do) are noted here too.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from starlette.types import Receive, Scope, Send

from mcp_resume_asgi import protocol as p
from mcp_resume_asgi._http import send_bytes, send_json
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import StreamMeta, StreamState

if TYPE_CHECKING:
    from mcp_resume_asgi.engine import Engine

logger = logging.getLogger(__name__)


class ClientAnswers:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def deliver(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        stream_id: str,
        answers: list[dict[str, Any]],
        after_seq: int | None,
    ) -> None:
        """SEP-1335: answers POSTed to the Link URL go to the app; the reply continues the stream."""
        meta = await self.engine.store.get_stream(stream_id)
        meta = await self.engine.admitted(scope, send, meta)
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
            status, body = await self.engine.call_app(
                scope, meta.path, meta.session_id, meta.protocol_version, p.dumps(answer)
            )
            if status >= 300:
                logger.warning("stream %s: the app refused a client answer with HTTP %s", stream_id, status)
                await send_bytes(send, status, body, content_type=b"application/json")
                return
            await self.answered(meta.session_id, answer["id"], stream_id)
        updated = await self.engine.store.update_stream(stream_id, returning=True, turn=meta.turn + 1)
        if updated is None:
            await send_json(send, 404, p.error_message(None, p.INVALID_REQUEST, "unknown or expired stream"))
            return
        start = updated.delivered_seq if after_seq is None else after_seq
        if start > updated.last_seq:
            await send_json(
                send, 400, p.error_message(None, p.INVALID_REQUEST, "Last-Event-ID is ahead of the stream")
            )
            return
        if nothing_to_send(updated, start):
            await send_bytes(send, 204)
            return
        await self.engine.serve_stream(scope, receive, send, updated, start)

    async def answered(self, session_id: str | None, message_id: Any, stream_id: str | None = None) -> None:
        """Note that a server-to-client request was answered (by any route)."""
        if stream_id is None:
            if session_id is None:
                return
            stream_id = await self.engine.store.get_key(keys.client_answer(session_id, message_id))
            if stream_id is None:
                return
        meta = await self.engine.store.get_stream(stream_id)
        if meta is None:
            return
        pending = [entry for entry in meta.pending_inputs if entry[0] != message_id]
        if len(pending) != len(meta.pending_inputs):
            await self.engine.store.update_stream(stream_id, pending_inputs=pending)
        if session_id is not None:
            await self.engine.store.delete_key(keys.client_answer(session_id, message_id))


def nothing_to_send(meta: StreamMeta, after_seq: int) -> bool:
    """SEP-1335's 204: the stream is over for this client, or it waits for the client's input."""
    if meta.final_seq is not None and after_seq >= meta.final_seq:
        return True
    if meta.state is not StreamState.RUNNING and after_seq >= meta.last_seq:
        return True
    return meta.waiting_for_input and after_seq >= meta.last_seq
