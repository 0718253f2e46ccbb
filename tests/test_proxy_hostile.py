"""Bad input to `mcp-resume proxy` (a real process, in front of the TypeScript SDK server and the
stock Python server, each its own process): the hostile requests the suite sends the middleware
(tests/test_fuzz.py, test_defects.py, test_rest_hostile.py: odd `Last-Event-ID`s and stream
tokens, lone surrogates, `NaN`, deep nesting, bodies around the bound, duplicated and garbage
headers, bad REST listings and PUTs, broken HTTP framing), written byte for byte on a raw socket.

Each goes to the proxy and, the same bytes, to the upstream directly (in the same upstream
session: the proxy passes the session id through). Never a 5xx of ours: the proxy answers 5xx
only where the upstream itself does for the same bytes. The proxy still serves afterwards.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import anyio
import httpx
import pytest

from tests.support.npm import NpmPeer
from tests.support.processes import NODE_READY, ReadyProcess, mcp_resume
from tests.support.proxy_e2e import TS_DIR
from tests.support.raw import RawSession
from tests.support.server import SubprocessServer
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]

LONE = b'"\\ud800"'
MIB = 1024 * 1024
ACCEPT = b"application/json, text/event-stream"


@dataclass
class Pair:
    upstream_port: int
    proxy_port: int
    session_id: str
    link: str


@pytest.fixture(scope="module", params=["ts", "python"])
def pair(request: pytest.FixtureRequest) -> Iterator[Pair]:
    if request.param == "ts":
        node, _ = NpmPeer(TS_DIR, ("@modelcontextprotocol/sdk",), min_node_major=18).prepare()
        upstream: ReadyProcess | SubprocessServer = ReadyProcess(
            [node, str(TS_DIR / "server.mjs"), "--port", "0"], ready=NODE_READY, cwd=TS_DIR
        )
        upstream.start()
        port = upstream.port
    else:
        upstream = SubprocessServer("tests.apps.counted_upstream:create_app")
        port = upstream.start().port
    proxy = mcp_resume(
        "proxy",
        "--upstream",
        f"http://127.0.0.1:{port}/mcp",
        "--port",
        "0",
        "--rest",
        "--resumable-requests",
        "--policy",
        "retry_ms=20",
        "--option",
        f"max_body_bytes={MIB}",
        "--log-level",
        "warning",
    ).start()
    try:
        session_id, link = anyio.run(_victim, proxy.port)
        yield Pair(port, proxy.port, session_id, link)
    finally:
        proxy.stop()
        upstream.stop()


async def _victim(port: int) -> tuple[str, str]:
    """A session opened through the proxy (and kept), and the Link of a call it made: ids to mutate."""
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
        session = RawSession(http)
        await session.initialize()
        reply = await session.exchange("POST", "/mcp", session.tool_call("echo", {"text": "victim"}))
        assert session.session_id is not None and reply.link is not None, reply.raw
        return session.session_id, reply.link


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def _cases(p: Pair) -> list[tuple[str, bytes]]:
    """(name, the request's bytes with `{host}` and `{session}` left to fill)."""
    sid = p.session_id.encode()
    link = p.link.encode()
    call = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}'

    def post(body: bytes, *headers: bytes, path: bytes = b"/mcp") -> bytes:
        head = [
            b"POST " + path + b" HTTP/1.1",
            b"host: {host}",
            b"content-type: application/json",
            b"accept: " + ACCEPT,
        ]
        head += [b"mcp-session-id: " + sid, b"mcp-protocol-version: 2025-11-25", *headers]
        return b"\r\n".join(
            [*head, b"content-length: " + str(len(body)).encode(), b"connection: close", b"", body]
        )

    def get(path: bytes, *headers: bytes) -> bytes:
        head = [b"GET " + path + b" HTTP/1.1", b"host: {host}", b"accept: text/event-stream"]
        return b"\r\n".join([*head, *headers, b"connection: close", b"", b""])

    def put(path: bytes, body: bytes, *headers: bytes) -> bytes:
        head = [b"PUT " + path + b" HTTP/1.1", b"host: {host}", b"content-type: application/json", *headers]
        return b"\r\n".join(
            [*head, b"content-length: " + str(len(body)).encode(), b"connection: close", b"", body]
        )

    s = b"mcp-session-id: " + sid
    return [
        # test_fuzz: Last-Event-ID values and stream tokens
        ("last-event-id garbage", get(b"/mcp", s, b"last-event-id: \xff\xfe")),
        ("last-event-id huge", get(b"/mcp", s, b"last-event-id: " + b"9" * 4000)),
        ("last-event-id superscript", get(b"/mcp", s, b"last-event-id: abc.\xc2\xb2")),
        ("last-event-id twice", get(b"/mcp", s, b"last-event-id: a", b"last-event-id: b")),
        ("link token mutated", get(link[:-3] + b"zzz", s)),
        ("link token truncated", get(link[: len(link) // 2], s)),
        ("link token huge", get(b"/mcp/streams/" + b"A" * 8000, s)),
        ("link with last-event-id garbage", get(link, s, b"last-event-id: ~~~")),
        # test_fuzz: bodies
        ("not json", post(b"{nope")),
        ("json not an object", post(b"[1,2,3]")),
        ("empty batch", post(b"[]")),
        ("batch of calls", post(b"[" + call + b"," + call + b"]")),
        (
            "deep nesting",
            post(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":' + _deep(5000) + b"}}"),
        ),
        ("wrong id type", post(b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}')),
        ("body just past the bound", post(b'{"x":"' + b"a" * MIB + b'"}')),
        (
            "nan",
            post(
                b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":NaN}}}'
            ),
        ),
        # test_defects: lone surrogates, deep arguments
        ("lone surrogate id", post(b'{"jsonrpc":"2.0","id":' + LONE + b',"method":"ping"}')),
        (
            "lone surrogate progress token",
            post(
                b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"},'
                b'"_meta":{"progressToken":' + LONE + b"}}}"
            ),
        ),
        (
            "deep arguments",
            post(
                b'{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":{"x":'
                + _deep(960)
                + b"}}}"
            ),
        ),
        (
            "requests/resume garbage token",
            post(
                b'{"jsonrpc":"2.0","id":5,"method":"requests/resume","params":{"requestId":7,"resumeToken":"mra1.xx"}}'
            ),
        ),
        # test_fuzz: headers
        ("session id garbage", post(call, path=b"/mcp").replace(s, b"mcp-session-id: \x00\x01garbage")),
        ("session id twice", post(call, b"mcp-session-id: other")),
        ("protocol version garbage", post(call, b"mcp-protocol-version: 1999-99-99")),
        ("protocol version twice", post(call, b"mcp-protocol-version: 2026-07-28")),
        ("accept nothing", post(call).replace(b"accept: " + ACCEPT, b"accept: image/png")),
        (
            "content-type text",
            post(call).replace(b"content-type: application/json", b"content-type: text/plain"),
        ),
        ("idempotency-key huge", post(call, b"idempotency-key: " + b"k" * 5000)),
        ("idempotency-key twice", post(call, b"idempotency-key: a", b"idempotency-key: b")),
        ("idempotency-key control chars", post(call, b"idempotency-key: a\x01b")),
        # test_rest_hostile: the REST face
        (
            "rest put lone surrogate",
            put(b"/mcp/tools/echo/calls/h-1", b'{"text":' + LONE + b"}", b"idempotency-key: h-1"),
        ),
        ("rest put nan", put(b"/mcp/tools/echo/calls/h-2", b'{"text":"x","n":NaN}', b"idempotency-key: h-2")),
        ("rest put no key", put(b"/mcp/tools/echo/calls/h-3", b'{"text":"x"}')),
        (
            "rest put huge",
            put(
                b"/mcp/tools/echo/calls/h-4",
                b'{"text":"' + b"a" * (MIB + 10) + b'"}',
                b"idempotency-key: h-4",
            ),
        ),
        ("rest listing bad cursor", get(b"/mcp/tools/echo/calls?cursor=%ff%fe")),
        ("rest listing bad limit", get(b"/mcp/tools/echo/calls?limit=" + b"9" * 5000)),
        ("rest bad segment", get(b"/mcp/tools/%ZZ/calls/x")),
        ("rest unknown tool", put(b"/mcp/tools/nope/calls/h-5", b"{}", b"idempotency-key: h-5")),
        # broken framing
        (
            "content-length lies short",
            post(call).replace(b"content-length: " + str(len(call)).encode(), b"content-length: 5"),
        ),
        (
            "content-length not a number",
            post(call).replace(b"content-length: " + str(len(call)).encode(), b"content-length: x"),
        ),
        ("method nobody knows", get(b"/mcp", s).replace(b"GET ", b"BREW ", 1)),
    ]


async def _exchange(port: int, raw: bytes) -> int:
    """Write `raw` to 127.0.0.1:`port`, read the answer's status (0: none, the peer closed)."""
    request = raw.replace(b"{host}", f"127.0.0.1:{port}".encode())
    with anyio.fail_after(scaled(20)):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(request)
            data = b""
            with anyio.move_on_after(scaled(3)):  # an SSE answer may stay open: its head is enough
                while b"\r\n" not in data:
                    try:
                        data += await stream.receive()
                    except (anyio.EndOfStream, anyio.BrokenResourceError):
                        break
    line = data.split(b"\r\n", 1)[0].split()
    return int(line[1]) if len(line) >= 2 and line[1].isdigit() else 0


async def test_hostile_requests_get_no_5xx_of_ours(pair: Pair) -> None:
    ours: list[str] = []
    for name, raw in _cases(pair):
        proxied = await _exchange(pair.proxy_port, raw)
        print(f"{name}: {proxied}")
        if proxied >= 500:
            direct = await _exchange(pair.upstream_port, raw)
            if direct < 500:
                ours.append(f"{name}: {proxied} through the proxy, {direct} from the upstream")
    assert not ours, "\n".join(ours)
    async with httpx.AsyncClient(timeout=30) as http:
        still = await http.post(
            f"http://127.0.0.1:{pair.proxy_port}/mcp",
            content=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
            headers={
                "accept": ACCEPT.decode(),
                "content-type": "application/json",
                "mcp-session-id": pair.session_id,
                "mcp-protocol-version": "2025-11-25",
            },
        )
    assert still.status_code == 200, still.text
