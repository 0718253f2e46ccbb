"""A draining node's 2026-07-28 calls, handed over through MRTR: the frame that ends a call's
connection `input_required`, and the retry that echoes its `requestState`, served from the store.

What the state carries and what it is worth are `core/mrtr.py`'s decisions. Here:

* `input_required_frame`: the JSON-RPC response `{"resultType": "input_required",
  "requestState": S}` that ends a connection handed over (`Reason.INPUT_REQUIRED`), `S` sealed
  with the seq of the last event that connection got;
* `Retries.serve`: a retry whose `requestState` is ours never reaches the app. Its state opened
  (seal, expiry, method, params), the stream's record read and its caller admitted as a resume's
  is (`admission.py`: the app's own auth says who calls, wherever it sits), it is served the
  stream after the sealed seq as its own answer (`Engine.serve_stream`: by the stream itself
  where it runs here, else from the store, with the re-run of a lost owner's call as any
  follower gets it): each response's id is the retry's, each progress notification carries the
  retry's progress token (dropped where it has none). A node that drains answers it
  `input_required` again, with the seq it got to.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from mcp_resume_asgi.core import mrtr
from mcp_resume_asgi.core.mrtr import HandOverState, Refusal
from mcp_resume_asgi.engine.admission import Admission
from mcp_resume_asgi.engine.port import NOT_FOUND, Delivery
from mcp_resume_asgi.policy import RouteTable, running_ttl
from mcp_resume_asgi.store.base import Store, StreamMeta
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.asgi import Receive, Scope, Send
from mcp_resume_asgi.wire.readdress import readdressed
from mcp_resume_asgi.wire.replies import send_json
from mcp_resume_asgi.wire.sse import encode_payload
from mcp_resume_asgi.wire.tokens import TokenSigner

__all__ = ["Retries", "input_required_frame", "readdress"]

logger = logging.getLogger(__name__)

ServeStream = Callable[
    [Scope, Receive, Send, StreamMeta, int, Delivery | None], Awaitable[tuple[str, int] | None]
]


def input_required_frame(
    signer: TokenSigner, state: HandOverState, request_id: Any, ttl_s: float
) -> Callable[[int], bytes]:
    """What ends a handed-over connection, given the seq of the last event it got: the answer
    to `request_id`, `input_required` with `state` sealed from that seq for `ttl_s`."""

    def frame(cursor: int) -> bytes:
        sealed = mrtr.seal(
            signer,
            HandOverState(
                state.stream_id,
                state.principal,
                state.method,
                state.digest,
                max(cursor, state.seq),
                time.time() + ttl_s,
            ),
        )
        logger.debug("stream %s: handed over at %s (input_required)", state.stream_id, cursor)
        result = {"resultType": "input_required", "requestState": sealed}
        return encode_payload(p.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}), b"message")

    return frame


def first_state(stream_id: str, principal: str | None, method: str, body: bytes) -> HandOverState:
    """The state of a request's first connection (its body as the app read it), seq 0."""
    try:
        message = json.loads(body)
    except ValueError:
        message = None
    params = message.get("params") if isinstance(message, dict) else None
    return HandOverState(stream_id, principal, method, mrtr.params_digest(params), 0, 0.0)


def readdress(request_id: Any, progress_token: Any) -> Callable[[int, bytes], bytes]:
    """Rewrite the recorded events of a handed-over call as the retry's answer: a response to
    the original request answers `request_id`; a progress notification carries
    `progress_token`, or is dropped when the retry asked for none (its events carry no ids: a
    dropped one leaves nothing behind)."""

    def transform(_seq: int, payload: bytes) -> bytes:
        return readdressed(
            payload, answer_id=request_id, progress_token=progress_token, drop_other_progress=True
        )

    return transform


class Retries:
    """Serves the retries of calls handed over through MRTR (see the module docstring)."""

    def __init__(
        self,
        *,
        store: Store,
        signer: TokenSigner,
        routes: RouteTable,
        admission: Admission,
        serve: ServeStream,
    ) -> None:
        self.store = store
        self.signer = signer
        self.routes = routes
        self.admission = admission
        self.serve_stream = serve

    async def serve(
        self, scope: Scope, receive: Receive, send: Send, message: dict[str, Any], token: str
    ) -> None:
        """Answer the retry `message`, whose `requestState` `token` is ours (`mrtr.retry_state`)."""
        request_id = message.get("id")
        method = str(message.get("method"))
        params = message.get("params")
        opened = mrtr.open_state(self.signer, token, method=method, params=params, now=time.time())
        if isinstance(opened, Refusal):
            await self._refuse(send, request_id, opened)
            return
        meta = await self.store.get_stream(opened.stream_id)
        if meta is None:
            await self._refuse(
                send, request_id, Refusal("the request this requestState continues is gone (expired)")
            )
            return
        refused = mrtr.admit(
            opened, record_principal=meta.principal, record_method=meta.method, record_last_seq=meta.last_seq
        )
        if refused is not None:
            await self._refuse(send, request_id, refused)
            return
        refusal = await self.admission.check(scope, meta)
        if refusal is NOT_FOUND:
            await self._refuse(send, request_id, Refusal("the requestState was not issued to this caller"))
            return
        if refusal is not None:
            await refusal.send(send)  # (the app's own: 401, 403; or its silence)
            return
        meta_params = params.get("_meta") if isinstance(params, dict) else None
        progress_token = meta_params.get("progressToken") if isinstance(meta_params, dict) else None
        policy = self.routes.by_index(meta.route)
        delivery = Delivery(
            at_will=False,
            transform=readdress(request_id, progress_token),
            input_required=input_required_frame(self.signer, opened, request_id, running_ttl(policy)),
        )
        logger.debug("stream %s: a handed-over call's retry follows it from %s", meta.stream_id, opened.seq)
        await self.serve_stream(scope, receive, send, meta, opened.seq, delivery)

    @staticmethod
    async def _refuse(send: Send, request_id: Any, refusal: Refusal) -> None:
        logger.debug("refused a retry's requestState: %s", refusal.message)
        await send_json(
            send,
            p.error_status(p.SINGLE_EXCHANGE_VERSION, p.INVALID_PARAMS),
            p.error_message(request_id, p.INVALID_PARAMS, refusal.message),
        )
