"""A request of the app, hosted here: its app call, what it sends, and who is told.

The app runs on the task of the ASGI call that brought the request, with a
`receive` that never reports its client leaving and a `send` that lands in
`on_app_send`: each SSE event the app sends is given an id by the stream's core,
recorded in the store and written, from that same `send`, to whichever client
connection is attached now (zero or one; see `writer.py`). The app's own
disconnect listener reads the first connection's `receive`, so it is also how we
learn that client left. When the app is done the call waits for its first
connection to be let go, and returns.

What the app answers decides the mode: an SSE stream is recorded (`STREAM`);
anything else passes through untouched (`PASSTHROUGH`); a request whose stream
had to exist before the app answered (an `Idempotency-Key`, SEP-975, resume
tokens, `upgrade_json_after_s`) is `UPGRADED`: the client's answer is an SSE
stream of the engine's own, and a JSON answer of the app becomes its one event.
That decision, taken when the app's response starts, is `first_answer.py`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from typing import TYPE_CHECKING, Any

import anyio
from starlette.types import Message, Scope

from mcp_resume_asgi import expiry
from mcp_resume_asgi import protocol as p
from mcp_resume_asgi.core.stream import FirstGone, StreamCore
from mcp_resume_asgi.engine.connection import Connection, Flag
from mcp_resume_asgi.engine.port import Delivery
from mcp_resume_asgi.first_answer import FirstAnswer, Mode
from mcp_resume_asgi.policy import Policy
from mcp_resume_asgi.recording import Recorder
from mcp_resume_asgi.scheduler import spawn
from mcp_resume_asgi.sse import SSEError, SSEEvent, SSEParser, single_event_frame
from mcp_resume_asgi.store.base import StreamKind
from mcp_resume_asgi.tokens import new_stream_id
from mcp_resume_asgi.wire.replies import send_bytes

if TYPE_CHECKING:
    from mcp_resume_asgi.engine.services import StreamServices

logger = logging.getLogger(__name__)

#: A request whose stream opens before the app answers (Idempotency-Key, SEP-975...)
#: holds its client's answer this long for the app's status, so that the app's own
#: refusal (404, 400) reaches the client as that status.
STATUS_HOLD_S = 1.0


class HostedStream(FirstAnswer):
    """One request (or standalone GET) of the app, hosted on this node."""

    def __init__(
        self,
        services: StreamServices[HostedStream],
        *,
        kind: StreamKind,
        scope: Scope,
        body: bytes,
        route: int,
        policy: Policy,
        version: str,
        session_id: str | None,
        request_id: Any = None,
        method: str | None = None,
        stream_id: str | None = None,
        opted_in: bool = False,
    ) -> None:
        self.engine = services
        """The engine's services to its streams (`StreamServices`), under the name the stream's
        parts (`first_answer.py`, `writer.py`, `recording.py`, `expiry.py`) call them by."""
        self.store = services.store
        self.kind = kind
        self.scope = scope
        self.body = body
        self.route = route
        self.policy = policy
        self.version = version
        self.session_id = session_id
        self.principal = services.principal(scope)
        self.request_id = request_id
        self.method = method
        self.path: str = scope["path"]
        self.stream_id = stream_id or new_stream_id()
        self.opted_in = opted_in
        """The client asked for a resumable stream (`protocol.RESUMABLE_STREAMS_EXTENSION`)."""
        self.core = StreamCore(
            policy,
            version=version,
            is_request=kind is StreamKind.REQUEST,
            request_id=request_id,
            now=time.monotonic(),
            opted_in=opted_in,
        )
        self.recorder = Recorder(self)
        self.mode: Mode | None = None
        self.meta_created = False
        self.prefix: bytes | None = b""
        self.first: Connection | None = None
        """The connection that brought the request (its answer is the app's response)."""
        self.held: Connection | None = None
        """The first connection while its answer waits for the app's decision (UPGRADED)."""
        self.delivery: Delivery | None = None
        self.first_messages: list[dict[str, Any]] = []
        self.idempotency_key: str | None = None
        self.app_started = False
        self.app_disconnect = Flag()
        self.app_scope = anyio.CancelScope()
        self.done = Flag()
        self.opened = Flag()
        """Set once the stream's record exists (a retried POST waits for it)."""
        self.expired = False
        self.left_early = False
        """The client left before the app decided how to answer."""
        self.parser = SSEParser(policy.max_event_bytes)
        self.json_status = 200
        self.upgraded_sse = False
        self.json_chunks: list[bytes] = []
        self.json_size = 0
        self.passthrough_body: list[bytes] = []
        super().__init__()

    # ------------------------------------------------------------------ hosting
    async def host(self, client: Connection, *, open_before_s: float | None) -> tuple[str, int] | None:
        """Run the app's request for `client`; returns how that connection ended (see `serve`)."""
        engine = self.engine
        engine.live[self.stream_id] = self
        self.first = client
        try:
            if self.delivery is not None and self.delivery.deadline_s is not None:
                self.core.answer_within(self.delivery.deadline_s)
            if open_before_s is not None:
                self.held = client
                if open_before_s == 0:
                    self.core.open_ahead()
                    # Open the stream's record before the app runs (a retry or a resume can find it
                    # at once), but not the client's answer: that waits for the app's status.
                    await self.upgrade()
                    if self.first_messages:
                        await self.recorder.record_events(
                            [SSEEvent(data=p.dumps(m), event=b"message") for m in self.first_messages]
                        )
                    open_before_s = STATUS_HOLD_S
                self.core.hold(time.monotonic(), open_before_s)
                self.arm()
            await self.run_app()
            await self.finish_first()
            await expiry.forget(self)
            return self.outcome
        finally:
            self.timer.cancel()
            engine.live.pop(self.stream_id, None)

    async def run_app(self) -> None:
        body_sent = False

        async def app_receive() -> Message:
            nonlocal body_sent
            if not body_sent:
                body_sent = True
                await self.request_taken()
                return {"type": "http.request", "body": self.body, "more_body": False}
            first = self.first
            if first is not None and not self.app_disconnect.is_set():
                # The app's own disconnect listener is our watcher of its client.
                await first.listen()
                if first.gone.is_set():
                    await self.first_gone(first)
            await self.app_disconnect.wait()
            return {"type": "http.disconnect"}

        async def app_send(message: Message) -> None:
            await self.on_app_send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                # What a server tells an app whose response is complete: its disconnect
                # listener ends normally instead of being cancelled.
                self.disconnect_app()

        try:
            with self.app_scope:
                await self.engine.app(self.scope, app_receive, app_send)
        except Exception:
            if self.mode is Mode.STREAM or self.mode is Mode.UPGRADED:
                logger.exception("app failed while streaming %s", self.stream_id)
            elif not self.app_started:
                raise  # as unwrapped: the server answers 500
            else:
                logger.exception("app failed after starting its response")
        finally:
            with anyio.CancelScope(shield=True):
                await self.app_finished()

    async def first_gone(self, first: Connection) -> None:
        """The first connection's client left: what that means is the core's (`first_gone`)."""
        actions = self.core.first_gone(
            attached=first.attachment is not None,
            busy=first.busy,
            released=first.released.is_set(),
            mode=self.mode,
            survives_close=self.delivery is not None and self.delivery.survives_close,
        )
        for action in actions:
            if action is FirstGone.RELEASE:
                await self.release(first)  # the resume window starts now (or the app is cancelled)
            elif action is FirstGone.CANCEL:
                spawn(expiry.closed_by_client, self)  # before its answer opened
            elif action is FirstGone.LEFT_EARLY:
                self.left_early = True
            else:  # a JSON answer: the client leaving means what it does unwrapped
                self.app_disconnect.set()

    async def request_taken(self) -> None:
        """The app reads the request: its auth has let it through and said who is calling,
        which the stream's record (opened before the app ran) learns now."""
        principal = self.engine.principal(self.scope)
        try:
            if principal != self.principal and self.meta_created:
                await self.store.update_stream(self.stream_id, principal=principal)
        except Exception as exc:
            if not self.engine.store_outage(exc):
                raise
        self.principal = principal
        await self.engine.cancel_bindings.taken(self)  # a notice may cancel it from now on
        if self.core.request_read(time.monotonic()):
            self.arm()

    async def cancel(self, reason: str) -> None:
        """Stop the app's work the way its protocol revision expects (`expiry.cancel_app`)."""
        await expiry.cancel_app(self, reason)

    def disconnect_app(self) -> None:
        """Tell the app its request is over (`http.disconnect` on its `receive`)."""
        self.app_disconnect.set()
        first = self.first
        if first is not None and first.listening:
            first.stop_listening()  # the app's listener may be reading its client's `receive`

    async def app_finished(self) -> None:
        try:
            await self.recorder.flush()
            if self.mode is Mode.UPGRADED and not self.core.final_seq:
                await self.recorder.record_json_answer()
            if (self.mode is Mode.STREAM or self.mode is Mode.UPGRADED) and self.meta_created:
                if self.parser.pending.strip():
                    with contextlib.suppress(SSEError):
                        await self.recorder.record_events(self.parser.feed(b"\n\n"))
                # Each write of the app's end is in the store (and the core knows its answer) before
                # the next step reads `final_seq`, and before the stream is concluded: with
                # write-behind, a write still under way would land after the request is over.
                await self.recorder.flush()
                if self.kind is StreamKind.REQUEST and self.core.final_seq is None and not self.expired:
                    await self.recorder.record_error("the server ended the stream without a response")
                    await self.recorder.flush()
                if self.expired:
                    await self.store.delete_stream(self.stream_id)  # nobody is coming back for it
                elif self.core.final_seq is None:  # (a request's answer completed it when recorded)
                    await self.recorder.complete()
            elif self.mode is None and self.first is not None:
                first = self.first
                if not first.started and not first.gone.is_set():
                    await send_bytes(
                        first.send_message, 500, b"Internal Server Error", content_type=b"text/plain"
                    )
        finally:
            self.core.app_finished()
            self.done.set()
            self.opened.set()
            self.app_disconnect.set()
            self.after_app()
            await self.engine.cancel_bindings.forget(self.stream_id)

    # ------------------------------------------------------------------ the app's answer
    async def on_app_send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            await self.on_response_start(message)
            return
        if kind != "http.response.body":
            if self.mode is Mode.PASSTHROUGH and self.first is not None:
                await self.first.send(message)
            return
        body: bytes = message.get("body", b"")
        mode = self.mode
        if mode is Mode.STREAM or (mode is Mode.UPGRADED and self.upgraded_sse):
            frame = None if self.parser.pending else single_event_frame(body)
            if frame is not None:  # the usual shape, one whole event per chunk: no parsing, no copy
                await self.recorder.record_frames([frame])
                return
            try:
                events = self.parser.feed(body) if body else []
            except SSEError:
                logger.error("stream %s: the app sent an oversized event; ending the stream", self.stream_id)
                await self.recorder.record_error(
                    "the server produced an event larger than the configured limit"
                )
                self.app_disconnect.set()
                return
            if events:
                await self.recorder.record_events(events)
        elif mode is Mode.UPGRADED:
            self.json_size += len(body)
            if self.json_size <= self.policy.max_event_bytes:
                self.json_chunks.append(body)
            if not message.get("more_body", False):
                await self.recorder.record_json_answer()
        elif mode is Mode.PASSTHROUGH:
            if self.method == "initialize" and self.json_size < 65536:
                self.json_size += len(body)
                self.passthrough_body.append(body)
                if not message.get("more_body", False):
                    await self.learn_session(b"".join(self.passthrough_body))
            if self.first is not None:
                await self.first.send(message)

    async def learn_session(self, body: bytes) -> None:
        if self.session_id is None:
            return
        try:
            answer = json.loads(body)
        except ValueError:
            return
        await self.engine.sessions.remember(self, answer)
