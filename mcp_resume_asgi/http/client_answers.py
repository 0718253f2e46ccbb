"""SEP-1335: a client's answers to the server's requests, and the stream that continues after them.

A stream that asked the client something (elicitation, sampling, roots) waits for
its input; the client POSTs its answers to the stream's Link URL. They go to the
app as the client would have sent them, each at most once (a retried POST must
not answer twice), and the reply continues the stream where the client left it.
Answers POSTed to the endpoint instead (what stock clients do) are noted here too.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from mcp_resume_asgi.core import resume
from mcp_resume_asgi.core.resume import Resume
from mcp_resume_asgi.engine.port import CallApp, Serving
from mcp_resume_asgi.engine.services import SSE_HEADERS
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import Store, StreamMeta
from mcp_resume_asgi.telemetry import NO_OPERATION, Operation
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.asgi import Receive, Scope, Send
from mcp_resume_asgi.wire.replies import send_bytes, send_json
from mcp_resume_asgi.wire.sse import encode_payload

__all__ = ["AnswerPort", "ClientAnswers", "note_answered", "send_lost"]

logger = logging.getLogger(__name__)


class AnswerPort(Serving, Protocol):
    """What the answers use of the engine's port: serving the stream that goes on after them,
    and posting them to the app as the client would."""

    @property
    def call_app(self) -> CallApp: ...


class ClientAnswers:
    """Delivers a client's answers to the app's requests, and notes them answered."""

    def __init__(self, store: Store, port: AnswerPort) -> None:
        self.store = store
        self.port = port

    async def deliver(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        stream_id: str,
        answers: list[dict[str, Any]],
        after_seq: int | None,
        op: Operation = NO_OPERATION,
    ) -> None:
        """SEP-1335: answers POSTed to the Link URL go to the app; the reply continues the stream
        (`op`: its span, linked to the request that made the stream once the caller is admitted)."""
        meta = await self.store.get_stream(stream_id)
        meta = await self.port.admitted(scope, send, meta)
        if meta is None:
            return
        op.created_by(meta.trace, stream_id=stream_id)
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
            status, body = await self.port.call_app(
                scope, meta.path, meta.session_id, meta.protocol_version, p.dumps(answer)
            )
            if status >= 300:
                logger.warning("stream %s: the app refused a client answer with HTTP %s", stream_id, status)
                await send_bytes(send, status, body, content_type=b"application/json")
                return
            await self.answered(meta.session_id, answer["id"], stream_id)
        updated = await self.store.update_stream(stream_id, returning=True, turn=meta.turn + 1)
        if updated is None:
            await send_json(send, 404, p.error_message(None, p.INVALID_REQUEST, "unknown or expired stream"))
            return
        said = resume.answer(updated, after_seq, via_link=True)
        if said.kind is Resume.LOST:
            await send_lost(send, updated, said.after_seq)
        elif said.kind is Resume.NOTHING:
            await send_bytes(send, 204)
        else:
            await self.port.serve(scope, receive, send, updated, said.after_seq)

    async def answered(self, session_id: str | None, message_id: Any, stream_id: str | None = None) -> None:
        """Note that a server-to-client request was answered (by any route)."""
        await note_answered(self.store, session_id, message_id, stream_id)


async def send_lost(send: Send, meta: StreamMeta, after_seq: int) -> None:
    """`Resume.LOST`: one error event on the request's stream, as for a gap, then its end - the
    client learns that events are missing instead of a 400 blaming its `Last-Event-ID`."""
    headers = list(SSE_HEADERS)
    if meta.session_id is not None:
        headers.append((b"mcp-session-id", meta.session_id.encode()))
    text = resume.lost_text(meta, after_seq)
    frame = encode_payload(p.dumps(p.error_message(meta.request_id, p.STREAM_ERROR, text)), b"message")
    await send_bytes(send, 200, frame, headers)


async def note_answered(
    store: Store, session_id: str | None, message_id: Any, stream_id: str | None = None
) -> None:
    """Note that a server-to-client request was answered (by any route: the Tasks layer's
    `tasks/update` too), so a resumed stream no longer waits for it."""
    if stream_id is None:
        if session_id is None:
            return
        stream_id = await store.get_key(keys.client_answer(session_id, message_id))
        if stream_id is None:
            return
    meta = await store.get_stream(stream_id)
    if meta is None:
        return
    pending = [entry for entry in meta.pending_inputs if entry[0] != message_id]
    if len(pending) != len(meta.pending_inputs):
        await store.update_stream(stream_id, pending_inputs=pending)
    if session_id is not None:
        await store.delete_key(keys.client_answer(session_id, message_id))
