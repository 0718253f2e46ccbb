"""`ResumableTransport` against a small, real, scripted HTTP server.

The server below (served by uvicorn on 127.0.0.1 in a thread, so the client
side can run on asyncio and on trio) speaks the wire protocol the middleware
speaks: SSE answers with priming events, `Link: <...>; rel="stream"`, resume
GETs with `Last-Event-ID`, 204 when a stream is over or waits for answers, and
answer arrays POSTed to the Link URL. Each test queues what the server does on
each connection it gets (`Seg`), then checks what the client sent (`Hit`).
"""

from __future__ import annotations

import functools
import json
import socket
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import pytest
import uvicorn

from mcp_resume_asgi.client import ResumableTransport
from mcp_resume_asgi.client.sse_reader import SSEEvent, SSEParser, closing_iterator
from tests.support.timing import scaled

pytestmark = pytest.mark.anyio

SESSION_ID = "session-123"
PROTOCOL_VERSION = "2025-11-25"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# --------------------------------------------------------------------------- the scripted server


@dataclass
class Seg:
    """What the server does with one connection."""

    status: int = 200
    chunks: list[bytes] = field(default_factory=list)
    link: str | None = None
    hold: bool = False  # keep the SSE response open until the client goes away
    json_body: Any = None
    headers: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Hit:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float
    ended_at: float | None = None
    client_gone: bool = False

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class FakeServer:
    """A scripted ASGI app speaking the resumable Streamable HTTP wire protocol."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.segments: deque[Seg] = deque()
        self.hits: list[Hit] = []
        self.initialize_result: dict[str, Any] = {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "fake", "version": "1"},
        }

    def queue(self, *segments: Seg) -> None:
        self.segments.extend(segments)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        hit = Hit(scope["method"], scope["path"], headers, body, time.monotonic())
        self.hits.append(hit)
        try:
            await self._answer(hit, receive, send)
        finally:
            hit.ended_at = time.monotonic()

    async def _answer(self, hit: Hit, receive: Any, send: Any) -> None:
        if hit.method == "DELETE":
            await _send(send, 200, b"")
            return
        if hit.method == "GET" and hit.path == "/mcp" and "last-event-id" not in hit.headers:
            await _send(send, 405, b"")  # no standalone server stream here
            return
        if hit.method == "POST" and hit.path == "/mcp":
            message = json.loads(hit.body)
            if isinstance(message, dict) and message.get("method") == "initialize":
                answer = {"jsonrpc": "2.0", "id": message["id"], "result": self.initialize_result}
                await _send(
                    send,
                    200,
                    json.dumps(answer).encode(),
                    "application/json",
                    [("mcp-session-id", SESSION_ID)],
                )
                return
            if not (isinstance(message, dict) and "method" in message and "id" in message):
                await _send(send, 202, b"")  # notifications and answers
                return
        if not self.segments:
            await _send(send, 404, b"no more segments")
            return
        seg = self.segments.popleft()
        extra = list(seg.headers)
        if seg.link is not None:
            extra.append(("link", f'<{seg.link}>; rel="stream"'))
        if seg.json_body is not None:
            await _send(send, seg.status, json.dumps(seg.json_body).encode(), "application/json", extra)
            return
        if seg.status != 200:
            await _send(send, seg.status, b"", None, extra)
            return
        raw = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-store")]
        raw += [(k.encode(), v.encode()) for k, v in extra]
        await send({"type": "http.response.start", "status": 200, "headers": raw})
        for chunk in seg.chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await anyio.sleep(0.01)
        if seg.hold:
            with anyio.move_on_after(scaled(10)):
                while (await receive())["type"] != "http.disconnect":
                    pass
                hit.client_gone = True
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _send(
    send: Any,
    status: int,
    body: bytes,
    content_type: str | None = None,
    headers: list[tuple[str, str]] | None = None,
) -> None:
    raw = [(k.encode(), v.encode()) for k, v in headers or []]
    if content_type:
        raw.append((b"content-type", content_type.encode()))
    if status not in (204, 304):
        raw.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body if status not in (204, 304) else b""})


@dataclass
class LiveServer:
    app: FakeServer
    port: int

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base}/mcp"


@pytest.fixture(scope="module")
def live_server() -> Iterator[LiveServer]:
    app = FakeServer()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + scaled(10)
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    yield LiveServer(app, port)
    server.should_exit = True
    thread.join(scaled(10))
    sock.close()


@pytest.fixture
def server(live_server: LiveServer) -> LiveServer:
    live_server.app.reset()
    return live_server


# --------------------------------------------------------------------------- helpers


def sse(
    data: Any = "", *, id: str | None = None, retry: int | None = None, event: str | None = "message"
) -> bytes:
    lines = []
    if event is not None:
        lines.append(f"event: {event}")
    if id is not None:
        lines.append(f"id: {id}")
    if retry is not None:
        lines.append(f"retry: {retry}")
    lines.append(f"data: {data if isinstance(data, str) else json.dumps(data)}")
    return ("\n".join(lines) + "\n\n").encode()


def prime(id: str, retry: int | None = None) -> bytes:
    return sse("", id=id, retry=retry)


def result(request_id: Any, value: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": value if value is not None else {"ok": True}}


def notification(n: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": "p", "progress": n},
    }


def server_request(request_id: Any, method: str = "elicitation/create") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {"message": "name?"}}


CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t", "arguments": {}}}
HEADERS = {
    "accept": "application/json, text/event-stream",
    "mcp-session-id": SESSION_ID,
    "mcp-protocol-version": PROTOCOL_VERSION,
}


class _CutStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, limit: int) -> None:
        self.inner = inner
        self.limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        sent = 0
        async for chunk in self.inner:
            if sent + len(chunk) >= self.limit:
                yield chunk[: self.limit - sent]
                raise httpx.ReadError("cut (test)")
            sent += len(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class Cutting(httpx.AsyncBaseTransport):
    """An inner transport whose GET responses break after `limit` body bytes."""

    def __init__(self, limit: int) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.limit = limit

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.method == "GET":
            assert isinstance(response.stream, httpx.AsyncByteStream)
            response.stream = _CutStream(response.stream, self.limit)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class Recording(httpx.AsyncBaseTransport):
    """An inner transport that records URLs and can fail the first `fail` internal GETs."""

    def __init__(self, fail: int = 0) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.urls: list[httpx.URL] = []
        self.fail = fail

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.urls.append(request.url)
        if request.method == "GET" and self.fail > 0:
            self.fail -= 1
            raise httpx.ConnectError("refused (test)", request=request)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass
class Run:
    response: httpx.Response
    events: list[SSEEvent]

    @property
    def messages(self) -> list[Any]:
        return [json.loads(e.data) for e in self.events]

    @property
    def ids(self) -> list[str | None]:
        return [e.id for e in self.events]


async def call(
    client: httpx.AsyncClient,
    url: str,
    body: Any = CALL,
    on_event: Callable[[SSEEvent], Awaitable[None]] | None = None,
) -> Run:
    events: list[SSEEvent] = []
    parser = SSEParser()
    async with client.stream("POST", url, json=body, headers=HEADERS) as response:
        async for chunk in response.aiter_bytes():
            for event in parser.feed(chunk):
                events.append(event)
                if on_event is not None:
                    await on_event(event)
    return Run(response, events)


@pytest.fixture
async def client_factory() -> AsyncIterator[Callable[..., httpx.AsyncClient]]:
    clients: list[httpx.AsyncClient] = []

    def make(transport: ResumableTransport | None = None, **options: Any) -> httpx.AsyncClient:
        options.setdefault("default_retry_ms", 10)
        client = httpx.AsyncClient(transport=transport or ResumableTransport(**options), timeout=10)
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.aclose()


def stream_error(run: Run) -> dict[str, Any]:
    """The give-up error event, which must be the last event and answer request 1."""
    last = run.messages[-1]
    assert last["id"] == 1
    assert last["error"]["code"] == -32000
    assert run.events[-1].id is None
    return dict(last["error"])


# --------------------------------------------------------------------------- tests


async def test_reconnects_via_link_with_last_event_id_and_honours_retry(
    server: LiveServer, client_factory: Callable[..., httpx.AsyncClient]
) -> None:
    transport = ResumableTransport()
    client = client_factory(transport)
    server.app.queue(
        Seg(link="/mcp/streams/tok1", chunks=[prime("e0", retry=150), sse(notification(1), id="e1")]),
        Seg(chunks=[sse(notification(1), id="e1"), sse(notification(2), id="e2"), sse(result(1), id="e3")]),
    )
    run = await call(client, server.url)

    assert run.response.status_code == 200
    assert run.response.headers["content-type"].startswith("text/event-stream")
    assert "link" not in run.response.headers  # the transport owns resumption
    assert run.ids == ["e1", "e2", "e3"]  # priming dropped, replayed e1 dropped
    assert run.messages == [notification(1), notification(2), result(1)]
    first, resume = server.app.hits
    assert (resume.method, resume.path) == ("GET", "/mcp/streams/tok1")
    assert resume.headers["last-event-id"] == "e1"
    assert resume.headers["mcp-session-id"] == SESSION_ID
    assert resume.headers["mcp-protocol-version"] == PROTOCOL_VERSION
    assert resume.headers["accept"] == "text/event-stream"
    assert first.ended_at is not None and resume.at - first.ended_at >= 0.14  # retry: 150
    assert transport.live_streams == 0


async def test_falls_back_to_get_on_the_mcp_url_without_link(
    server: LiveServer, client_factory: Callable[..., httpx.AsyncClient]
) -> None:
    client = client_factory()
    server.app.queue(
        Seg(chunks=[prime("e0", retry=20), sse(notification(1), id="e1")]),
        Seg(chunks=[prime("e1b"), sse(result(1), id="e2")]),
    )
    run = await call(client, server.url)

    assert run.messages == [notification(1), result(1)]
    resume = server.app.hits[1]
    assert (resume.method, resume.path) == ("GET", "/mcp")
    assert resume.headers["last-event-id"] == "e1"
    assert resume.headers["mcp-session-id"] == SESSION_ID


async def test_retry_is_clamped_to_the_maximum(
    server: LiveServer, client_factory: Callable[..., httpx.AsyncClient]
) -> None:
    client = client_factory(max_retry_ms=100)
    server.app.queue(
        Seg(link="/mcp/streams/a", chunks=[prime("e0", retry=600_000)]),
        Seg(chunks=[sse(result(1), id="e1")]),
    )
    run = await call(client, server.url)

    assert run.messages == [result(1)]
    first, resume = server.app.hits
    assert first.ended_at is not None and 0.09 <= resume.at - first.ended_at < scaled(5)


async def test_204_with_nothing_pending_ends_with_a_clear_error(
    server: LiveServer, client_factory: Callable[..., httpx.AsyncClient]
) -> None:
    client = client_factory()
    server.app.queue(
        Seg(link="/mcp/streams/a", chunks=[prime("e0", retry=10), sse(notification(1), id="e1")]), Seg(204)
    )
    run = await call(client, server.url)

    assert run.messages[0] == notification(1)
    assert "without a response" in stream_error(run)["message"]
    assert len(server.app.hits) == 2


async def test_multi_turn_answers_are_buffered_and_posted_as_one_array_to_the_link(
    server: LiveServer, client_factory: Callable[..., httpx.AsyncClient]
) -> None:
    transport = ResumableTransport(default_retry_ms=10)
    client = client_factory(transport)
    server.app.queue(
        Seg(
            link="/mcp/streams/t1",
            chunks=[
                prime("e0", retry=10),
                sse(server_request("s1"), id="e1") + sse(server_request(7), id="e2"),
            ],
        ),
        Seg(204),  # GET t1: the server waits for the answers
        Seg(link=f"{server.base}/mcp/streams/t2", chunks=[prime("e3"), sse(notification(3), id="e4")]),
        Seg(chunks=[sse(result(1), id="e5")]),  # GET t2
    )
    answer_statuses: list[int] = []
    answered_at: list[float] = []

    async with anyio.create_task_group() as tg:

        async def answer(request_id: Any) -> None:
            await anyio.sleep(0.2)  # the transport must wait for us after the 204
            answered_at.append(time.monotonic())
            response = await client.post(
                server.url, json=result(request_id, {"action": "accept"}), headers=HEADERS
            )
            answer_statuses.append(response.status_code)

        async def on_event(event: SSEEvent) -> None:
            message = json.loads(event.data)
            if "method" in message and "id" in message:
                tg.start_soon(answer, message["id"])

        run = await call(client, server.url, on_event=on_event)

    assert run.messages == [server_request("s1"), server_request(7), notification(3), result(1)]
    assert answer_statuses == [202, 202]  # captured, never sent to the MCP URL
    methods = [(h.method, h.path) for h in server.app.hits]
    assert methods == [
        ("POST", "/mcp"),
        ("GET", "/mcp/streams/t1"),
        ("POST", "/mcp/streams/t1"),
        ("GET", "/mcp/streams/t2"),
    ]
    flush = server.app.hits[2]
    assert sorted(flush.json, key=lambda m: str(m["id"])) == [
        result(7, {"action": "accept"}),
        result("s1", {"action": "accept"}),
    ]
    assert flush.headers["content-type"] == "application/json"
    assert flush.headers["accept"] == "application/json, text/event-stream"
    assert flush.headers["last-event-id"] == "e2"
    assert flush.headers["mcp-session-id"] == SESSION_ID
    assert flush.at >= max(answered_at)
    assert server.app.hits[3].headers["last-event-id"] == "e4"
    assert transport.live_streams == 0


@pytest.mark.slow
async def test_flush_safety_net_when_the_server_keeps_the_stream_open(
    server: LiveServer, client_factory: Callable[..., httpx.AsyncClient]
) -> None:
    client = client_factory(flush_after_s=0.3)
    server.app.queue(
        Seg(
            link="/mcp/streams/t1",
            chunks=[prime("e0", retry=10), sse(server_request("s1"), id="e1")],
            hold=True,
        ),
        Seg(link="/mcp/streams/t2", chunks=[sse(result(1), id="e2")]),
    )
    answered_at: list[float] = []

    async with anyio.create_task_group() as tg:

        async def answer() -> None:
            answered_at.append(time.monotonic())
            response = await client.post(server.url, json=result("s1"), headers=HEADERS)
            assert response.status_code == 202

        async def on_event(event: SSEEvent) -> None:
            if "method" in json.loads(event.data):
                tg.start_soon(answer)

        run = await call(client, server.url, on_event=on_event)

    assert run.messages == [server_request("s1"), result(1)]
    held, flush = server.app.hits
    assert (flush.method, flush.path, flush.json) == ("POST", "/mcp/streams/t1", [result("s1")])
    assert flush.headers["last-event-id"] == "e1"
    assert flush.at - answered_at[0] >= 0.29
    # the held stream was closed by the client
    with anyio.fail_after(scaled(5)):
        while held.ended_at is None:
            await anyio.sleep(0.01)
    assert held.client_gone


async def test_gives_up_with_an_error_event_after_max_attempts(
    server: LiveServer, client_factory: Callable[..., httpx.AsyncClient]
) -> None:
    client = client_factory(max_attempts=3)
    server.app.queue(
        Seg(link="/mcp/streams/a", chunks=[prime("e0", retry=10), sse(notification(1), id="e1")]),
        Seg(503),
        Seg(503),
        Seg(503),
        Seg(chunks=[sse(result(1), id="e9")]),  # never reached
    )
    run = await call(client, server.url)

    assert run.messages[0] == notification(1)
    error = stream_error(run)
    assert "3 reconnect attempts failed" in error["message"]
    assert "HTTP 503" in error["message"]
    assert len(server.app.hits) == 4


async def test_transient_network_errors_are_retried(
    server: LiveServer, client_factory: Callable[..., httpx.AsyncClient]
) -> None:
    inner = Recording(fail=2)
    client = client_factory(ResumableTransport(inner, default_retry_ms=10, max_attempts=3))
    server.app.queue(
        Seg(link="/mcp/streams/a", chunks=[prime("e0"), sse(notification(1), id="e1")]),
        Seg(chunks=[sse(result(1), id="e2")]),
    )
    run = await call(client, server.url)

    assert run.messages == [notification(1), result(1)]
    assert [u.path for u in inner.urls] == ["/mcp", "/mcp/streams/a", "/mcp/streams/a", "/mcp/streams/a"]


async def test_attempt_counter_resets_when_events_flow_again(
    server: LiveServer, client_factory: Callable[..., httpx.AsyncClient]
) -> None:
    client = client_factory(max_attempts=2)
    server.app.queue(
        Seg(link="/mcp/streams/a", chunks=[prime("e0")]),
        Seg(503),
        Seg(chunks=[sse(notification(1), id="e1")]),  # progress: the count starts again
        Seg(503),
        Seg(chunks=[sse(result(1), id="e2")]),
    )
    run = await call(client, server.url)
    assert run.messages == [notification(1), result(1)]


@pytest.mark.slow
async def test_resumes_that_only_replay_the_priming_event_are_not_failures(
    server: LiveServer, client_factory: Callable[..., httpx.AsyncClient]
) -> None:
    """A server closing at will while the request is silent (polling) must not exhaust the attempts."""
    client = client_factory(max_attempts=2)
    polls = [Seg(link="/mcp/streams/a", chunks=[prime("e0", retry=5)]) for _ in range(6)]
    server.app.queue(
        Seg(link="/mcp/streams/a", chunks=[prime("e0", retry=5)]),
        *polls,
        Seg(chunks=[sse(result(1), id="e1")]),
    )
    run = await call(client, server.url)
    assert run.messages == [result(1)]
    assert len(server.app.hits) == 8


async def test_streams_closing_without_any_event_are_failed_attempts(
    server: LiveServer, client_factory: Callable[..., httpx.AsyncClient]
) -> None:
    client = client_factory(max_attempts=3)
    server.app.queue(Seg(link="/mcp/streams/a", chunks=[prime("e0")]), *[Seg() for _ in range(5)])
    run = await call(client, server.url)
    assert "3 reconnect attempts brought no new events" in stream_error(run)["message"]
    assert len(server.app.hits) == 4


async def test_resumes_cut_inside_an_event_every_time_are_bounded(
    server: LiveServer, client_factory: Callable[..., httpx.AsyncClient]
) -> None:
    """Each resume replays the priming event, then breaks inside the next one: no progress, no loop."""
    big = sse(result(1, {"blob": "x" * 500}), id="e1")
    resume = [Seg(chunks=[prime("e0", retry=5), big]) for _ in range(3)]
    server.app.queue(Seg(link="/mcp/streams/a", chunks=[prime("e0", retry=5)]), *resume)
    client = client_factory(
        ResumableTransport(Cutting(limit=len(prime("e0", retry=5)) + 100), max_attempts=3)
    )
    run = await call(client, server.url)
    assert "3 reconnect attempts brought no new events" in stream_error(run)["message"]
    assert len(server.app.hits) == 4


@pytest.mark.parametrize("status", [404, 400])
async def test_unknown_stream_or_bad_token_is_terminal(
    status: int, server: LiveServer, client_factory: Callable[..., httpx.AsyncClient]
) -> None:
    client = client_factory()
    server.app.queue(
        Seg(link="/mcp/streams/a", chunks=[prime("e0")]), Seg(status), Seg(chunks=[sse(result(1), id="x")])
    )
    run = await call(client, server.url)

    assert f"HTTP {status}" in stream_error(run)["message"]
    assert len(server.app.hits) == 2


@pytest.mark.parametrize("oversize", ["event", "unterminated line"])
async def test_oversized_event_is_rejected(
    oversize: str, server: LiveServer, client_factory: Callable[..., httpx.AsyncClient]
) -> None:
    client = client_factory(max_event_bytes=1024)
    huge = sse({"x": "y" * 5000}, id="e1") if oversize == "event" else b"data: " + b"z" * 5000
    server.app.queue(
        Seg(link="/mcp/streams/a", chunks=[prime("e0"), huge]), Seg(chunks=[sse(result(1), id="e2")])
    )
    run = await call(client, server.url)

    assert len(run.events) == 1
    assert "1024 bytes" in stream_error(run)["message"]
    assert len(server.app.hits) == 1  # no reconnect: the same event would come again


@pytest.mark.parametrize(
    "link",
    [
        "http://evil.example:9/steal",
        "https://127.0.0.1:{port}/mcp/streams/a",
        "http://127.0.0.1:{other}/mcp/streams/a",
        "http://user:pw@127.0.0.1:{port}/mcp/streams/a",
        "//evil.example/mcp/streams/a",
    ],
)
async def test_cross_origin_link_is_refused(
    link: str, server: LiveServer, client_factory: Callable[..., httpx.AsyncClient]
) -> None:
    inner = Recording()
    client = client_factory(ResumableTransport(inner, default_retry_ms=10))
    server.app.queue(
        Seg(
            link=link.format(port=server.port, other=server.port + 1),
            chunks=[prime("e0"), sse(server_request("s1"), id="e1")],
        ),
        Seg(chunks=[sse(result(1), id="e2")]),  # GET /mcp (SEP-1699 fallback)
    )

    async def on_event(event: SSEEvent) -> None:
        if "method" in json.loads(event.data):
            # without an accepted Link the answer goes to the MCP URL as usual
            response = await client.post(server.url, json=result("s1"), headers=HEADERS)
            assert response.status_code == 202

    run = await call(client, server.url, on_event=on_event)

    assert run.messages == [server_request("s1"), result(1)]
    assert {(u.host, u.port) for u in inner.urls} == {("127.0.0.1", server.port)}
    assert [(h.method, h.path) for h in server.app.hits] == [
        ("POST", "/mcp"),
        ("POST", "/mcp"),
        ("GET", "/mcp"),
    ]
    assert server.app.hits[1].json == result("s1")


async def test_json_answers_and_other_requests_pass_through_untouched(
    server: LiveServer, client_factory: Callable[..., httpx.AsyncClient]
) -> None:
    client = client_factory()
    body = {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "hi"}]}}
    server.app.queue(
        Seg(json_body=body, headers=[("x-custom", "1")]),
        Seg(400, headers=[("x-why", "bad")]),
    )
    response = await client.post(server.url, json=CALL, headers=HEADERS)
    assert response.status_code == 200
    assert response.content == json.dumps(body).encode()
    assert response.headers["x-custom"] == "1"
    assert response.headers["content-length"] == str(len(response.content))

    response = await client.post(server.url, json=CALL, headers=HEADERS)
    assert (response.status_code, response.headers["x-why"]) == (400, "bad")

    # a notification, an unknown answer and a DELETE go straight to the server
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await client.post(server.url, json=note, headers=HEADERS)).status_code == 202
    assert (await client.post(server.url, json=result("nobody-asked"), headers=HEADERS)).status_code == 202
    assert (await client.delete(server.url, headers=HEADERS)).status_code == 200
    assert [h.method for h in server.app.hits] == ["POST", "POST", "POST", "POST", "DELETE"]
    assert server.app.hits[3].json == result("nobody-asked")


async def test_stream_without_any_event_id_cannot_be_resumed(
    server: LiveServer, client_factory: Callable[..., httpx.AsyncClient]
) -> None:
    client = client_factory()
    server.app.queue(Seg(chunks=[sse(notification(1))]))
    run = await call(client, server.url)

    assert run.messages[0] == notification(1)
    assert "cannot be resumed" in stream_error(run)["message"]
    assert len(server.app.hits) == 1


async def test_malformed_event_data_gives_up(
    server: LiveServer, client_factory: Callable[..., httpx.AsyncClient]
) -> None:
    client = client_factory()
    server.app.queue(Seg(link="/mcp/streams/a", chunks=[prime("e0"), sse("{not json", id="e1")]))
    run = await call(client, server.url)

    assert "not JSON" in stream_error(run)["message"]


async def test_final_response_must_match_the_request_id_exactly(
    server: LiveServer, client_factory: Callable[..., httpx.AsyncClient]
) -> None:
    client = client_factory()
    server.app.queue(
        Seg(link="/mcp/streams/a", chunks=[prime("e0"), sse(result("1"), id="e1")]),  # "1" is not 1
        Seg(chunks=[sse(result(1), id="e2")]),
    )
    run = await call(client, server.url)
    assert run.messages == [result("1"), result(1)]


async def test_closing_the_response_early_frees_the_stream(
    server: LiveServer, client_factory: Callable[..., httpx.AsyncClient]
) -> None:
    transport = ResumableTransport()
    client = client_factory(transport)
    server.app.queue(
        Seg(link="/mcp/streams/a", chunks=[prime("e0"), sse(server_request("s1"), id="e1")], hold=True)
    )
    async with (
        client.stream("POST", server.url, json=CALL, headers=HEADERS) as response,
        closing_iterator(response.aiter_bytes()) as chunks,
    ):
        async for chunk in chunks:
            assert b"elicitation/create" in chunk
            assert transport.live_streams == 1
            break
    assert transport.live_streams == 0
    # the answer has no live stream any more: it goes to the server
    assert (await client.post(server.url, json=result("s1"), headers=HEADERS)).status_code == 202
    assert server.app.hits[-1].json == result("s1")
    with anyio.fail_after(scaled(5)):
        while not server.app.hits[0].client_gone:
            await anyio.sleep(0.01)


async def test_answer_post_accepted_with_json_continuation(
    server: LiveServer, client_factory: Callable[..., httpx.AsyncClient]
) -> None:
    """A server may answer the answers' POST with JSON holding the final response."""
    client = client_factory()
    server.app.queue(
        Seg(link="/mcp/streams/a", chunks=[prime("e0"), sse(server_request(5), id="e1")]),
        Seg(204),
        Seg(json_body=result(1)),
    )

    async with anyio.create_task_group() as tg:

        async def on_event(event: SSEEvent) -> None:
            if "method" in json.loads(event.data):
                tg.start_soon(functools.partial(client.post, server.url, json=result(5), headers=HEADERS))

        run = await call(client, server.url, on_event=on_event)

    assert run.messages == [server_request(5), result(1)]
    assert server.app.hits[2].json == [result(5)]


