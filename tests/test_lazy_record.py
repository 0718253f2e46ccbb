"""A request's record is created with its first events, in one call of the store
(`Store.open_with`), not when its answer opens; sooner only when something needs it first
(the answer's head going out, with an id to resume from). At the ASGI level, counting the
store's calls (issue 21: a quick answer made three)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import pytest
from starlette.types import Message, Receive, Scope, Send

from mcp_resume_asgi import MemoryStore, Policy, ResumeMiddleware
from mcp_resume_asgi.store.base import StreamMeta, StreamState
from tests.test_direct_path import RESULT, SESSION, Client, _scope

pytestmark = pytest.mark.anyio

WRITES = ("create_stream", "open_with", "append", "append_final", "update_stream", "update_stream_if")


class CountingStore(MemoryStore):
    """The memory store, noting each call that writes a stream (`calls`), and what it held of
    the stream when the client's answer started (`at_head`)."""

    def __init__(self, *, down: bool = False) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.down = down
        self.stream_id: str | None = None

    def is_unavailable_error(self, exc: BaseException) -> bool:
        return isinstance(exc, ConnectionError)

    async def create_stream(self, meta: StreamMeta, ttl_s: float) -> None:
        self.calls.append("create_stream")
        self.stream_id = meta.stream_id
        await super().create_stream(meta, ttl_s)

    async def open_with(
        self, meta: StreamMeta, ttl_s: float, events: Sequence[tuple[int, bytes]], **kw: Any
    ) -> None:
        self.calls.append("open_with")
        if self.down:
            raise ConnectionError("the store is down")
        self.stream_id = meta.stream_id
        await super().open_with(meta, ttl_s, events, **kw)

    async def append(self, stream_id: str, events: Sequence[tuple[int, bytes]], **kw: Any) -> None:
        self.calls.append("append")
        await super().append(stream_id, events, **kw)

    async def append_final(self, stream_id: str, events: Sequence[tuple[int, bytes]], **kw: Any) -> bool:
        self.calls.append("append_final")
        return await super().append_final(stream_id, events, **kw)

    async def update_stream(self, stream_id: str, ttl_s: float | None = None, **kw: Any) -> StreamMeta | None:
        self.calls.append("update_stream")
        return await super().update_stream(stream_id, ttl_s, **kw)

    async def update_stream_if(
        self, stream_id: str, expect: Any, ttl_s: float | None = None, **kw: Any
    ) -> tuple[bool, StreamMeta | None]:
        self.calls.append("update_stream_if")
        return await super().update_stream_if(stream_id, expect, ttl_s, **kw)


