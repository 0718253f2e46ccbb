"""SEP-975, resumable requests, for apps that know nothing about it.

SSE resumption needs an event id, and a client that loses its connection before
the first event has none. SEP-975 moves resumption up to JSON-RPC: the server's
first message on a request's stream is `notifications/requests/resumePolicy`
(with a `resumeToken` and `maxWait`); a client that lost the stream sends
`requests/resume` - the *same* JSON-RPC id, the token - and gets the rest of the
request's messages; `requests/getStatus` tells it how the request is doing
without draining anything.

This layer does it from outside the app: the engine already records every
request's messages, so `requests/resume` is an attachment to that record and
`requests/getStatus` a look at its state. Only clients that declared the
`resumableRequests` capability (at `initialize`, or per request in `_meta` on
2026-07-28) see anything new.

Semantics decided here where the SEP is silent:

* "Delivered" messages are those the server wrote to a client connection. A
  `requests/resume` without `Last-Event-ID` replays everything after the last
  delivered message, and always includes the final response if there is one.
  With `Last-Event-ID` (an id from this stream) it replays exactly what follows.
* A second `requests/resume` while another connection is attached replaces it:
  the newest connection wins, the older one is closed after a `retry:` field and
  may resume again. Nothing is dropped either way.
* Each `requests/resume` and `requests/getStatus` counts as contact and restarts
  the `maxWait` window.
"""

from __future__ import annotations

import fnmatch
import logging
import time
from collections.abc import Sequence
from typing import Any

from starlette.types import ASGIApp, Receive, Send

from mcp_resume_asgi.engine.port import Delivery, RequestContext
from mcp_resume_asgi.features.seam import FeatureMiddleware
from mcp_resume_asgi.store.base import StreamMeta, StreamState
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.headers import header
from mcp_resume_asgi.wire.replies import send_json

logger = logging.getLogger(__name__)

CAPABILITY = "resumableRequests"
TOKEN_PURPOSE = "resume-request"


class ResumableRequestsMiddleware(FeatureMiddleware):
    """Adds SEP-975 to every request matching `methods` (and, for `tools/call`, `tools`).

    Place it before `ResumeMiddleware` (outside it); `resumable(app, resumable_requests=True)`
    does that for you.
    """

    answers = frozenset({"requests/resume", "requests/getStatus"})

    def __init__(
        self, app: ASGIApp, *, methods: Sequence[str] = ("tools/call",), tools: Sequence[str] = ("*",)
    ) -> None:
        super().__init__(app)
        if isinstance(methods, str) or isinstance(tools, str):
            raise TypeError("methods and tools are sequences of glob patterns")
        self.methods = tuple(methods)
        self.tools = tuple(tools)

    def _eligible(self, ctx: RequestContext) -> bool:
        if CAPABILITY not in ctx.capabilities:
            return False
        if not any(fnmatch.fnmatchcase(ctx.method, pattern) for pattern in self.methods):
            return False
        return ctx.method != "tools/call" or any(fnmatch.fnmatchcase(ctx.tool or "", t) for t in self.tools)

    async def first_messages(self, ctx: RequestContext) -> list[dict[str, Any]]:
        if not self._eligible(ctx):
            return []
        ctx.survives_close = True  # the client may come back with `requests/resume`
        token = ctx.port.signer.sign(
            TOKEN_PURPOSE, [ctx.stream_id, ctx.session_id or "", ctx.principal or "", ctx.request_id]
        )
        params = {"requestId": ctx.request_id, "resumeToken": token, "maxWait": ctx.policy.max_wait_s}
        return [{"jsonrpc": "2.0", "method": "notifications/requests/resumePolicy", "params": params}]

    async def intercept(self, ctx: RequestContext, receive: Receive, send: Send) -> bool:
        if ctx.method == "requests/resume":
            await self._resume(ctx, receive, send)
            return True
        if ctx.method == "requests/getStatus":
            await self._get_status(ctx, send)
            return True
        return False

    async def _stream_for(
        self, ctx: RequestContext, send: Send, token: Any, request_id: Any
    ) -> StreamMeta | None:
        """The stream a token names, or None after answering with a JSON-RPC error (-32602)."""
        payload = ctx.port.signer.unsign(TOKEN_PURPOSE, token) if isinstance(token, str) else None
        problem = None
        if (
            not isinstance(payload, list)
            or len(payload) != 4
            or payload[1] != (ctx.session_id or "")
            or payload[2] != (ctx.principal or "")
        ):
            problem = "invalid resume token"
        elif payload[3] != request_id or not p.valid_id(request_id):
            problem = "the resume token belongs to another request"
        meta = None
        if problem is None and isinstance(payload, list) and isinstance(payload[0], str):
            meta = await ctx.port.store.get_stream(payload[0])
            if meta is None or meta.state is StreamState.EXPIRED:
                problem = "unknown or expired request"
                meta = None
            else:
                refusal = await ctx.port.admit(ctx.scope, meta)
                if refusal is not None:
                    await refusal.send(send)
                    return None
        if problem is None and meta is None:
            problem = "invalid resume token"
        if problem is not None:
            status = p.error_status(ctx.version, p.INVALID_PARAMS)
            await send_json(send, status, p.error_message(ctx.request_id, p.INVALID_PARAMS, problem))
        return meta

    async def _resume(self, ctx: RequestContext, receive: Receive, send: Send) -> None:
        meta = await self._stream_for(ctx, send, ctx.params.get("resumeToken"), ctx.request_id)
        if meta is None:
            return
        after = meta.delivered_seq
        last_event_id = header(ctx.scope, b"last-event-id")
        if last_event_id is not None:
            parsed = ctx.port.signer.parse_event_id(last_event_id.strip())
            if parsed is None or parsed[0] != meta.stream_id or parsed[1] > meta.last_seq:
                await send_json(
                    send,
                    p.error_status(ctx.version, p.INVALID_PARAMS),
                    p.error_message(ctx.request_id, p.INVALID_PARAMS, "Last-Event-ID is not of this request"),
                )
                return
            after = parsed[1]
        elif meta.final_seq is not None:
            after = min(after, meta.final_seq - 1)  # a client asking again did not get its result
        logger.debug("requests/resume of stream %s after %s", meta.stream_id, after)
        await ctx.port.serve(ctx.scope, receive, send, meta, after, Delivery(survives_close=True))

    async def _get_status(self, ctx: RequestContext, send: Send) -> None:
        params = ctx.params
        meta = await self._stream_for(ctx, send, params.get("resumeToken"), params.get("requestId"))
        if meta is None:
            return
        await ctx.port.store.update_stream(meta.stream_id, last_contact=time.time())
        status = "processing"
        if meta.final_seq is not None:
            status = "completed"
            try:
                final = await ctx.port.store.read(meta.stream_id, meta.final_seq - 1, 1)
            except Exception:  # the final event was evicted: it was a result or an error, we cannot tell
                final = []
            if final and b'"error"' in final[0][1] and b'"result"' not in final[0][1]:
                status = "failed"
        result = {
            "status": status,
            "hasPendingMessage": meta.last_seq > meta.delivered_seq,
            "hasInputRequest": bool(meta.pending_inputs),
        }
        await send_json(send, 200, {"jsonrpc": "2.0", "id": ctx.request_id, "result": result})
