"""A request's first connection, written from the app's own `send`, at the ASGI level.

What it promises beyond the engine suite : a quick
answer reaches the client in as few writes as the bare app makes; a client that
stops reading never holds the app, and still gets every event, once, in order,
when it reads again; the app hears `http.disconnect` once its response is
complete, as a server would tell it. These drive the middleware with plain ASGI
calls, so they can see each `send` and stall one on purpose.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.types import Message, Receive, Scope, Send

from mcp_resume_asgi import MemoryStore, Policy, ResumeMiddleware
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
