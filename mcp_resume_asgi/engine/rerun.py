"""A call on a route with `Policy.rerun_on_loss`, kept so that another node can run it again.

When the node running such a call dies (SIGKILL, a lost heartbeat) before the call's answer,
the request is run again on another node under the same stream (issue 22, item 2). For that
the request must outlive its node: while the call runs, the store holds what running it takes
(`StoredRequest`: the HTTP request as the app saw it, and its caller as a relay describes it,
`relayed_caller.describe`), bounded (`MAX_REQUEST_BYTES`: a larger request is not kept, and its
call is not re-run), with the running stream's TTL, and deleted once the call is answered. A
loss is re-run at most once: the node that re-runs it takes `keys.rerun_claim(stream, round)`
with `add_key` first (`claim`), and the stored request counts the losses (`round`).

Nothing here runs anything: the engine does (`Engine.rerun`), through the same path as a
relayed request (the caller seated with `relayed_caller.seat`, so `CallerGuard` applies).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
from typing import Any

from mcp_resume_asgi.engine import sweep
from mcp_resume_asgi.engine.relayed_caller import describe, seat
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import Store
from mcp_resume_asgi.wire.asgi import Scope, http_scope
from mcp_resume_asgi.wire.principal import PrincipalOf

__all__ = [
    "MARKER_LOGGER",
    "MAX_REQUEST_BYTES",
    "StoredRequest",
    "capture",
    "claim",
    "decode",
    "drained",
    "encode",
    "forget",
    "load",
    "marker",
    "release",
    "save",
    "scope_of",
]

logger = logging.getLogger(__name__)

#: The largest stored request (its JSON, caller included): a larger one is not kept (its call
#: is not re-run: its loss ends it with today's error).
MAX_REQUEST_BYTES = 256 * 1024
#: The `logger` of the marker event a re-run records first (`marker`).
MARKER_LOGGER = "mcp-resume-asgi"
#: Headers not kept: the connection's own, and those that belong to one attempt only.
_DROPPED = {
    b"connection",
    b"keep-alive",
    b"transfer-encoding",
    b"upgrade",
    b"last-event-id",
    b"idempotency-key",
}


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


def capture(scope: Scope, body: bytes, principal_of: PrincipalOf) -> StoredRequest:
    """The request in `scope` (its app's auth has seen it) and `body`, to keep."""
    return StoredRequest(
        method=str(scope.get("method", "POST")),
        path=str(scope["path"]),
        query=bytes(scope.get("query_string", b"")),
        scheme=str(scope.get("scheme", "http")),
        headers=[(k, v) for k, v in scope["headers"] if k not in _DROPPED],
        body=body,
        caller=describe(scope, principal_of),
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
        if not isinstance(headers, list) or not isinstance(caller, dict):
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
        )
    except (ValueError, TypeError, KeyError):
        return None


async def save(store: Store, stream_id: str, request: StoredRequest, ttl_s: float) -> bool:
    """Keep `request` for the stream (`ttl_s`: the running stream's); False when too large."""
    text = encode(request)
    if text is None:
        logger.warning(
            "stream %s: its request is larger than %d bytes; it is not kept, and is not run again "
            "if its node is lost",
            stream_id,
            MAX_REQUEST_BYTES,
        )
        return False
    await store.set_key(keys.rerun_request(stream_id), text, ttl_s)
    await sweep.indexed(store, stream_id, ttl_s)  # (found by a sweep if nobody follows it)
    return True


async def load(store: Store, stream_id: str) -> StoredRequest | None:
    """The stream's kept request (None: never kept, answered, expired, or unreadable)."""
    text = await store.get_key(keys.rerun_request(stream_id))
    return decode(text) if text is not None else None


async def forget(store: Store, stream_id: str) -> None:
    """The call was answered (or ended): nothing is run again."""
    await store.delete_key(keys.rerun_request(stream_id))
    await sweep.unindexed(store, stream_id)


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
