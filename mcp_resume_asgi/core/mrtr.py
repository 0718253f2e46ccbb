"""A 2026-07-28 call handed over by a draining node through a Multi Round-Trip Request.

A 2026-07-28 request's stream cannot be resumed: its client closing it is its cancel, and
its events carry no ids. So a node that drains cannot close its connection at will as it does
for a 2025-era client. But `tools/call`, `prompts/get` and `resources/read` may be answered
`{"resultType": "input_required", "requestState": S}` with no `inputRequests` (MRTR): the
client then retries the request at once, with a new JSON-RPC id, echoing `S`. The draining
node answers so, on an event boundary, while the app's work goes on there, recorded; the
retry, on whichever node gets it, is served the rest of the recorded stream as its answer.

`S` is ours alone: `STATE_PREFIX` + a token sealed by the engine's signer (an HMAC of the
store's shared secret) that carries the stream, the principal it is bound to, the method and
a digest of the request's params (`params_digest`), the seq of the last event the client got,
and when it expires (wall clock). A `requestState` without the prefix is the app's own MRTR
state and passes to the app untouched.

What a retry's state is worth is decided here, on plain data (`open_state`, then `admit` once
the stream's record and the caller are known): forged or malformed, expired, presented on
another method or other params, bound to another principal - each refused with a message the
client is told (a JSON-RPC "invalid params" error). No I/O: `engine/mrtr.py` acts on it.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

from mcp_resume_asgi.core.stream import close_cancels
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.tokens import TokenSigner

__all__ = [
    "MAX_STATE_LENGTH",
    "METHODS",
    "STATE_PREFIX",
    "STATE_PURPOSE",
    "HandOverState",
    "Refusal",
    "admit",
    "may_hand_over",
    "open_state",
    "params_digest",
    "retry_state",
    "seal",
]

#: The requests a server may answer `input_required` (the 2026-07-28 MRTR page, "Supported Requests").
METHODS = frozenset({"tools/call", "prompts/get", "resources/read"})
#: What starts every `requestState` this library makes (any other belongs to the app).
STATE_PREFIX = "mrh1."
#: The signing purpose of a hand-over state (a token of another purpose never opens as one).
STATE_PURPOSE = "mrtr-hand-over"
#: The longest `requestState` looked at (ours are about 200 characters).
MAX_STATE_LENGTH = 2048
#: The params of a request that change from one round to the next, left out of its digest.
_ROUND_PARAMS = frozenset({"_meta", "requestState", "inputResponses"})


@dataclass(frozen=True, slots=True)
class HandOverState:
    """What a hand-over `requestState` carries (sealed)."""

    stream_id: str
    principal: str | None
    """Who the stream is bound to (its record's principal when the state was made)."""
    method: str
    digest: str
    """`params_digest` of the request's params."""
    seq: int
    """The seq of the last event the client got on the connection the state ended."""
    expires_at: float
    """Wall-clock seconds after which the state is refused."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a retry's `requestState` is refused: the client is told this message."""

    message: str


def may_hand_over(version: str, opted_in: bool, method: str | None) -> bool:
    """Whether a drain may hand a request over through MRTR: a 2026-07-28 request whose close
    cancels it (no resumable-streams opt-in), of a method that may be answered `input_required`."""
    return method in METHODS and close_cancels(version, opted_in)


def params_digest(params: Any) -> str:
    """A canonical digest of a request's params without what changes between its rounds
    (`_meta`: the progress token; `requestState`, `inputResponses`)."""
    if isinstance(params, dict):
        params = {k: v for k, v in params.items() if k not in _ROUND_PARAMS}
    canonical = json.dumps(params, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def seal(signer: TokenSigner, state: HandOverState) -> str:
    """The `requestState` that carries `state`."""
    payload = [
        state.stream_id,
        state.principal,
        state.method,
        state.digest,
        state.seq,
        round(state.expires_at, 3),
    ]
    return STATE_PREFIX + signer.sign(STATE_PURPOSE, payload)


def retry_state(message: Any, version: str) -> str | None:
    """The `requestState` of a request that is a retry of a call this library handed over (ours:
    `STATE_PREFIX`), else None: anything else, another `requestState` among it, is the app's."""
    if not p.at_least(version, p.SINGLE_EXCHANGE_VERSION) or not isinstance(message, dict):
        return None
    if message.get("method") not in METHODS:
        return None
    params = message.get("params")
    state = params.get("requestState") if isinstance(params, dict) else None
    if isinstance(state, str) and state.startswith(STATE_PREFIX):
        return state
    return None


def open_state(
    signer: TokenSigner, token: str, *, method: str, params: Any, now: float
) -> HandOverState | Refusal:
    """The state a retry's `requestState` carries, if it is genuine (sealed by this secret),
    not expired at `now` (wall clock) and presented on the request it was made for."""
    if len(token) > MAX_STATE_LENGTH or not token.startswith(STATE_PREFIX):
        return Refusal("invalid requestState")
    payload = signer.unsign(STATE_PURPOSE, token[len(STATE_PREFIX) :], max_length=MAX_STATE_LENGTH)
    if (
        not isinstance(payload, list)
        or len(payload) != 6
        or not isinstance(payload[0], str)
        or not (payload[1] is None or isinstance(payload[1], str))
        or not isinstance(payload[2], str)
        or not isinstance(payload[3], str)
        or type(payload[4]) is not int
        or payload[4] < 0
        or type(payload[5]) not in (int, float)
        or not math.isfinite(payload[5])
    ):
        return Refusal("invalid requestState")
    state = HandOverState(payload[0], payload[1], payload[2], payload[3], payload[4], float(payload[5]))
    if now > state.expires_at:
        return Refusal("the requestState has expired")
    if state.method != method or state.digest != params_digest(params):
        return Refusal("the requestState was issued for another request (method or params differ)")
    return state


def admit(
    state: HandOverState, *, record_principal: str | None, record_method: str | None, record_last_seq: int
) -> Refusal | None:
    """The stream's record, as read now, against the state: it must still be the stream the
    state was made for (its principal and method, holding the events the client got). Whether
    the caller is that principal is the app's word (`engine/admission.py`), asked next."""
    if record_principal != state.principal:
        return Refusal("the requestState was not issued to this caller")
    if record_method != state.method:
        return Refusal("the requestState was issued for another request (method or params differ)")
    if state.seq > record_last_seq:
        return Refusal("invalid requestState")
    return None
