"""A resumed GET: `Last-Event-ID` on the endpoint, and the stream URL of every SSE answer.

A client that lost an answer comes back either with a GET carrying the `Last-Event-ID` of
the last event it got, or on `<mcp>/streams/<token>`, the `Link rel="stream"` URL of every
SSE answer (SEP-1335) - from its start, or after a `Last-Event-ID` of that same stream - on
whichever node it lands. What it is answered (204 nothing more, 410 dropped, a
gap, the events the store lost, or the stream) is decided in `core/resume.py`; the stream itself is served by the
engine (`EnginePort.serve`). A `POST` to the stream URL carries the client's answers to the
server's requests on that stream (`client_answers.py`); on a cluster it goes to the node
running the stream. Ids and tokens are signed: a forged or foreign one is refused before
the store is touched.

Each is reported (`telemetry`) as a short SERVER span - `stream/resume` (marked a poll, for a
sampler) or `stream/answer`: there is no JSON-RPC method to name them - linked to the request
that created the stream once the caller is admitted to it, and counted by outcome.
"""

from __future__ import annotations

from typing import Protocol

from mcp_resume_asgi.core import resume
from mcp_resume_asgi.core.resume import Resume
from mcp_resume_asgi.core.stream import Reason
from mcp_resume_asgi.engine.cluster import Node
from mcp_resume_asgi.engine.port import Serving
from mcp_resume_asgi.http.bodies import read_body_or_refuse
from mcp_resume_asgi.http.client_answers import ClientAnswers, send_lost
from mcp_resume_asgi.store.base import Store
from mcp_resume_asgi.telemetry import Operation, Telemetry
from mcp_resume_asgi.telemetry.names import ResumeOutcome
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.asgi import Receive, Scope, Send
from mcp_resume_asgi.wire.headers import header, header_count, is_json
from mcp_resume_asgi.wire.replies import send_bytes, send_json, send_jsonrpc_error
from mcp_resume_asgi.wire.scope_keys import RELAYED_FROM
from mcp_resume_asgi.wire.tokens import TokenSigner

__all__ = ["ANSWER", "MAX_ANSWERS", "RESUME", "ResumePort", "Resumes"]

#: The most answers one POST may carry.
MAX_ANSWERS = 100
#: The `mcp.method.name` of a resumed GET, and of a POST of answers to a stream URL.
RESUME = "stream/resume"
ANSWER = "stream/answer"


class ResumePort(Serving, Protocol):
    """What the resumes use of the engine's port: serving, and reporting each resume."""

    @property
    def telemetry(self) -> Telemetry: ...


