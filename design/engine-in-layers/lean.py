"""THROWAWAY PROTOTYPE (not for merging): the leanest path for the common case of issue 21.

A `tools/call` answered with SSE, wrapped so that:
- the client gets a priming event (`id:` + `retry:`) and signed event ids `<prefix><seq>`,
  and a `Link rel="stream"` header (the link token is the event-id prefix: ONE HMAC per request);
- every event is recorded in the real `MemoryStore` (create_stream, append, update_stream on the
  final answer) before it is written;
- the app's request runs in an engine-owned task (asyncio: `loop.create_task` into a set the
  engine owns, context copied), not on the POST's task: the POST's ASGI call returns as soon as
  its client is gone (or its answer is complete), the app goes on;
- one delivery path per connection: the app's own task writes the recorded event straight to
  the attached connection (no queue, no hand-off) while the POST's task only waits on its
  `receive` for the client leaving; a connection nobody may write now is caught up by whoever
  frees it (not exercised by the benchmark);
- one scheduler: a deadline heap driven by ONE `loop.call_at` handle (no driver task, no
  cancel scope): the held head (5 ms) and the keep-alive (15 s) are heap entries.

Everything else (resumes, Idempotency-Key, features, 2026 cancel, outages, trio) is out of
scope: the point is to measure what the required semantics cost, not to implement them.
Switches (env LEAN_*) let the benchmark price each design choice.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import heapq
import hmac
import itertools
import json
import os
import secrets
import time
from collections.abc import Callable
from typing import Any

from mcp_resume_asgi import protocol as p
from mcp_resume_asgi.sse import single_event_frame, SSEParser, encode_payload
from mcp_resume_asgi.store.base import StreamKind, StreamMeta, StreamState
from mcp_resume_asgi.store.memory import MemoryStore, _Entry


class LeanMemoryStore(MemoryStore):
    """The prototype's one extra store call: a stream's record created WITH its first events (and,
    for an answer complete in them, completed) in one call - one round trip on Redis - taking
    ownership of `meta` (no copy)."""

    async def open_with(
        self,
        meta: StreamMeta,
        events: list[tuple[int, bytes]],
        *,
        ttl_s: float,
        final_seq: int | None,
        completed_ttl_s: float,
    ) -> None:
        now = time.monotonic()
        if self._expiry and self._expiry[0][0] <= now:
            self._sweep(now)
        if len(self._streams) >= self.max_streams:
            await self.create_stream(meta, ttl_s)  # (the full path: evicts or refuses)
            del self._streams[meta.stream_id]
        entry = _Entry(meta, 0.0)
        meta.version = 1
        added = 0
        for event in events:
            entry.events.append(event)
            added += len(event[1])
        entry.nbytes = added
        self._total_bytes += added
        meta.last_seq = events[-1][0] if events else 0
        if final_seq is not None:
            meta.final_seq = final_seq
            meta.state = StreamState.COMPLETED
            ttl_s = completed_ttl_s
        self._streams[meta.stream_id] = entry
        self._set_expiry(meta.stream_id, entry, ttl_s)
        if meta.session_id is not None:
            self._session_streams.setdefault(meta.session_id, set()).add(meta.stream_id)
        if self._total_bytes > self.max_bytes:
            self._enforce_budget(meta.stream_id)


HOLD_HEAD_S = 0.005
KEEPALIVE_S = 15.0
RETRY_MS = 1000
SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"x-accel-buffering", b"no"),
]
_SKIP = {
    b"content-length",
    b"link",
    b"transfer-encoding",
    b"content-type",
    b"cache-control",
    b"x-accel-buffering",
}

#: Design switches, priced one by one by plan/lean_bench.py.
DETACH = os.environ.get("LEAN_DETACH", "1") == "1"  # the app in an engine task (else on the POST's task)
STORE = os.environ.get("LEAN_STORE", "memory")  # "memory" (the real MemoryStore) or "list"
TIMERS = os.environ.get("LEAN_TIMERS", "1") == "1"  # held-head and keep-alive heap entries


# ---------------------------------------------------------------------------- scheduler
#: Timers may fire this much late, so that a burst of streams re-arms the loop's timer once.
SLACK_S = 0.002


class Timer:
    """A stream's place in the heap: `cancel()` drops the callback (and with it the stream) at
    once; the heap's entry then holds only this small object until it comes due."""

    __slots__ = ("armed_at", "callback")

    def __init__(self, callback: Callable[[float], float | None]) -> None:
        self.callback: Callable[[float], float | None] | None = callback
        self.armed_at = float("inf")

    def cancel(self) -> None:
        self.callback = None


