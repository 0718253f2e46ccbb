"""Resume tokens: let a client poll a long request instead of holding a connection.

The draft "Resuming" text (`_meta.nextResumeToken` in a result, `_meta.resumeToken`
in the re-issued request) lets a server say "not done yet, ask again with this".
An app would have to keep the work's state between calls to do that; the engine
already does. So this layer answers a request that is still running after the
policy's `soft_deadline_s` with an interim result, while the app's work continues
detached; a re-issued request with the token receives what happened since (the
notifications it missed), then the final result - or, after another soft
deadline, the next interim result.

Only clients that opted in get interim results: by the experimental capability
`capabilities.experimental.resumeTokens` (at `initialize`, or per request on
2026-07-28), or for every client when the layer is built with
`assume_client_support=True`. A client unaware of the scheme would take an
interim result for the answer.

Tokens are `mra1.` + a signed payload: the stream, the session and principal, the
method, a canonical hash of the params (without `_meta`), and the position up to
which the client has seen the stream's messages - so a token is stable while
nothing changed, and a re-issue with other params is refused. A `_meta.resumeToken`
without the prefix belongs to the app (pagination, its own state machines) and
passes through untouched, as does any `nextResumeToken` the app itself returns.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from starlette.types import ASGIApp, Receive, Send

from mcp_resume_asgi.engine.port import Delivery, RequestContext, ServeOptions
from mcp_resume_asgi.features.seam import FeatureMiddleware
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import StreamState
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.readdress import readdressed
from mcp_resume_asgi.wire.replies import send_json
from mcp_resume_asgi.wire.sse import encode_payload

logger = logging.getLogger(__name__)

TOKEN_PREFIX = "mra1."
TOKEN_PURPOSE = "resume-token"
CAPABILITY = "resumeTokens"
"""Key under the client's `capabilities.experimental` that opts in to interim results."""
INTERIM_META = "io.github.mcp-resume-asgi/interim"
"""Marks an interim result in its `_meta`, so a client can tell it from an app's own token."""

InterimBody = Callable[[RequestContext], dict[str, Any]]


def default_interim(ctx: RequestContext) -> dict[str, Any]:
    """For `tools/call`, a valid `CallToolResult` saying the work goes on; `{}` otherwise."""
    if ctx.method == "tools/call":
        text = "The operation is still running. Call again with _meta.resumeToken set to continue."
        return {"content": [{"type": "text", "text": text}], "isError": False}
    return {}


