"""A request's first connection, written from the app's own `send`, at the ASGI level.

What it promises beyond the engine suite : a quick
answer reaches the client in as few writes as the bare app makes; a client that
stops reading never holds the app, and still gets every event, once, in order,
when it reads again; the app hears `http.disconnect` once its response is
complete, as a server would tell it. These drive the middleware with plain ASGI
calls, so they can see each `send` and stall one on purpose.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.types import Message, Receive, Scope, Send

from mcp_resume_asgi import MemoryStore, Policy, ResumeMiddleware
from mcp_resume_asgi.engine import recorder as recorder_module
from mcp_resume_asgi.engine.recorder import BURST_BACKOFF
from mcp_resume_asgi.wire.sse import SSEParser, single_event_frame
from tests.support.timing import scaled

pytestmark = pytest.mark.anyio

SESSION = b"direct-path-session"
REQUEST = json.dumps(
    {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "t", "arguments": {}}}
).encode()


def _scope() -> Scope:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"accept", b"application/json, text/event-stream"),
            (b"content-type", b"application/json"),
            (b"mcp-protocol-version", b"2025-11-25"),
            (b"content-length", str(len(REQUEST)).encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


def _event(data: dict[str, Any]) -> bytes:
    return b"event: message\ndata: " + json.dumps(data).encode() + b"\n\n"


def _progress(i: int) -> bytes:
    return _event({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": i}})


RESULT = _event({"jsonrpc": "2.0", "id": 7, "result": {"content": []}})


class App:
    """Answers with SSE: `notes` progress events, then the result; notes what `receive()` said after."""

    def __init__(self, notes: int = 0) -> None:
        self.notes = notes
        self.finished = anyio.Event()
        self.after_response: str | None = None
        self.heard = anyio.Event()
        """Set once the app's `receive` after its response said what it said."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        headers = [(b"content-type", b"text/event-stream"), (b"mcp-session-id", SESSION)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for i in range(1, self.notes + 1):
            await send({"type": "http.response.body", "body": _progress(i), "more_body": True})
            await anyio.lowlevel.checkpoint()
        await send({"type": "http.response.body", "body": RESULT, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        self.finished.set()
        with anyio.fail_after(scaled(2)):
            self.after_response = (await receive())["type"]
        self.heard.set()


class Client:
    """One connection: records every `send`; `stall()` makes the next body write block until `resume()`."""

    def __init__(self) -> None:
        self.sent: list[Message] = []
        self.complete = anyio.Event()
        self._stalled: anyio.Event | None = None

    def stall(self) -> None:
        self._stalled = anyio.Event()

    def resume(self) -> None:
        if self._stalled is not None:
            self._stalled.set()

    async def receive(self) -> Message:
        if not self.sent and not hasattr(self, "_asked"):
            self._asked = True
            return {"type": "http.request", "body": REQUEST, "more_body": False}
        await self.complete.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.body" and self._stalled is not None:
            await self._stalled.wait()  # a client that stopped reading: the transport's buffer is full
        self.sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.complete.set()

    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")


def _data_lines(raw: bytes) -> list[bytes]:
    return [line for line in raw.split(b"\n") if line.startswith(b"data: {")]


async def test_a_quick_answer_goes_out_in_two_writes_with_priming_first() -> None:
    app = App()
    middleware = ResumeMiddleware(app, policy=Policy(), store=MemoryStore())
    client = Client()
    await middleware(_scope(), client.receive, client.send)
    kinds = [(m["type"], m.get("more_body", False)) for m in client.sent]
    # headers, then one body: priming event + the result, ending the response
    assert kinds == [("http.response.start", False), ("http.response.body", False)], kinds
    raw = client.body()
    assert raw.startswith(b"id: ") and b"retry: " in raw.split(b"\n\n", 1)[0]
    assert _data_lines(raw) == [b"data: " + RESULT.split(b"data: ", 1)[1].rstrip(b"\n")]


async def test_the_app_hears_disconnect_once_its_response_is_complete() -> None:
    app = App()
    middleware = ResumeMiddleware(app, policy=Policy(), store=MemoryStore())
    client = Client()
    await middleware(_scope(), client.receive, client.send)
    assert app.after_response == "http.disconnect"


async def test_a_stalled_client_never_holds_the_app_and_gets_everything_in_order() -> None:
    app = App(notes=20)
    middleware = ResumeMiddleware(app, policy=Policy(keepalive_s=None), store=MemoryStore())
    client = Client()
    client.stall()
    async with anyio.create_task_group() as tg:
        tg.start_soon(middleware, _scope(), client.receive, client.send)
        try:
            with anyio.fail_after(scaled(2.0)):  # the stall guard is DIRECT_STALL_S (0.25 s)
                await app.finished.wait()  # the app ran to its end while its client read nothing
            assert not client.complete.is_set()
        finally:
            client.resume()
        with anyio.fail_after(scaled(5)):
            await client.complete.wait()
    progress = [json.loads(line[6:]) for line in _data_lines(client.body())]
    assert [m["params"]["progress"] for m in progress[:-1]] == list(range(1, 21))
    assert progress[-1]["id"] == 7 and "result" in progress[-1]
    ids = [line for line in client.body().split(b"\n") if line.startswith(b"id: ")]
    seqs = [int(line.rsplit(b":", 1)[1]) for line in ids]
    assert seqs == sorted(set(seqs)), "events repeated or out of order"


class FutureClient(Client):
    """A server whose `send` takes the body at once and returns a future of its own, done once
    its client has read it (granian, when its client reads slower than it writes: its body is
    written on whether or not that future is awaited, and may be taken before the future learns
    of it). Cancelling the future does not take back what the server took."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting: list[asyncio.Future[None]] = []

    def resume(self) -> None:
        super().resume()
        for future in self.waiting:
            if not future.done():
                future.set_result(None)

    def send(self, message: Message) -> asyncio.Future[None]:  # type: ignore[override]
        self.sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.complete.set()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if (
            message["type"] == "http.response.body"
            and self._stalled is not None
            and not self._stalled.is_set()
        ):
            self.waiting.append(future)  # its client reads it once it reads again
        else:
            future.set_result(None)
        return future


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # (the server's future: an asyncio one)
async def test_a_stalled_write_the_server_took_is_not_written_again() -> None:
    """A write that stalls is given up by the app's side (the connection gets a writer of its
    own), but the server took its events: its own writer learns that from the server's future
    and goes on after them, never writing one twice (seen with granian under load)."""
    app = App(notes=20)
    middleware = ResumeMiddleware(app, policy=Policy(keepalive_s=None), store=MemoryStore())
    client = FutureClient()
    client.stall()
    async with anyio.create_task_group() as tg:
        tg.start_soon(middleware, _scope(), client.receive, client.send)
        try:
            with anyio.fail_after(scaled(2.0)):
                await app.finished.wait()  # the app ran to its end while its client read nothing
        finally:
            client.resume()
        with anyio.fail_after(scaled(5)):
            await client.complete.wait()
    progress = [json.loads(line[6:]) for line in _data_lines(client.body())]
    assert [m["params"]["progress"] for m in progress[:-1]] == list(range(1, 21)), progress
    assert progress[-1]["id"] == 7 and "result" in progress[-1]
    ids = [line for line in client.body().split(b"\n") if line.startswith(b"id: ")]
    seqs = [int(line.rsplit(b":", 1)[1]) for line in ids]
    assert seqs == sorted(set(seqs)), f"events repeated or out of order: {seqs}"


class Burst:
    """Sends `paced` progress events yielding after each, then up to `notes` without yielding,
    waits for `go`, then sends the result."""

    def __init__(self, notes: int, paced: int = 0) -> None:
        self.notes = notes
        self.paced = paced
        self.go = anyio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        headers = [(b"content-type", b"text/event-stream"), (b"mcp-session-id", SESSION)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for i in range(1, self.notes + 1):
            await send({"type": "http.response.body", "body": _progress(i), "more_body": True})
            if i <= self.paced:
                await anyio.lowlevel.checkpoint()
        await self.go.wait()
        await send({"type": "http.response.body", "body": RESULT, "more_body": False})


async def test_a_burst_reaches_the_client_while_the_app_waits_on_its_receive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An app that bursts and then waits on its `receive` (its disconnect listener): the burst is
    written from its own task as it starts waiting (no task started for it: memory each of many
    streams bursting at once would hold), all of it, in order, in a few writes."""
    started: list[str] = []
    spawn = recorder_module.spawn

    def counting_spawn(fn: Any, *args: Any) -> None:
        started.append(getattr(fn, "__name__", ""))
        spawn(fn, *args)

    monkeypatch.setattr(recorder_module, "spawn", counting_spawn)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        headers = [(b"content-type", b"text/event-stream"), (b"mcp-session-id", SESSION)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for i in range(1, 101):
            await send({"type": "http.response.body", "body": _progress(i), "more_body": True})
        await receive()  # (until the test ends it)

    middleware = ResumeMiddleware(app, policy=Policy(keepalive_s=None), store=MemoryStore())
    client = Client()
    async with anyio.create_task_group() as tg:
        tg.start_soon(middleware, _scope(), client.receive, client.send)
        with anyio.fail_after(scaled(5)):
            while len(_progress_of(client.body())) < 100:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert _progress_of(client.body())[:100] == list(range(1, 101))  # (then the error of its cancel)
    assert "_write_behind" not in started
    assert sum(1 for m in client.sent if m["type"] == "http.response.body") < 10


def _progress_of(raw: bytes) -> list[int]:
    return [json.loads(line[6:]).get("params", {}).get("progress", 0) for line in _data_lines(raw)]


@pytest.mark.parametrize("paced", [0, 300])
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_burst_reaches_the_client_while_the_app_waits_in_few_writes(
    anyio_backend: str, paced: int
) -> None:
    """Events an app sends without yielding go out together once it yields (asyncio; one by
    one on trio), each once, in order, with its id: the client has them all while the app
    still waits, and has them in fewer writes than events - also after the app yielded after
    each of its events for a while (bursts are then looked for less often, `BURST_BACKOFF`)."""
    app = Burst(notes=1000, paced=paced)
    middleware = ResumeMiddleware(app, policy=Policy(keepalive_s=None), store=MemoryStore())
    client = Client()
    async with anyio.create_task_group() as tg:
        tg.start_soon(middleware, _scope(), client.receive, client.send)
        with anyio.fail_after(scaled(5)):
            while len(_progress_of(client.body())) < 1000:
                await anyio.sleep(0.01)
        app.go.set()
    raw = client.body()
    assert _progress_of(raw)[:-1] == list(range(1, 1001)) and json.loads(_data_lines(raw)[-1][6:])["id"] == 7
    seqs = [int(line.rsplit(b":", 1)[1]) for line in raw.split(b"\n") if line.startswith(b"id: ")]
    assert seqs == list(range(0, 1002)), "every event once, in order, with its id (0: priming)"
    writes = sum(1 for m in client.sent if m["type"] == "http.response.body")
    if anyio_backend == "asyncio":
        assert writes < paced + BURST_BACKOFF + 10, writes
    else:
        assert writes >= 1000, writes


class DeadSocket(Client):
    """A server that reports a dead socket by raising from `send` (hypercorn, a proxy's ASGI shim)."""

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.body":
            raise OSError("connection reset by peer")
        await super().send(message)


async def test_a_send_that_fails_marks_the_client_gone_and_does_not_cancel_the_app() -> None:
    """The app's own `send` writes its client: when that write fails the client is gone, and
    the app runs on (it once got a CancelledError at its next await, its write having
    interrupted itself)."""
    app = App(notes=3)
    store = MemoryStore()
    middleware = ResumeMiddleware(app, policy=Policy(), store=store)
    client = DeadSocket()
    with anyio.fail_after(scaled(5)):
        await middleware(_scope(), client.receive, client.send)
        # The request's call returned once its client was gone; the app runs on, on its own task.
        await app.heard.wait()
    assert app.finished.is_set() and app.after_response == "http.disconnect"
    (stream_id,) = store._streams
    events = await store.read(stream_id, 0)
    assert len(events) == 4  # every event recorded, for a resume


_LINE = st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"").replace(b"\r", b""))