class Scheduler:
    """A deadline heap driven by one `loop.call_at` handle (asyncio; trio: one system task
    sleeping until the head); callbacks must not block. A callback returns its next deadline."""

    __slots__ = ("_counter", "_handle", "_heap", "_next_at")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Timer]] = []
        self._counter = itertools.count()
        self._handle: asyncio.TimerHandle | None = None
        self._next_at = float("inf")

    def arm(self, timer: Timer, when: float | None) -> None:
        if when is None or when >= timer.armed_at or timer.callback is None:
            return
        timer.armed_at = when
        heapq.heappush(self._heap, (when, next(self._counter), timer))
        if when < self._next_at - SLACK_S:
            if self._handle is not None:
                self._handle.cancel()
            self._next_at = when + SLACK_S
            self._handle = asyncio.get_running_loop().call_at(self._next_at, self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._next_at = float("inf")
        now = time.monotonic()
        heap = self._heap
        while heap and heap[0][0] <= now:
            when, _, timer = heapq.heappop(heap)
            if timer.armed_at != when:
                continue  # stale: armed earlier since
            timer.armed_at = float("inf")
            callback = timer.callback
            if callback is not None:
                self.arm(timer, callback(now))
        while heap and heap[0][2].callback is None:
            heapq.heappop(heap)
        if heap and self._handle is None:
            self._next_at = heap[0][0] + SLACK_S
            self._handle = asyncio.get_running_loop().call_at(self._next_at, self._fire)


# ---------------------------------------------------------------------------- engine
class LeanEngine:
    """Owns the app's tasks (a set; lifespan would cancel them on shutdown) and the timers."""

    def __init__(self, app: Any, secret: bytes, flags: str = "") -> None:
        self.app = app
        self.detach = DETACH and "nodetach" not in flags
        self.store_kind = "list" if "nostore" in flags else STORE
        self.timers = TIMERS and "notimers" not in flags
        self.key = hashlib.sha256(b"event-id" + secret).digest()
        self.store = LeanMemoryStore()
        self.one_call = "twocalls" not in flags
        self.tasks: set[asyncio.Task[Any]] = set()
        self.scheduler = Scheduler()
        self.live: dict[str, Stream] = {}

    def spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)  # copies the request's context
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def prefix(self, stream_id: str) -> bytes:
        """`<stream_id>.<sig>:` - the event ids' prefix AND the Link token (one HMAC)."""
        raw = stream_id.encode()
        sig = hmac.digest(self.key, raw, "sha256")[:12]  # one-shot, in C
        return raw + b"." + base64.urlsafe_b64encode(sig) + b":"


class Conn:
    """The client connection attached to a stream (zero or one)."""

    __slots__ = ("busy", "cursor", "done", "gone", "head", "headers", "send", "started", "waiter")

    def __init__(self, send: Any) -> None:
        self.send = send
        self.started = False
        self.done = False
        self.gone = False
        self.busy = False
        self.cursor = 0
        self.head = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.waiter: asyncio.Task[Any] | None = None