async def test_options_are_validated() -> None:
    with pytest.raises(ValueError):
        ResumableTransport(max_attempts=0)
    with pytest.raises(ValueError):
        ResumableTransport(max_event_bytes=0)
    with pytest.raises(ValueError):
        ResumableTransport(flush_after_s=-1)


# --------------------------------------------------------------------------- 2026-07-28 opt-in


@pytest.mark.parametrize(
    ("version", "declared"),
    [("2026-07-28", True), ("2099-01-01", True), ("2025-11-25", False), (None, False), ("garbage!!", False)],
)
async def test_requests_from_2026_07_28_on_declare_the_resumable_streams_extension(
    version: str | None, declared: bool
) -> None:
    from mcp_resume_asgi import RESUMABLE_STREAMS_EXTENSION as SERVER_NAME
    from mcp_resume_asgi.client import RESUMABLE_STREAMS_EXTENSION

    assert RESUMABLE_STREAMS_EXTENSION == SERVER_NAME
    bodies: list[Any] = []

    def answer(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        assert request.headers["content-length"] == str(len(request.content))
        return httpx.Response(200, json={"jsonrpc": "2.0", "id": 1, "result": {}})

    capabilities = {"io.modelcontextprotocol/clientCapabilities": {"extensions": {"x/y": {}}, "roots": {}}}
    sent = [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "t", "_meta": capabilities}},
    ]
    headers = {"content-type": "application/json"} | ({"mcp-protocol-version": version} if version else {})
    async with httpx.AsyncClient(transport=ResumableTransport(httpx.MockTransport(answer))) as client:
        for body in sent:
            await client.post("http://server/mcp", json=body, headers=headers)
    for body, original in zip(bodies, sent, strict=True):
        if not declared:
            assert body == original
            continue
        meta = body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
        assert meta["extensions"][RESUMABLE_STREAMS_EXTENSION] == {}
        assert body["params"].get("name") == original.get("params", {}).get("name")
    if declared:  # what the client declared itself is kept
        kept = bodies[1]["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
        assert kept["roots"] == {} and kept["extensions"]["x/y"] == {}


class CutOnce(httpx.AsyncBaseTransport):
    """Cuts the first POST before any answer (the connection dropped), answers 202 after."""

    def __init__(self) -> None:
        self.posts: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.posts.append(request)
        if len(self.posts) == 1:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return httpx.Response(202, request=request)


async def test_a_notification_cut_before_its_answer_is_sent_again_under_its_key() -> None:
    """A session's `notifications/initialized` whose POST lost its connection before any answer is
    sent again (the same Idempotency-Key), not a failed session."""
    inner = CutOnce()
    async with httpx.AsyncClient(transport=ResumableTransport(inner, default_retry_ms=1)) as client:
        response = await client.post(
            "http://127.0.0.1:9/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}
        )
    assert response.status_code == 202
    assert len(inner.posts) == 2
    keys = {post.headers.get("idempotency-key") for post in inner.posts}
    assert len(keys) == 1 and None not in keys
