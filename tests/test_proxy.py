"""The proxy app (`mcp_resume_asgi.proxy`): its pure parts without a loop, then against real
upstreams served by uvicorn on loopback.

* SSE bytes are cut into whole events, bounded; headers: hop-by-hop dropped (and those
  `Connection` names), end-to-end passed, `Host` the upstream's; credentials name the caller.
* What the upstream answers reaches the client as it is (status, headers, body); a cookie the upstream sets for one caller goes up
  with no other's request (the proxy keeps no cookie jar); a body past the bound is a 413; an unreachable upstream a 502 with a JSON-RPC error and one log line.
* Wrapped by `resumable`: what one caller started is not served to a request with other
  credentials, even with its session id and stream URL, while the caller itself resumes.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from mcp_resume_asgi import Policy, resumable
from mcp_resume_asgi.proxy import ProxyApp, UpstreamURLError, proxy_app
from mcp_resume_asgi.proxy.credentials import caller_of
from mcp_resume_asgi.proxy.forwarded_headers import to_client, to_upstream
from mcp_resume_asgi.proxy.sse_events import EventSplitter, EventTooLarge
from tests.apps.lowlevel_app import create_app as create_lowlevel_app
from tests.support.raw import RawSession
from tests.support.server import serve

pytestmark = pytest.mark.anyio

# --------------------------------------------------------------------------- pure parts


def test_sse_bytes_come_out_as_whole_events_whatever_the_pieces() -> None:
    splitter = EventSplitter(max_event_bytes=1024)
    assert splitter.feed(b"id: 1\ndata: {") == []
    assert splitter.feed(b'"a":1}\n') == []
    assert splitter.feed(b"\nid: 2\r\ndata: x\r\n\r") == [b'id: 1\ndata: {"a":1}\n\n']
    assert splitter.feed(b"\ndata: y\r\r") == [b"id: 2\r\ndata: x\r\n\r\n", b"data: y\r\r"]
    assert splitter.feed(b"data: tail") == [] and splitter.rest() == b"data: tail"


def test_an_event_past_the_bound_is_the_upstreams_error() -> None:
    splitter = EventSplitter(max_event_bytes=16)
    splitter.feed(b"data: 0123456")
    with pytest.raises(EventTooLarge):
        splitter.feed(b"789abcdef")


def test_hop_by_hop_headers_stop_and_the_rest_pass() -> None:
    client = [
        (b"Host", b"public.example"),
        (b"Connection", b"keep-alive, X-Hop"),
        (b"X-Hop", b"1"),
        (b"Keep-Alive", b"timeout=5"),
        (b"TE", b"trailers"),
        (b"Transfer-Encoding", b"chunked"),
        (b"Proxy-Authorization", b"Basic cHJveHk="),
        (b"Authorization", b"Bearer t"),
        (b"Mcp-Session-Id", b"s"),
        (b"Accept-Encoding", b"gzip"),
        (b"Content-Length", b"12"),
    ]
    up = to_upstream(client, b"127.0.0.1:3000", "https")
    assert up == [
        (b"authorization", b"Bearer t"),
        (b"mcp-session-id", b"s"),
        (b"host", b"127.0.0.1:3000"),
        (b"accept-encoding", b"identity"),
        (b"x-forwarded-host", b"public.example"),
        (b"x-forwarded-proto", b"https"),
    ]
    down = to_client(
        [(b"Content-Type", b"text/event-stream"), (b"Connection", b"close"), (b"Mcp-Session-Id", b"s")]
    )
    assert down == [(b"content-type", b"text/event-stream"), (b"mcp-session-id", b"s")]


def test_credentials_name_the_caller_by_a_keyed_digest() -> None:
    names = frozenset({b"authorization", b"cookie"})
    a = caller_of([(b"Authorization", b"Bearer a")], names, b"k")
    assert a is not None and a.is_authenticated and a.identity.startswith("proxy:")
    assert (
        a.identity == caller_of([(b"authorization", b"Bearer a"), (b"x-other", b"1")], names, b"k").identity
    )  # type: ignore[union-attr]
    assert a.identity != caller_of([(b"authorization", b"Bearer b")], names, b"k").identity  # type: ignore[union-attr]
    assert a.identity != caller_of([(b"authorization", b"Bearer a")], names, b"other key").identity  # type: ignore[union-attr]
    assert "Bearer" not in a.identity
    assert caller_of([(b"x-api-key", b"1")], names, b"k") is None


@pytest.mark.parametrize(
    "url", ["ftp://h/mcp", "127.0.0.1:3000/mcp", "http:///mcp", "http://h:99999/mcp", "http://h/mcp?x=1"]
)
def test_an_upstream_url_that_is_not_absolute_http_is_refused(url: str) -> None:
    with pytest.raises(UpstreamURLError, match="bad upstream URL"):
        ProxyApp(url)


# --------------------------------------------------------------------------- against an upstream


async def _echo(request: Request) -> Response:
    body = await request.body()
    return JSONResponse(
        {
            "method": request.method,
            "path": request.url.path,
            "query": request.url.query,
            "headers": request.headers.items(),
            "body": body.decode(),
        }
    )


async def _refuse(request: Request) -> Response:
    return Response(b"no", status_code=401, headers={"www-authenticate": 'Bearer realm="up"', "x-up": "1"})


async def _sse(request: Request) -> Response:
    async def pieces() -> AsyncIterator[bytes]:
        for piece in (b"id: 1\ndata: {", b'"a":1}\n', b"\nid: 2\ndata: {}\n\n"):
            yield piece
            await anyio.sleep(0.05)

    return StreamingResponse(pieces(), media_type="text/event-stream")


async def _set_cookie(request: Request) -> Response:
    response = JSONResponse({"ok": True})
    response.set_cookie("upstream-session", "alice-only")
    return response


async def _accept(request: Request) -> Response:
    return Response(status_code=202)


UPSTREAM = Starlette(
    routes=[
        Route("/accept", _accept, methods=["POST"]),
        Route("/mcp", _echo, methods=["GET", "POST", "DELETE"]),
        Route("/login", _set_cookie, methods=["POST"]),
        Route("/refuse", _refuse, methods=["POST"]),
        Route("/sse", _sse, methods=["GET"]),
    ]
)


async def _call(
    app: ProxyApp,
    method: str,
    path: str,
    body: bytes = b"",
    headers: list[tuple[bytes, bytes]] | None = None,
    sent: list[dict[str, Any]] | None = None,
) -> tuple[int, list[tuple[bytes, bytes]], list[bytes]]:
    """One request through the proxy as an ASGI call: its status, headers, and body messages
    (every message sent, into `sent` if given)."""
    sent = [] if sent is None else sent
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await anyio.sleep_forever()
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "scheme": "http",
        "headers": headers or [],
    }
    await app(scope, receive, send)
    start = sent[0]
    return start["status"], start["headers"], [m.get("body", b"") for m in sent[1:] if m.get("body")]


async def test_what_the_upstream_answers_reaches_the_client_as_it_is() -> None:
    async with serve(UPSTREAM) as info:
        app = ProxyApp(f"{info.base_url}/mcp")
        try:
            status, headers, body = await _call(
                app, "POST", "/refuse", b"{}", [(b"content-type", b"application/json")]
            )
            assert status == 401 and b"".join(body) == b"no"
            assert (b"www-authenticate", b'Bearer realm="up"') in headers and (b"x-up", b"1") in headers
            status, headers, body = await _call(
                app,
                "POST",
                "/mcp",
                b'{"x":1}',
                [(b"authorization", b"Bearer t"), (b"connection", b"x-drop"), (b"x-drop", b"1")],
            )
            echoed = httpx.Response(200, content=b"".join(body)).json()
            assert status == 200 and echoed["body"] == '{"x":1}' and echoed["path"] == "/mcp"
            seen = dict(echoed["headers"])
            assert seen["authorization"] == "Bearer t" and "x-drop" not in seen
            assert seen["host"] == f"127.0.0.1:{info.port}" and seen["content-length"] == "7"
            status, _, events = await _call(app, "GET", "/sse")
            assert status == 200 and events == [b'id: 1\ndata: {"a":1}\n\n', b"id: 2\ndata: {}\n\n"]
        finally:
            await app.aclose()


async def test_a_cookie_the_upstream_sets_for_one_caller_goes_up_with_no_other_request() -> None:
    async with serve(UPSTREAM) as info:
        app = ProxyApp(f"{info.base_url}/mcp")
        try:
            status, headers, _ = await _call(
                app, "POST", "/login", b"{}", [(b"authorization", b"Bearer alice")]
            )
            assert status == 200 and any(
                name == b"set-cookie" and b"alice-only" in value for name, value in headers
            ), headers
            _, _, body = await _call(app, "POST", "/mcp", b"{}", [(b"authorization", b"Bearer mallory")])
            seen = dict(httpx.Response(200, content=b"".join(body)).json()["headers"])
            assert "cookie" not in seen, seen
        finally:
            await app.aclose()


async def test_a_body_past_the_bound_is_a_413_and_never_reaches_the_upstream() -> None:
    async with serve(UPSTREAM) as info:
        app = ProxyApp(f"{info.base_url}/mcp", max_body_bytes=8)
        try:
            status, _, body = await _call(app, "POST", "/mcp", b"0123456789")
            assert status == 413 and b'"jsonrpc":"2.0"' in b"".join(body)
        finally:
            await app.aclose()


async def test_an_unreachable_upstream_is_a_502_json_rpc_error_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with anyio.fail_after(10):
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        await listener.aclose()  # nobody listens there now
    app = proxy_app(f"http://127.0.0.1:{port}/mcp")
    caplog.set_level(logging.WARNING, logger="mcp_resume_asgi.proxy.app")
    try:
        for _ in range(2):
            status, _, body = await _call(app, "POST", "/mcp", b'{"jsonrpc":"2.0","id":1,"method":"ping"}')
            assert status == 502
            assert httpx.Response(502, content=b"".join(body)).json()["error"]["code"] == -32603
    finally:
        await app.aclose()
    warnings = [r for r in caplog.records if r.name == "mcp_resume_asgi.proxy.app"]
    assert len(warnings) == 1 and "unreachable" in warnings[0].getMessage(), warnings


# --------------------------------------------------------------------------- wrapped: who may resume


async def test_a_stream_is_served_only_to_the_credentials_that_started_it() -> None:
    async with serve(create_lowlevel_app()) as upstream:
        wrapped = resumable(
            proxy_app(f"{upstream.base_url}/mcp", principal_key="k"), policy=Policy(retry_ms=20)
        )
        async with serve(wrapped) as front, httpx.AsyncClient(base_url=front.base_url, timeout=30) as http:
            alice = RawSession(http)
            alice_auth = {"authorization": "Bearer alice"}
            reply = await alice.exchange(
                "POST", "/mcp", _initialize(), headers={**alice.opening_headers(), **alice_auth}
            )
            alice.session_id = reply.headers["mcp-session-id"]
            await http.post(
                "/mcp",
                json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                headers={**alice.headers(), **alice_auth},
            )
            call = alice.tool_call("slow_progress", {"seconds": 0.6, "steps": 3}, progress=True)
            first = await alice.exchange(
                "POST", "/mcp", call, headers={**alice.headers(), **alice_auth}, stop_after=1
            )
            assert first.status == 200 and first.link is not None and first.last_id is not None
            resume = {**alice.headers(), "accept": "text/event-stream", "last-event-id": first.last_id}
            for other in ({"authorization": "Bearer mallory"}, {}):
                refused = await http.get(first.link, headers={**resume, **other})
                assert refused.status_code == 404, (other, refused.status_code, refused.text)
                assert "step" not in refused.text
            served = await alice.exchange("GET", first.link, headers={**resume, **alice_auth})
            assert served.status == 200
            assert any(m.get("result") for m in served.messages()), served.raw


def _initialize() -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