class Stream:
    """One hosted request: the app's task writes, the POST's task only watches its client."""

    __slots__ = (
        "app_done",
        "body",
        "conn",
        "disconnect",
        "engine",
        "final_seq",
        "meta",
        "meta_created",
        "mode",
        "parser",
        "path",
        "prefix",
        "request_id",
        "scope",
        "seq",
        "session_id",
        "stream_id",
        "timer",
    )

    def __init__(
        self, engine: LeanEngine, scope: Any, body: bytes, request_id: Any, session_id: str | None
    ) -> None:
        self.engine = engine
        self.scope = scope
        self.body = body
        self.request_id = request_id
        self.session_id = session_id
        self.path = scope["path"]
        self.stream_id = secrets.token_urlsafe(12)
        self.prefix = b""
        self.seq = 0
        self.final_seq: int | None = None
        self.mode = 0  # 0 undecided, 1 stream, 2 passthrough
        self.conn: Conn | None = None
        self.disconnect: asyncio.Future[None] | None = None
        self.app_done = False
        self.meta_created = False
        self.meta: StreamMeta | None = None
        self.parser: SSEParser | None = None
        self.timer: Timer | None = None

    # -------------------------------------------------------------- the app's side
    async def run_app(self) -> None:
        body_sent = False

        async def app_receive() -> dict[str, Any]:
            nonlocal body_sent
            if not body_sent:
                body_sent = True
                return {"type": "http.request", "body": self.body, "more_body": False}
            if self.disconnect is None:
                self.disconnect = asyncio.get_running_loop().create_future()
            if not self.disconnect.done():
                await self.disconnect
            return {"type": "http.disconnect"}

        try:
            await self.engine.app(self.scope, app_receive, self.on_app_send)
        finally:
            self.app_done = True
            await self.app_finished()

    @property
    def final_heads(self) -> tuple[bytes, bytes]:
        """How the SDK (pydantic, compact) starts the request's response: matched without parsing."""
        rid_ = self.request_id
        rid = str(rid_).encode() if type(rid_) is int else json.dumps(rid_, separators=(",", ":")).encode()
        return (
            b'{"jsonrpc":"2.0","id":' + rid + b',"result":',
            b'{"jsonrpc":"2.0","id":' + rid + b',"error":',
        )

    def _is_final(self, data: bytes) -> bool:
        kind, message_id = p.classify(data)  # any other serialisation: parsed
        return kind is p.Kind.RESPONSE and message_id == self.request_id

    def tell_app_over(self) -> None:
        if self.disconnect is None:
            self.disconnect = asyncio.get_running_loop().create_future()
        if not self.disconnect.done():
            self.disconnect.set_result(None)

    async def on_app_send(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "http.response.body":
            if self.mode == 1:
                body = message.get("body", b"")
                if body:
                    frame = None if self.parser is not None else single_event_frame(body)
                    if frame is not None:
                        await self.record([frame])
                    else:
                        if self.parser is None:
                            self.parser = SSEParser()
                        events = self.parser.feed(body)
                        await self.record(
                            [(encode_payload(e.data, e.event), e.data) for e in events if e.data]
                        )
            elif self.mode == 2:
                conn = self.conn
                if conn is not None and not conn.gone:
                    await self.write(conn, message)
            if not message.get("more_body", False):
                self.tell_app_over()
        elif kind == "http.response.start":
            await self.on_start(message)

    async def on_start(self, message: dict[str, Any]) -> None:
        status = message["status"]
        headers = message.get("headers", [])
        content_type = b""
        for k, v in headers:
            if k.lower() == b"content-type":
                content_type = v.split(b";", 1)[0].strip().lower()
        conn = self.conn
        if status != 200 or content_type != b"text/event-stream":
            self.mode = 2
            if conn is not None and not conn.gone:
                await self.write(conn, message)
            return
        self.mode = 1
        engine = self.engine
        self.prefix = engine.prefix(self.stream_id)
        meta = self.meta = StreamMeta(
            stream_id=self.stream_id,
            kind=StreamKind.REQUEST,
            session_id=self.session_id,
            principal=None,
            protocol_version="2025-11-25",
            path=self.path,
            request_id=self.request_id,
            method="tools/call",
            owner="node",
            route=0,
            attached=conn is not None,
            attach_gen=1,
            last_contact=time.time(),
        )
        if self.engine.store_kind == "memory" and not engine.one_call:
            await engine.store.create_stream(meta, ttl_s=3600)
            self.meta_created = True
        if conn is None or conn.gone:
            return
        extra = [(k, v) for k, v in headers if k.lower() not in _SKIP]
        link = b"</mcp/streams/" + self.prefix + b'0>; rel="stream"'
        conn.headers = [*SSE_HEADERS, *extra, (b"link", link)]
        conn.head = b"id: " + self.prefix + b"0\nretry: " + str(RETRY_MS).encode() + b"\ndata: \n\n"
        if engine.timers:
            self.timer = Timer(self._due)
            engine.scheduler.arm(self.timer, time.monotonic() + HOLD_HEAD_S)

    def _due(self, now: float) -> float | None:
        """The stream's one timer: the held head, then the keep-alive (a real one asks the core)."""
        conn = self.conn
        if conn is None or conn.gone:
            return None
        if not conn.started:
            if not conn.busy:
                self.engine.spawn(self._send_head(conn))
            return now + KEEPALIVE_S
        return now + KEEPALIVE_S

    async def _send_head(self, conn: Conn) -> None:
        conn.busy = True
        try:
            if not self.meta_created and self.meta is not None and self.engine.store_kind == "memory":
                self.meta_created = True  # the Link goes out now: the record must exist first
                await self.engine.store.create_stream(self.meta, ttl_s=3600)
            await self.start(conn)
        finally:
            conn.busy = False

    async def record(self, frames: list[tuple[bytes, bytes]]) -> None:
        batch = []
        final = False
        for payload, data in frames:
            if self.final_seq is not None:
                break
            self.seq += 1
            batch.append((self.seq, payload))
            if b'"id"' in data and (data.startswith(self.final_heads) or self._is_final(data)):
                self.final_seq = self.seq
                final = True
        if not batch:
            return
        store = self.engine.store
        if self.engine.store_kind == "memory" and not self.meta_created:
            assert self.meta is not None
            self.meta_created = True
            await store.open_with(
                self.meta, batch, ttl_s=3600, final_seq=self.final_seq, completed_ttl_s=60.0
            )
        elif self.engine.store_kind == "memory":
            await store.append(self.stream_id, batch, max_events=10_000, max_bytes=8 << 20)
            if final:
                await store.update_stream(
                    self.stream_id, ttl_s=60.0, final_seq=self.final_seq, state=StreamState.COMPLETED
                )
        conn = self.conn
        if conn is not None and not conn.busy and not conn.gone:
            await self.deliver(conn, batch, final)

    async def deliver(self, conn: Conn, batch: list[tuple[int, bytes]], final: bool) -> None:
        """Write `batch` to `conn` (the caller holds nothing; one writer at a time)."""
        conn.busy = True
        try:
            id_head = b"id: " + self.prefix
            data = b"".join(id_head + str(seq).encode() + b"\n" + payload for seq, payload in batch)
            if not conn.started:
                if not await self.start(conn):
                    return
                data = conn.head + data
                conn.head = b""
            await self.write(conn, {"type": "http.response.body", "body": data, "more_body": not final})
            conn.cursor = batch[-1][0]
            if final:
                self.release(conn)
        finally:
            conn.busy = False

    async def start(self, conn: Conn) -> bool:
        return await self.write(conn, {"type": "http.response.start", "status": 200, "headers": conn.headers})

    async def write(self, conn: Conn, message: dict[str, Any]) -> bool:
        try:
            await conn.send(message)
        except Exception:
            conn.gone = True
            return False
        if message["type"] == "http.response.start":
            conn.started = True
        elif not message.get("more_body", False):
            conn.done = True
            self.release(conn)
        return True

    def release(self, conn: Conn) -> None:
        """The connection's answer is complete: its POST task may return (see `serve_first`)."""
        if self.conn is conn:
            self.conn = None
            if self.timer is not None:
                self.timer.cancel()  # (a detached stream arms its resume window instead)
        waiter = conn.waiter
        if waiter is not None:
            # A server that wakes a pending `receive` when the response completes (uvicorn,
            # hypercorn, the ASGI spec's wording) has done so already; else stop it next turn.
            asyncio.get_running_loop().call_soon(_interrupt, conn)

    async def app_finished(self) -> None:
        if self.mode == 1 and self.final_seq is None and (self.meta_created or self.meta is not None):
            error = p.error_message(
                self.request_id, p.STREAM_ERROR, "the server ended the stream without a response"
            )
            await self.record([(encode_payload(p.dumps(error)), p.dumps(error))])
        conn = self.conn
        if conn is not None and conn.started and not conn.done and not conn.gone:
            await self.write(conn, {"type": "http.response.body", "body": b"", "more_body": False})
        elif conn is not None and not conn.started and not conn.gone and self.mode == 0:
            await self.write(conn, {"type": "http.response.start", "status": 500, "headers": []})
            await self.write(conn, {"type": "http.response.body", "body": b"Internal Server Error"})
        self.engine.live.pop(self.stream_id, None)

    # -------------------------------------------------------------- the POST's side
    async def serve_first(self, receive: Any, send: Any) -> None:
        """The POST's task: watch the client until its answer is complete or it leaves."""
        conn = self.conn = Conn(send)
        engine = self.engine
        engine.live[self.stream_id] = self
        if not engine.detach:
            await self.run_app()
            return
        engine.spawn(self.run_app())
        task = asyncio.current_task()
        assert task is not None
        conn.waiter = task
        try:
            while not conn.done:
                message = await receive()
                if message["type"] == "http.disconnect":
                    break
        except asyncio.CancelledError:
            if conn.waiter is not None or task.uncancel() > 0:
                raise  # not (only) ours
        finally:
            conn.waiter = None
        if not conn.done:
            conn.gone = True  # the client left: the app goes on (resume window), detached
            if self.conn is conn:
                self.conn = None
            if self.mode == 2:
                self.tell_app_over()  # a JSON answer: the client leaving means what it does unwrapped
            # (a real engine waits here for a write in flight, then notes the detach in the store)


def _interrupt(conn: Conn) -> None:
    waiter, conn.waiter = conn.waiter, None
    if waiter is not None:
        waiter.cancel()


class LeanMiddleware:
    """The ASGI front for the prototype: POSTs with a JSON-RPC request are hosted."""

    def __init__(self, app: Any, secret: bytes = b"bench", flags: str = "") -> None:
        self.app = app
        self.engine = LeanEngine(app, secret, flags)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != "/mcp":
            await self.app(scope, receive, send)
            return
        accept = content_type = session_id = None
        for k, v in scope["headers"]:
            if k == b"accept":
                accept = v
            elif k == b"content-type":
                content_type = v
            elif k == b"mcp-session-id":
                session_id = v.decode("latin-1")
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        if (
            isinstance(parsed, dict)
            and isinstance(parsed.get("method"), str)
            and "id" in parsed
            and accept is not None
            and b"text/event-stream" in accept
            and content_type is not None
            and content_type.startswith(b"application/json")
        ):
            stream = Stream(self.engine, scope, body, parsed["id"], session_id)
            await stream.serve_first(receive, send)
            return
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
