"""What a POST on the MCP endpoint is, from its body and headers alone: who answers it.

Sorting a POST is a decision without I/O, so it is a pure function, tested without an
event loop; `ResumeMiddleware` acts on its answer. A body that is JSON but for a `NaN`
or `Infinity` is a parse error (nothing to pass on); an opted-in client's
`notifications/cancelled` is answered by the middleware (`client_cancels.py`); a JSON-RPC
request that may be answered with SSE goes to the engine (through the feature layers);
anything else (a notification, a client's answer to a server request, a batch) goes to
the app as it was sent, the answers in it noted (`client_answers.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from mcp_resume_asgi.core.cancel_notices import METHOD as CANCEL_METHOD
from mcp_resume_asgi.core.cancel_notices import CancelNotice, notice_of
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.asgi import Scope
from mcp_resume_asgi.wire.headers import acceptable, accepts_sse, header, header_count

__all__ = ["INVALID_KEY", "Invalid", "Post", "Sorted", "idempotency_key", "sort_post"]

_VERSION_HEADER = p.VERSION_HEADER.encode()
_SESSION_HEADER = p.SESSION_HEADER.encode()


class Post(Enum):
    """Who answers a POST."""

    NOT_JSON = "not-json"
    """A parse error: JSON but for `NaN` / `Infinity` (400)."""
    CANCEL_NOTICE = "cancel-notice"
    """An opted-in client's cancel notice: the middleware answers it."""
    REQUEST = "request"
    """A JSON-RPC request the engine may answer with SSE."""
    TO_APP = "to-app"
    """Anything else: the app, as sent."""


@dataclass(slots=True)
class Sorted:
    """A POST's sort: who answers it, and what of its body that one needs. (Not frozen: made
    for every POST, and a frozen one sets each field through `object.__setattr__`.)"""

    kind: Post
    message: Any = None
    """The decoded body (None: not JSON the middleware can handle)."""
    notice: CancelNotice | None = None
    """For `CANCEL_NOTICE`: what it names."""
    answered: list[Any] = field(default_factory=list)
    """For `TO_APP`: the ids of the client's answers to server requests in it."""


def sort_post(scope: Scope, body: bytes, named: dict[bytes, bytes] | None = None) -> Sorted:
    """Who answers the JSON POST `body` that came with `scope` (see the module docstring).
    `named`: its headers by name, if none repeats (`headers.named_once`)."""
    message = p.loads_wire(body)
    if message is None and p.non_finite(body):
        return Sorted(Post.NOT_JSON)
    if isinstance(message, dict):
        method = message.get("method")
        if method == CANCEL_METHOD:  # (its headers read only then)
            notice = notice_of(
                message,
                header(scope, _VERSION_HEADER),
                in_session=header(scope, _SESSION_HEADER) is not None,
            )
            if notice is not None:
                return Sorted(Post.CANCEL_NOTICE, message, notice)
        if (
            isinstance(method, str)
            and "id" in message
            and p.valid_id(message["id"])
            and (accepts_sse(scope) if named is None else _accepts_sse(named.get(b"accept")))
        ):
            return Sorted(Post.REQUEST, message)
    # A stock client answers a server-to-client request by POSTing it to the endpoint.
    batch: list[Any] = message if isinstance(message, list) else [message]
    return Sorted(Post.TO_APP, message, answered=[m["id"] for m in batch if p.is_response(m)])


def _accepts_sse(accept: bytes | None) -> bool:
    """`accepts_sse` of a request whose `Accept` is this one line (None: none)."""
    return acceptable(None if accept is None else accept.decode("latin-1"), "text/event-stream")


class Invalid(Enum):
    """A header the request is refused for (400)."""

    KEY = "invalid"


INVALID_KEY = Invalid.KEY
"""What `idempotency_key` returns for an `Idempotency-Key` the request is refused for."""


def idempotency_key(scope: Scope, named: dict[bytes, bytes] | None = None) -> str | Invalid | None:
    """The request's `Idempotency-Key`: None without one, `INVALID_KEY` unless it is one
    header of 1-255 printable ASCII characters. `named`: its headers by name, if none repeats
    (`headers.named_once`)."""
    if named is None:
        key = header(scope, b"idempotency-key")
        if key is None:
            return None
        if header_count(scope, b"idempotency-key") > 1:
            return INVALID_KEY
    else:
        value = named.get(b"idempotency-key")
        if value is None:
            return None
        key = value.decode("latin-1")
    if not 0 < len(key) <= 255 or not key.isascii() or not key.isprintable():
        return INVALID_KEY
    return key
