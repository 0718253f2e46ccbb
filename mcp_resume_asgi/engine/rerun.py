"""A call on a route with `Policy.rerun_on_loss`, kept so that another node can run it again.

When the node running such a call dies (SIGKILL, a lost heartbeat) before the call's answer,
the request is run again on another node under the same stream. For that
the request must outlive its node: while the call runs, the store holds what running it takes
(`StoredRequest`: the HTTP request as the app saw it, and its caller as a relay describes it,
`relayed_caller.describe`), bounded (`MAX_REQUEST_BYTES`: a larger request is not kept, and its
call is not re-run), with the running stream's TTL, and deleted once the call is answered. A
loss is re-run at most once: the node that re-runs it takes `keys.rerun_claim(stream, round)`
with `add_key` first (`claim`), and the stored request counts the losses (`round`).

Whoever can write to the store could rewrite a stored request (another tool, another caller)
and then make its node look lost (delete its heartbeat key): so the stored request is sealed
like a relay (`wire/relay_seal.py`): an HMAC of the app's secret over its JSON and the stream it
is for (`SEAL_PURPOSE`), and its JSON names what the stream's record says of who runs it (`bound`:
principal, session, request id, method, route), which `Engine.rerun` compares with the record.
What does not open is refused, never run (`load` says why). Only the headers a re-run needs
are kept (`KEPT_HEADERS`: credentials, the session, the revision, the body's type).

Nothing here runs anything: the engine does (`Engine.rerun`), through the same path as a
relayed request (the caller seated with `relayed_caller.seat`, so `CallerGuard` applies).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
from typing import Any

from mcp_resume_asgi.core.stream import close_cancels
from mcp_resume_asgi.engine.relayed_caller import describe, seat
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import Store
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.asgi import Scope, http_scope
from mcp_resume_asgi.wire.principal import PrincipalOf
from mcp_resume_asgi.wire.tokens import TokenSigner

__all__ = [
    "KEPT_HEADERS",
    "MARKER_LOGGER",
    "MAX_REQUEST_BYTES",
    "SEAL_PURPOSE",
    "Refused",
    "StoredRequest",
    "bound",
    "capture",
    "claim",
    "decode",
    "drained",
    "encode",
    "forget",
    "kept",
    "load",
    "marker",
    "may_run_again",
    "open_sealed",
    "release",
    "save",
    "scope_of",
    "seal",
]

logger = logging.getLogger(__name__)

#: The largest stored request (its JSON, caller included): a larger one is not kept (its call
#: is not re-run: its loss ends it with today's error).
MAX_REQUEST_BYTES = 256 * 1024
#: The `logger` of the marker event a re-run records first (`marker`).
MARKER_LOGGER = "mcp-resume-asgi"
#: The signing purpose of stored requests (a seal is valid for nothing else).
SEAL_PURPOSE = "rerun-request"
#: The only headers kept, with the protocol's own (`Mcp-*`: the session, the revision, the
#: 2026-07-28 routing headers, which the app checks against the body): what the app's auth
#: reads (a bearer token, a cookie, an API key), and what the body is and what answer is
#: taken. Nothing else of the request is written to the store (no proxy's headers, no
#: tracing, no attempt's own: `Last-Event-ID`, `Idempotency-Key`).
KEPT_HEADERS = frozenset({b"authorization", b"cookie", b"x-api-key", b"content-type", b"accept", b"host"})
#: The start of the protocol's own headers, all kept.
_PROTOCOL_HEADERS = b"mcp-"


@dataclasses.dataclass(frozen=True, slots=True)
class StoredRequest:
    """What running a request again takes (see the module docstring)."""

    method: str
    path: str
    query: bytes
    scheme: str
    headers: list[tuple[bytes, bytes]]
    body: bytes
    caller: dict[str, Any]
    """Its caller, as `relayed_caller.describe` gives it (principal, user, credentials' scopes)."""
    round: int = 0
    """How many times its node was lost already (the claim of the next loss is this round's)."""
    stream: dict[str, Any] = dataclasses.field(default_factory=dict)
    """What its stream's record says of who runs it (`bound`), as it was when it was kept."""


@dataclasses.dataclass(frozen=True, slots=True)
class Refused:
    """A stored request that is there but is not run: why (forged, altered, or unreadable)."""

    why: str


def bound(
    principal: str | None, session_id: str | None, request_id: Any, method: str | None, route: int
) -> dict[str, Any]:
    """What a stream's record says of who runs its request: kept sealed with the request, and
    compared with the record before a re-run (a record rewritten since is not run)."""
    return {"principal": principal, "session": session_id, "id": request_id, "method": method, "route": route}


def may_run_again(
    version: str, session_id: str | None, opted_in: bool, outlives_close: bool, *, session_kept: bool = False
) -> bool:
    """Whether a request can ever be run again after its node is lost, so whether it is kept.

    A request of a 2025 session only if the store keeps the session (`session_kept`): the
    re-running node then takes the session over first (`adoption.py`); otherwise the session
    lives in the memory of its node alone, and no other node's app would take the request. Not
    a 2026-07-28 request whose close cancels it (no resumable-streams opt-in) unless it may
    outlive its client's close (it is or may become a task, `outlives_close`): when its node is
    lost, its client's connection goes with it and nobody can follow the call. Whatever cannot
    be run again is not written to the store."""
    if session_id is not None and not p.at_least(version, p.SINGLE_EXCHANGE_VERSION) and not session_kept:
        return False
    return outlives_close or not close_cancels(version, opted_in)


def kept(name: bytes) -> bool:
    """Whether a header (its lowercase name) is kept with a stored request."""
    return name in KEPT_HEADERS or name.startswith(_PROTOCOL_HEADERS)


def capture(
    scope: Scope, body: bytes, principal_of: PrincipalOf, stream: dict[str, Any] | None = None
) -> StoredRequest:
    """The request in `scope` (its app's auth has seen it) and `body`, to keep (`stream`: its
    stream's `bound`)."""
    return StoredRequest(
        method=str(scope.get("method", "POST")),
        path=str(scope["path"]),
        query=bytes(scope.get("query_string", b"")),
        scheme=str(scope.get("scheme", "http")),
        headers=[(k, v) for k, v in scope["headers"] if kept(k)],
        body=body,
        caller=describe(scope, principal_of),
        stream=stream or {},
    )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def encode(request: StoredRequest) -> str | None:
    """The stored form (JSON), or None when it is larger than `MAX_REQUEST_BYTES`."""
    if len(request.body) > MAX_REQUEST_BYTES:
        return None
    text = json.dumps(
        {
            "m": request.method,
            "p": request.path,
            "q": _b64(request.query),
            "s": request.scheme,
            "h": [[_b64(k), _b64(v)] for k, v in request.headers],
            "b": _b64(request.body),
            "c": request.caller,
            "r": request.round,
            "k": request.stream,
        },
        separators=(",", ":"),
    )
    return text if len(text) <= MAX_REQUEST_BYTES else None


def decode(text: str) -> StoredRequest | None:
    """`encode`'s JSON as a request, or None when it is not one."""
    try:
        raw = json.loads(text)
        if not isinstance(raw, dict):
            return None
        headers = raw["h"]
        caller = raw["c"]
        round_ = raw["r"]
        stream = raw.get("k", {})
        if not isinstance(headers, list) or not isinstance(caller, dict) or not isinstance(stream, dict):
            return None
        if isinstance(round_, bool) or not isinstance(round_, int) or round_ < 0:
            return None
        return StoredRequest(
            method=str(raw["m"]),
            path=str(raw["p"]),
            query=base64.b64decode(raw["q"]),
            scheme=str(raw["s"]),
            headers=[(base64.b64decode(k), base64.b64decode(v)) for k, v in headers],
            body=base64.b64decode(raw["b"]),
            caller=caller,
            round=round_,
            stream=stream,
        )
    except (ValueError, TypeError, KeyError):
        return None


def _sealed_part(stream_id: str, text: str) -> bytes:
    """What a stored request's seal covers: its JSON and the stream it is for (a request moved
    to another stream's key does not open there)."""
    return stream_id.encode("utf-8", "surrogatepass") + b"\n" + text.encode("utf-8", "surrogatepass")


def seal(signer: TokenSigner, stream_id: str, request: StoredRequest) -> str | None:
    """The stored form of `request` for `stream_id`: its JSON and its seal; None when too large."""
    text = encode(request)
    if text is None:
        return None
    return json.dumps({"sealed": text, "seal": signer.mac(SEAL_PURPOSE, _sealed_part(stream_id, text))})


def open_sealed(signer: TokenSigner, stream_id: str, stored: str) -> StoredRequest | Refused:
    """The request `seal` kept for `stream_id`, or why it is refused."""
    try:
        outer = json.loads(stored)
    except (ValueError, RecursionError):
        return Refused("it is not JSON")
    if not isinstance(outer, dict):
        return Refused("it is not sealed")
    text, mac = outer.get("sealed"), outer.get("seal")
    if not isinstance(text, str) or not isinstance(mac, str):
        return Refused("it is not sealed")
    if not signer.verify_mac(SEAL_PURPOSE, _sealed_part(stream_id, text), mac):
        return Refused(
            "its seal does not match (not sealed with this app's secret, altered, or another stream's)"
        )
    request = decode(text)
    return request if request is not None else Refused("its sealed part is not a stored request")


async def save(
    store: Store, signer: TokenSigner, stream_id: str, request: StoredRequest, ttl_s: float
) -> bool:
    """Keep `request` for the stream, sealed (`ttl_s`: the running stream's); False when too large."""
    text = seal(signer, stream_id, request)
    if text is None:
        logger.warning(
            "stream %s: its request is larger than %d bytes; it is not kept, and is not run again "
            "if its node is lost",
            stream_id,
            MAX_REQUEST_BYTES,
        )
        return False
    await store.set_key(keys.rerun_request(stream_id), text, ttl_s)
    return True


async def load(store: Store, signer: TokenSigner, stream_id: str) -> StoredRequest | Refused | None:
    """The stream's kept request (None: never kept, answered or expired; `Refused`: there, but
    it does not open: forged, altered, or sealed with another secret)."""
    text = await store.get_key(keys.rerun_request(stream_id))
    return open_sealed(signer, stream_id, text) if text is not None else None


async def forget(store: Store, stream_id: str) -> None:
    """The call was answered (or ended): nothing is run again."""
    await store.delete_key(keys.rerun_request(stream_id))


async def claim(store: Store, node_id: str, stream_id: str, round_: int, ttl_s: float) -> bool:
    """Take the re-run of the stream's `round_`-th loss for `node_id`: True for one node only."""
    return await store.add_key(keys.rerun_claim(stream_id, round_), node_id, ttl_s) is None


async def release(store: Store, node_id: str, stream_id: str, round_: int) -> None:
    """Give back a claim `node_id` took but could not use (another node had taken the record over
    already): the loss it names is still to come, and its claim must be free for it."""
    await store.delete_key(keys.rerun_claim(stream_id, round_), node_id)


def scope_of(request: StoredRequest) -> Scope | None:
    """An ASGI scope for running `request` again, its caller seated (None: a malformed caller)."""
    scope = http_scope(request.method, request.scheme, request.path, request.query, list(request.headers))
    return scope if seat(scope, request.caller) else None


def drained(node_id: str) -> str:
    """The owner a draining node leaves on the record of a call its budget stopped, to be run
    again (`HostedStream.hand_over`): the name of no node, so any node finds it dead at once."""
    return f"{node_id}~drained"


def marker(round_: int) -> dict[str, Any]:
    """The first event a re-run records: a log message saying the events after it are the
    call's from its start again (`round_`: 1 for the first re-run)."""
    return {
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": {
            "level": "warning",
            "logger": MARKER_LOGGER,
            "data": {"rerun": round_, "reason": "owner-lost"},
        },
    }