class Answering:
    """Answers with SSE: the result, at once or `after_s` after the answer's start."""

    def __init__(self, after_s: float = 0.0) -> None:
        self.after_s = after_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        headers = [(b"content-type", b"text/event-stream"), (b"mcp-session-id", SESSION)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if self.after_s:
            await anyio.sleep(self.after_s)
        await send({"type": "http.response.body", "body": RESULT, "more_body": False})


class Watching(Client):
    """A client noting which store calls were made when its answer's head reached it."""

    def __init__(self, store: CountingStore) -> None:
        super().__init__()
        self.store = store
        self.at_head: list[str] | None = None

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.at_head = list(self.store.calls)
        await super().send(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.complete.set()


async def _call(app: Any, store: CountingStore) -> Watching:
    middleware = ResumeMiddleware(app, policy=Policy(keepalive_s=None), store=store)
    client = Watching(store)
    with anyio.fail_after(10):
        await middleware(_scope(), client.receive, client.send)
    return client


async def test_a_quick_answer_is_recorded_with_its_record_in_one_call_of_the_store() -> None:
    store = CountingStore()
    client = await _call(Answering(), store)
    # Created with the answer, completed (one call), then where the client stopped noted.
    assert store.calls == ["open_with", "update_stream_if"], store.calls
    assert client.at_head == ["open_with"]
    assert store.stream_id is not None
    meta = await store.get_stream(store.stream_id)
    assert meta is not None and meta.state is StreamState.COMPLETED and meta.final_seq == 1
    assert not meta.attached and meta.delivered_seq == 1 and meta.attach_gen == 1
    assert b"".join(m.get("body", b"") for m in client.sent).count(b'"result"') == 1


async def test_a_head_sent_before_the_first_event_is_sent_after_the_record_exists() -> None:
    store = CountingStore()
    client = await _call(Answering(after_s=0.2), store)
    assert client.at_head == ["open_with"], "a client with the stream's id can resume it"
    assert store.calls == ["open_with", "append_final", "update_stream_if"], store.calls
    assert store.stream_id is not None
    meta = await store.get_stream(store.stream_id)
    assert meta is not None and meta.state is StreamState.COMPLETED and meta.delivered_seq == 1


async def test_a_store_down_at_the_first_event_passes_the_answer_through_marked_unavailable() -> None:
    store = CountingStore(down=True)
    client = await _call(Answering(), store)
    assert store.calls == ["open_with"], store.calls
    (start,) = [m for m in client.sent if m["type"] == "http.response.start"]
    assert (b"mcp-resume", b"unavailable") in start["headers"]
    assert b"".join(m.get("body", b"") for m in client.sent).count(b'"result"') == 1
    assert not client.sent[-1].get("more_body", False), "its answer is ended"
    assert b"id: " not in b"".join(m.get("body", b"") for m in client.sent), "no ids: nothing to resume"


class Leaving(Watching):
    """A client that leaves `after_s` after sending its request (before any event reached it)."""

    def __init__(self, store: CountingStore, after_s: float) -> None:
        super().__init__(store)
        self.after_s = after_s

    async def receive(self) -> Message:
        if not hasattr(self, "_asked"):
            return await super().receive()
        await anyio.sleep(self.after_s)
        return {"type": "http.disconnect"}


async def test_a_client_leaving_before_the_first_event_has_the_record_created_detached(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mcp_resume_asgi.core import stream as core_stream

    monkeypatch.setattr(core_stream, "HOLD_HEAD_S", 30.0)  # (no head timer: the leaving creates it)
    store = CountingStore()
    app = Answering(after_s=0.3)
    middleware = ResumeMiddleware(app, policy=Policy(keepalive_s=None), store=store)
    client = Leaving(store, after_s=0.1)
    with anyio.fail_after(10):
        await middleware(_scope(), client.receive, client.send)
        assert store.calls == ["open_with"], store.calls  # created as let go: nothing more to note
        while "append_final" not in store.calls:  # the app goes on, detached, and is recorded
            await anyio.sleep(0.05)
    assert store.stream_id is not None
    meta = await store.get_stream(store.stream_id)
    assert meta is not None and not meta.attached and meta.attach_gen == 1 and meta.delivered_seq == 0
    assert meta.state is StreamState.COMPLETED and meta.final_seq == 1
    assert await store.read(store.stream_id, 0) != [], "its answer waits for its client to resume"


class OpeningHeld(CountingStore):
    """A store that holds the first `open_with` (the head's, before the app's first event) until
    `release`, and refuses every call, `read` included, once `down`."""

    def __init__(self) -> None:
        super().__init__()
        self.head_opening = anyio.Event()
        self.released = anyio.Event()

    async def open_with(
        self, meta: StreamMeta, ttl_s: float, events: Sequence[tuple[int, bytes]], **kw: Any
    ) -> None:
        if not self.head_opening.is_set():
            self.head_opening.set()
            await self.released.wait()
        await super().open_with(meta, ttl_s, events, **kw)

    async def read(self, stream_id: str, after_seq: int, limit: int = 1000) -> list[tuple[int, bytes]]:
        if self.down:
            raise ConnectionError("the store is down")
        return await super().read(stream_id, after_seq, limit)


class AnsweringAfterHead:
    """Answers with SSE; its result comes once the head's creation of the record is under way."""

    def __init__(self, store: OpeningHeld) -> None:
        self.store = store

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        headers = [(b"content-type", b"text/event-stream"), (b"mcp-session-id", SESSION)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await self.store.head_opening.wait()
        await send({"type": "http.response.body", "body": RESULT, "more_body": False})


async def test_a_store_failing_the_heads_record_while_the_first_event_waits_passes_it_through() -> None:
    """The head's timer began creating the record; the app's first event, numbered, waited for
    that; then the store failed it. The connection must not be served from the store the record
    never reached (it was: the read failed, and the client got `retry:` and no answer, which sat
    in memory until the store came back): the answer passes through, marked unavailable."""
    store = OpeningHeld()
    middleware = ResumeMiddleware(AnsweringAfterHead(store), policy=Policy(keepalive_s=None), store=store)
    client = Watching(store)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(middleware, _scope(), client.receive, client.send)
            await store.head_opening.wait()
            await anyio.wait_all_tasks_blocked()  # the app's event waits for the record's creation
            store.down = True
            store.released.set()
    (start,) = [m for m in client.sent if m["type"] == "http.response.start"]
    assert (b"mcp-resume", b"unavailable") in start["headers"], start["headers"]
    body = client.body()
    assert body.count(b'"result"') == 1, body
    assert b"retry:" not in body and b"id: " not in body, body
    assert not client.sent[-1].get("more_body", False), "its answer is ended"


class AnsweringThenEnding:
    """Answers with SSE: the result at once, the answer's end once `end` is set."""

    def __init__(self) -> None:
        self.end = anyio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        headers = [(b"content-type", b"text/event-stream"), (b"mcp-session-id", SESSION)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": RESULT, "more_body": True})
        await self.end.wait()
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def test_a_store_failing_the_first_events_record_while_the_head_waits_sends_one_head() -> None:
    """The app's first event began creating the record; the head's timer came meanwhile and
    waited for that; then the store failed it and the answer passed through. The timer must not
    send a head of its own after it (it did: a second `http.response.start`, which the server
    refuses, and the client's answer broke off)."""
    from mcp_resume_asgi.core import stream as core_stream

    store = OpeningHeld()
    app = AnsweringThenEnding()
    middleware = ResumeMiddleware(app, policy=Policy(keepalive_s=None), store=store)
    client = Watching(store)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(middleware, _scope(), client.receive, client.send)
            await store.head_opening.wait()  # (the app's event's, held)
            await anyio.sleep(core_stream.HOLD_HEAD_S * 4)  # the head's timer falls due meanwhile
            await anyio.wait_all_tasks_blocked()  # and waits for the record's creation
            store.down = True
            store.released.set()
            await anyio.wait_all_tasks_blocked()  # the answer passed through; the timer went on
            app.end.set()
    starts = [m for m in client.sent if m["type"] == "http.response.start"]
    assert len(starts) == 1, starts
    assert (b"mcp-resume", b"unavailable") in starts[0]["headers"], starts[0]["headers"]
    body = client.body()
    assert body.count(b'"result"') == 1, body
    assert b"retry:" not in body and b"id: " not in body, body
    assert not client.sent[-1].get("more_body", False), "its answer is ended"