@settings(max_examples=400, deadline=None)
@given(
    event=_LINE,
    data=_LINE,
    eol=st.sampled_from([b"\n", b"\r\n", b"\r"]),
    noise=st.lists(st.sampled_from([b"\n", b"\r", b"\r\n", b"id: 1", b"data: x", b": c", b"event: y"])),
    cut=st.integers(min_value=0, max_value=60),
)
@pytest.mark.slow
def test_the_one_event_fast_path_agrees_with_the_parser(
    event: bytes, data: bytes, eol: bytes, noise: list[bytes], cut: int
) -> None:
    """`single_event_frame` (the recording fast path) never accepts what the parser reads otherwise."""
    well_formed = b"event: " + event + eol + b"data: " + data + eol + eol
    for chunk in (
        well_formed,
        well_formed + b"".join(noise),
        b"".join(noise) + well_formed,
        well_formed[:cut],
    ):
        fast = single_event_frame(chunk)
        if fast is None:
            continue
        events = SSEParser(1 << 20).feed(chunk)
        assert fast[0] == chunk
        assert len(events) == 1 and events[0].data == fast[1]
        name = chunk[len(b"event: ") : chunk.find(b"\n")].removesuffix(b"\r")
        assert events[0].event == name and events[0].id is None and events[0].retry is None