def params_digest(params: Any) -> str:
    """A canonical hash of a request's params, `_meta` left out (it carries the token)."""
    if isinstance(params, dict):
        params = {k: v for k, v in params.items() if k != "_meta"}
    canonical = json.dumps(params, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


class ResumeTokenMiddleware(FeatureMiddleware):
    """Answers slow requests with `_meta.nextResumeToken` and serves the re-issued ones.

    Place it before `ResumeMiddleware`; `resumable(app, resume_tokens=True)` does that.
    The soft deadline comes from the request's policy (`Policy.soft_deadline_s`, per
    route); requests whose policy has none are untouched.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        methods: Sequence[str] = ("tools/call",),
        interim: Mapping[str, InterimBody] | None = None,
        assume_client_support: bool = False,
    ) -> None:
        super().__init__(app)
        if isinstance(methods, str):
            raise TypeError("methods is a sequence of glob patterns")
        self.methods = tuple(methods)
        self.interim = dict(interim or {})
        self.assume_client_support = assume_client_support

    def _opted_in(self, ctx: RequestContext) -> bool:
        if self.assume_client_support:
            return True
        experimental = ctx.capabilities.get("experimental")
        return isinstance(experimental, dict) and CAPABILITY in experimental

    async def intercept(self, ctx: RequestContext, receive: Receive, send: Send) -> bool:
        meta = ctx.params.get("_meta")
        token = meta.get("resumeToken") if isinstance(meta, dict) else None
        if isinstance(token, str) and token.startswith(TOKEN_PREFIX):
            await self._resume(ctx, token, receive, send)
            return True
        if token is not None:
            return False  # the app's own token
        if (
            ctx.policy.soft_deadline_s is None
            or not self._opted_in(ctx)
            or not any(fnmatch.fnmatchcase(ctx.method, pattern) for pattern in self.methods)
        ):
            return False
        delivery = Delivery(
            deadline_s=ctx.policy.soft_deadline_s,
            on_deadline=self._interim_frame(ctx, ctx.stream_id),
            at_will=False,
        )
        await ctx.host(receive, send, ServeOptions(delivery=delivery))
        return True

    def _token(self, ctx: RequestContext, stream_id: str, cursor: int) -> str:
        payload = [
            stream_id,
            ctx.session_id or "",
            ctx.principal or "",
            ctx.method,
            params_digest(ctx.message.get("params")),
            cursor,
        ]
        return TOKEN_PREFIX + ctx.port.signer.sign(TOKEN_PURPOSE, payload)

    def _interim_frame(self, ctx: RequestContext, stream_id: str) -> Callable[[int], Any]:
        async def frame(cursor: int) -> bytes:
            body = dict(self.interim.get(ctx.method, default_interim)(ctx))
            given = body.get("_meta")
            extra: dict[str, Any] = given if isinstance(given, dict) else {}
            body["_meta"] = {
                **extra,
                "nextResumeToken": self._token(ctx, stream_id, cursor),
                INTERIM_META: True,
                "resumeAfterMs": ctx.policy.retry_ms or 0,
            }
            message = {"jsonrpc": "2.0", "id": ctx.request_id, "result": body}
            return encode_payload(p.dumps(message), b"message")

        return frame

    async def _resume(self, ctx: RequestContext, token: str, receive: Receive, send: Send) -> None:
        payload = ctx.port.signer.unsign(TOKEN_PURPOSE, token[len(TOKEN_PREFIX) :])
        problem = None
        if (
            not isinstance(payload, list)
            or len(payload) != 6
            or not isinstance(payload[0], str)
            or not isinstance(payload[5], int)
            or payload[1] != (ctx.session_id or "")
            or payload[2] != (ctx.principal or "")
        ):
            problem = "invalid resume token"
        elif payload[3] != ctx.method or payload[4] != params_digest(ctx.message.get("params")):
            problem = "the request does not match its resume token (method or params changed)"
        meta = None
        if problem is None:
            assert isinstance(payload, list)
            meta = await ctx.port.store.get_stream(payload[0])
            refusal = None if meta is None else await ctx.port.admit(ctx.scope, meta)
            if refusal is not None:
                await refusal.send(send)
                return
            if meta is None or meta.state is StreamState.EXPIRED:
                problem = "unknown or expired resume token"
            elif await ctx.port.store.get_key(keys.resume_token_spent(meta.stream_id)) is not None:
                problem = "the resume token is expired: the request already completed"
            elif payload[5] > meta.last_seq:
                problem = "invalid resume token"
        if problem is not None or meta is None or not isinstance(payload, list):
            await send_json(
                send, 200, p.error_message(ctx.request_id, p.INVALID_PARAMS, problem or "invalid")
            )
            return
        policy = ctx.port.routes.by_index(meta.route)
        deadline = ctx.policy.soft_deadline_s or policy.soft_deadline_s
        delivery = Delivery(
            deadline_s=deadline,
            on_deadline=self._interim_frame(ctx, meta.stream_id),
            transform=_readdress(ctx, meta.request_id),
            at_will=False,
        )
        outcome = await ctx.port.serve(ctx.scope, receive, send, meta, payload[5], delivery)
        if outcome is not None and outcome[0] == "complete":
            await ctx.port.store.set_key(
                keys.resume_token_spent(meta.stream_id), "1", policy.retain_completed_s + 60
            )


def _readdress(ctx: RequestContext, original_id: Any) -> Callable[[int, bytes], bytes] | None:
    """Give the re-issued request's id (and progress token) to the recorded messages."""
    new_id = ctx.request_id
    meta = ctx.params.get("_meta")
    new_progress = meta.get("progressToken") if isinstance(meta, dict) else None
    if new_id == original_id and new_progress is None:
        return None

    def transform(_seq: int, payload: bytes) -> bytes:
        return readdressed(payload, answer_id=new_id, answer_of=original_id, progress_token=new_progress)

    return transform
