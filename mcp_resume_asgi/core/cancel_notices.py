"""`notifications/cancelled` for requests whose close does not cancel them, decided on plain data.

Revision 2026-07-28 made closing a request's SSE stream its cancellation. A client that
declares `protocol.RESUMABLE_STREAMS_EXTENSION` keeps resumable streams instead: its close
only detaches, for it may come back. Such a client cancels the way 2025 clients do, and
2026-07-28 keeps for stdio: it POSTs `notifications/cancelled` with the `requestId` (and
an optional `reason`), declaring the same extension in the notification's `_meta`. The
app cannot act on it - at 2026-07-28 no session ties an id to a request, and the stock SDK
acknowledges and drops such posts - so the middleware does: it finds the request's stream
by who sent the notice (the principal, as the app's own auth sees it), the endpoint, the
request id and, if the request carried one, its `Idempotency-Key`, which the notice
repeats as a header of its own.

Why the key: request ids are the client's and small (1, 2, 3...). Among authenticated
callers the principal keeps one caller from naming another's request; among anonymous
ones (an app without auth: one principal, None) nothing would, and anyone could cancel
anyone's work by guessing ids - why the stock SDK drops posted cancels. So an anonymous
request is cancellable by notice only if it carried an `Idempotency-Key` (unguessable;
the client helper sends one with every request) and the notice repeats it. A binding that
two running requests share (one principal's two clients using the same id, without keys)
names neither: that notice is ignored, as the spec allows ("MAY ignore").

Here, without I/O: whether a POSTed message is such a notice (`notice_of`), whether a
hosted request can be cancelled that way (`cancellable`), which stream a notice names
(`named`), and where its cancel runs (`where`); the store index holding its stream under
its binding is a key format (`store/keys.py`: `cancel_binding`). The glue is `http/client_cancels.py`; the cancel itself, once it reaches
the stream, is the core's (`StreamCore.cancel_asked`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from mcp_resume_asgi.wire import jsonrpc as p

METHOD = "notifications/cancelled"
#: A reason longer than this is cut (it is only logged).
MAX_REASON_CHARS = 200
#: Running requests one binding may name at once; past it they are not registered (a notice
#: naming them is ignored all the same: more than one request shares its binding).
MAX_SHARING = 8


@dataclass(frozen=True, slots=True)
class CancelNotice:
    """A `notifications/cancelled` the middleware answers itself."""

    request_id: Any
    """The request it names; None when it names none validly (it is then ignored)."""
    reason: str | None = None


def notice_of(message: Any, version: str | None, *, in_session: bool) -> CancelNotice | None:
    """`message` as a notice of the opted-in kind: POSTed at 2026-07-28 or later (`version`, the
    request's `MCP-Protocol-Version`), outside any session, declaring the extension in its
    `_meta`. None: not one (it goes to the app untouched, as any other notification)."""
    if (
        not isinstance(message, dict)
        or message.get("method") != METHOD
        or "id" in message
        or in_session
        or not p.at_least(version, p.SINGLE_EXCHANGE_VERSION)
        or not p.asks_resumable_streams(message)
    ):
        return None
    params = message["params"]  # a dict: it declares the extension in its `_meta`
    request_id = params.get("requestId")
    reason = params.get("reason")
    if message.get("jsonrpc") != "2.0" or not p.valid_id(request_id):
        request_id = None  # malformed: "SHOULD be ignored"
    return CancelNotice(request_id, reason[:MAX_REASON_CHARS] if isinstance(reason, str) else None)


def cancellable(*, is_request: bool, version: str, opted_in: bool, survives_close: bool) -> bool:
    """Whether a hosted request is cancelled by a notice: an opted-in 2026-07-28 request (its
    close only detaches). Not a 2025 one (its client's notice goes to the app, on its session),
    nor one that closing never cancelled (SEP-975, a task's next round: `survives_close`)."""
    return is_request and opted_in and p.at_least(version, p.SINGLE_EXCHANGE_VERSION) and not survives_close


def valid_key(values: list[str]) -> str | None:
    """The notice's `Idempotency-Key`: one header of 1-255 printable ASCII characters (what the
    middleware accepts on a request), else none."""
    if len(values) != 1:
        return None
    key = values[0]
    return key if 0 < len(key) <= 255 and key.isascii() and key.isprintable() else None


def named(members: list[tuple[str, float]]) -> str | None:
    """The stream a binding names: its only running request's. None when it holds none, or
    several (ids two clients of one principal both use: cancelling either could be wrong)."""
    return members[0][0] if len(members) == 1 else None


class Where(enum.Enum):
    HERE = 1
    """The request runs on this node: cancel it."""
    OWNER = 2
    """It runs on another node: relay the notice there (if that node is alive)."""
    NOWHERE = 3
    """Nothing to cancel (finished, gone, or not the caller's): acknowledge, do nothing."""


def where(
    *,
    hosted_here: bool,
    hosted_principal: str | None,
    caller: str | None,
    running: bool,
    owner: str | None,
    node_id: str,
    relayed: bool,
) -> Where:
    """Where the cancel of the named stream runs. `hosted_principal` is whose the request is
    here (its binding says so already: checked again), `running` and `owner` what the store
    says of a stream not hosted here; `relayed`: the notice came from another node already."""
    if hosted_here:
        return Where.HERE if hosted_principal == caller else Where.NOWHERE
    if running and owner and owner != node_id and not relayed:
        return Where.OWNER
    return Where.NOWHERE