class Resumes:
    """Serves the resumed GETs and the stream URLs of one `ResumeMiddleware`."""

    def __init__(
        self,
        port: ResumePort,
        *,
        store: Store,
        signer: TokenSigner,
        node: Node | None,
        answers: ClientAnswers,
        max_body_bytes: int,
    ) -> None:
        self.port = port
        self.store = store
        self.signer = signer
        self.node = node
        self.answers = answers
        self.max_body_bytes = max_body_bytes

    async def last_event_id(self, scope: Scope, receive: Receive, send: Send, last_event_id: str) -> None:
        """GET on the endpoint with a `Last-Event-ID`: the stream that id names, after it."""
        with self.port.telemetry.operation(scope, RESUME, poll=True) as op:
            await self._last_event_id(scope, receive, op.watch(send), last_event_id, op)

    async def _last_event_id(
        self, scope: Scope, receive: Receive, send: Send, last_event_id: str, op: Operation
    ) -> None:
        telemetry = self.port.telemetry
        if header_count(scope, b"last-event-id") > 1:
            telemetry.resumed(ResumeOutcome.REFUSED)
            await send_jsonrpc_error(send, 400, p.INVALID_REQUEST, "more than one Last-Event-ID header")
            return
        parsed = self.signer.parse_event_id(last_event_id.strip())
        if parsed is None:
            telemetry.resumed(ResumeOutcome.REFUSED)
            await send_jsonrpc_error(
                send, 400, p.INVALID_REQUEST, "Last-Event-ID is not an event id of this server"
            )
            return
        await self.resume(scope, receive, send, parsed[0], parsed[1], via_link=False, op=op)

    async def resume(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        stream_id: str,
        after_seq: int | None,
        *,
        via_link: bool,
        op: Operation,
    ) -> None:
        """The stream after `after_seq` (None: a link GET without `Last-Event-ID`), if the app
        admits this request to it; else what `core/resume.py` says instead."""
        telemetry = self.port.telemetry
        meta = await self.store.get_stream(stream_id)
        meta = await self.port.admitted(scope, send, meta)
        if meta is None:
            telemetry.resumed(ResumeOutcome.REFUSED)
            return
        # Its own stream (admitted): the span may name it and link to the request that made it.
        op.created_by(meta.trace, stream_id=stream_id)
        said = resume.answer(meta, after_seq, via_link=via_link)
        if said.kind is Resume.LOST:
            telemetry.resumed(ResumeOutcome.GAP)
            await send_lost(send, meta, said.after_seq)
        elif said.kind is Resume.GONE:
            telemetry.resumed(ResumeOutcome.GAP)
            await send_json(
                send,
                410,
                p.error_message(None, p.STREAM_ERROR, "cannot resume: events after Last-Event-ID were lost"),
            )
        elif said.kind is Resume.NOTHING:
            telemetry.resumed(ResumeOutcome.NOTHING)
            await send_bytes(send, 204)
        else:
            # (A gap is found before serving - `core/resume.py`, as the engine asks it - or while.)
            gap = resume.from_cursor(meta, said.after_seq) is not Resume.SERVE
            served = await self.port.serve(scope, receive, send, meta, said.after_seq)
            gap = gap or (served is not None and served[0] == Reason.GAP)
            telemetry.resumed(ResumeOutcome.GAP if gap else ResumeOutcome.REPLAYED)

    async def stream_url(self, scope: Scope, receive: Receive, send: Send, token: str) -> None:
        """`<mcp>/streams/<token>`: GET resumes the stream, POST carries the client's answers."""
        get = scope["method"] == "GET"
        with self.port.telemetry.operation(scope, RESUME if get else ANSWER, poll=get) as op:
            await self._stream_url(scope, receive, op.watch(send), token, op)

    async def _stream_url(
        self, scope: Scope, receive: Receive, send: Send, token: str, op: Operation
    ) -> None:
        method = scope["method"]
        if method not in ("GET", "POST"):
            await send_bytes(send, 405, b"", [(b"allow", b"GET, POST")])
            return
        parsed = self.signer.parse_link_token(token)
        if parsed is None:
            await send_jsonrpc_error(send, 404, p.INVALID_REQUEST, "unknown or expired stream")
            return
        stream_id = parsed[0]
        after: int | None = None
        last_event_id = header(scope, b"last-event-id")
        if last_event_id is not None:
            if header_count(scope, b"last-event-id") > 1:
                await send_jsonrpc_error(send, 400, p.INVALID_REQUEST, "more than one Last-Event-ID header")
                return
            event = self.signer.parse_event_id(last_event_id.strip())
            if event is None or event[0] != stream_id:
                await send_jsonrpc_error(
                    send, 400, p.INVALID_REQUEST, "Last-Event-ID does not belong to this stream"
                )
                return
            after = event[1]
        if method == "GET":
            # Without Last-Event-ID the client holds none of this response's events.
            start = parsed[1] if after is None else after
            await self.resume(scope, receive, send, stream_id, start, via_link=True, op=op)
            return
        if not is_json(scope):
            await send_jsonrpc_error(send, 415, p.INVALID_REQUEST, "Content-Type must be application/json")
            return
        body = await read_body_or_refuse(receive, send, self.max_body_bytes)
        if body is None:
            return
        node = self.node
        if node is not None and node.running and RELAYED_FROM not in scope:
            meta = await self.store.get_stream(stream_id)
            if meta is not None and meta.owner != node.node_id and await node.alive(meta.owner):
                await node.relay(meta.owner, scope, receive, send, body)
                return
        answers = p.loads_wire(body)
        if answers is None:
            await send_jsonrpc_error(send, 400, p.PARSE_ERROR, "the body is not JSON the server can handle")
            return
        if (
            not isinstance(answers, list)
            or not answers
            or len(answers) > MAX_ANSWERS
            or not all(map(p.is_response, answers))
        ):
            await send_jsonrpc_error(
                send, 400, p.INVALID_REQUEST, "the body must be a JSON array of JSON-RPC responses (SEP-1335)"
            )
            return
        await self.answers.deliver(scope, receive, send, stream_id, answers, after, op)
