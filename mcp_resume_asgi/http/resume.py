"""`<mcp>/streams/<token>`: the `Link rel="stream"` URL of every SSE answer (SEP-1335).

A `GET` resumes the answer the token names - from its start, or after a
`Last-Event-ID` of that same stream - on whichever node it lands. A `POST`
carries the client's answers to the server's requests on that stream, buffered
for the app until it reads them; on a cluster it goes to the node running the
stream. The token is signed: a forged or foreign one is a 404 before the store
is touched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.types import Receive, Scope, Send

from mcp_resume_asgi._http import read_body_or_refuse
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.headers import header, header_count, is_json
from mcp_resume_asgi.wire.replies import send_bytes, send_jsonrpc_error
from mcp_resume_asgi.wire.scope_keys import RELAYED_FROM

if TYPE_CHECKING:
    from mcp_resume_asgi.engine.cluster import Node
    from mcp_resume_asgi.engine.engine import Engine

#: The most answers one POST may carry.
MAX_ANSWERS = 100


class StreamUrls:
    """Serves the stream URLs of one `ResumeMiddleware`."""

    def __init__(self, engine: Engine, node: Node | None, max_body_bytes: int) -> None:
        self.engine = engine
        self.node = node
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send, token: str) -> None:
        method = scope["method"]
        if method not in ("GET", "POST"):
            await send_bytes(send, 405, b"", [(b"allow", b"GET, POST")])
            return
        engine = self.engine
        parsed = engine.signer.parse_link_token(token)
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
            event = engine.signer.parse_event_id(last_event_id.strip())
            if event is None or event[0] != stream_id:
                await send_jsonrpc_error(
                    send, 400, p.INVALID_REQUEST, "Last-Event-ID does not belong to this stream"
                )
                return
            after = event[1]
        if method == "GET":
            # Without Last-Event-ID the client holds none of this response's events.
            start = parsed[1] if after is None else after
            await engine.handle_resume(scope, receive, send, stream_id, start, via_link=True)
            return
        if not is_json(scope):
            await send_jsonrpc_error(send, 415, p.INVALID_REQUEST, "Content-Type must be application/json")
            return
        body = await read_body_or_refuse(receive, send, self.max_body_bytes)
        if body is None:
            return
        node = self.node
        if node is not None and node.running and RELAYED_FROM not in scope:
            meta = await engine.store.get_stream(stream_id)
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
        await engine.answers.deliver(scope, receive, send, stream_id, answers, after)
