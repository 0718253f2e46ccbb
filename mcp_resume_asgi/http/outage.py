"""What the middleware does while its store cannot be reached.

Resumability needs the store; the app does not. So when the store fails, the app
keeps answering as it would unwrapped - each answer saying so in a header
(`mcp-resume: unavailable`) - and requests skip the store for `STORE_RETRY_S`
before it is tried again. Only what cannot exist without the store (a resume, a
stream URL) gets a 503 with `Retry-After`, and so does a POST with an `Idempotency-Key`:
the key is claimed in the store, so without it a retry (on another node, or once the store
is back) would run the call a second time. The cause is logged once per outage.
Whether the store is skipped, and that log, are plain state: `store/health.py`.
"""

from __future__ import annotations

from collections.abc import Awaitable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_resume_asgi.engine.port import Feature
from mcp_resume_asgi.http.bodies import read_body_or_refuse, replay_receive
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.headers import header
from mcp_resume_asgi.wire.replies import UNAVAILABLE_HEADER, send_jsonrpc_error
from mcp_resume_asgi.wire.scope_keys import FEATURES_KEY


async def send_unavailable(send: Send) -> None:
    """What a request that needs the store gets while the store is down."""
    await send_jsonrpc_error(
        send,
        503,
        p.STREAM_ERROR,
        "resumability is unavailable right now; retry",
        headers=[UNAVAILABLE_HEADER, (b"retry-after", b"1")],
    )


class TrackedSend:
    """`send` that remembers whether the response started: after that, an error can no
    longer be answered with a status of its own."""

    __slots__ = ("send", "started")

    def __init__(self, send: Send) -> None:
        self.send = send
        self.started = False

    def __call__(self, message: Message) -> Awaitable[None]:
        # The server's own `send` awaited in its place: no coroutine of ours per message.
        if message["type"] == "http.response.start":
            self.started = True
        return self.send(message)


async def without_store(
    app: ASGIApp,
    scope: Scope,
    receive: Receive,
    send: Send,
    *,
    stream_url: bool,
    max_body_bytes: int,
    body: bytes | None = None,
) -> None:
    """The app answers as it would unwrapped, and says so in a header. What cannot be
    served without the store - a resume, a stream URL, a method a feature layer answers
    itself (`tasks/get`, `requests/resume`...), a POST whose `Idempotency-Key` could not be
    claimed - gets a 503: retry later."""
    method = scope["method"]
    if (
        stream_url
        or (method == "GET" and header(scope, b"last-event-id") is not None)
        or (method == "POST" and header(scope, b"idempotency-key") is not None)
    ):
        await send_unavailable(send)
        return
    features: tuple[Feature, ...] = scope.get(FEATURES_KEY, ())
    owned = frozenset().union(*(feature.answers for feature in features))
    if body is None and owned and method == "POST":
        body = await read_body_or_refuse(receive, send, max_body_bytes)
        if body is None:
            return
    if body is not None:
        message = p.loads_wire(body) if owned else None
        if isinstance(message, dict) and message.get("method") in owned:
            await send_unavailable(send)
            return
        receive = replay_receive(body, receive)

    async def tagged(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = dict(message, headers=[*message.get("headers", []), UNAVAILABLE_HEADER])
        await send(message)

    await app(scope, receive, tagged)
