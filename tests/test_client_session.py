"""`ResumableSession` (the httpx-only MCP client) against the scripted server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from mcp_resume_asgi.client import McpError, ResumableSession, ResumableTransport, SessionError
from tests.test_client_transport import (
    PROTOCOL_VERSION,
    SESSION_ID,
    LiveServer,
    Seg,
    anyio_backend,
    live_server,
    notification,
    prime,
    result,
    server,
    server_request,
    sse,
)

__all__ = ["anyio_backend", "live_server", "server"]  # fixtures shared with the transport tests

pytestmark = pytest.mark.anyio


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=ResumableTransport(default_retry_ms=10), timeout=10) as client:
        yield client


def tool_result(request_id: int, text: str = "done") -> dict[str, Any]:
    return result(request_id, {"content": [{"type": "text", "text": text}], "isError": False})


async def test_initialize_call_tool_and_delete(server: LiveServer, http: httpx.AsyncClient) -> None:
    server.app.queue(
        Seg(link="/mcp/streams/a", chunks=[prime("e0", retry=10)]), Seg(chunks=[sse(tool_result(2), id="e1")])
    )
    async with ResumableSession(server.url, http_client=http) as session:
        assert session.session_id == SESSION_ID
        assert session.protocol_version == PROTOCOL_VERSION
        assert session.server_info == {"name": "fake", "version": "1"}
        assert await session.call_tool("t", {"x": 1}) == tool_result(2)["result"]
    hits = server.app.hits
    assert [(h.method, h.path) for h in hits] == [
        ("POST", "/mcp"),
        ("POST", "/mcp"),
        ("POST", "/mcp"),
        ("GET", "/mcp/streams/a"),
        ("DELETE", "/mcp"),
    ]
    assert hits[0].json["params"]["protocolVersion"] == PROTOCOL_VERSION
    assert "mcp-session-id" not in hits[0].headers
    assert hits[1].json == {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert hits[2].json["params"] == {"name": "t", "arguments": {"x": 1}}
    for hit in hits[1:]:
        assert hit.headers["mcp-session-id"] == SESSION_ID
        assert hit.headers["mcp-protocol-version"] == PROTOCOL_VERSION


async def test_server_requests_are_answered_through_the_link_and_progress_reported(
    server: LiveServer, http: httpx.AsyncClient
) -> None:
    progress_note = {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": "mcp-resume-asgi-1", "progress": 1, "total": 2, "message": "half"},
    }
    server.app.queue(
        Seg(link="/mcp/streams/t1", chunks=[prime("e0", retry=10), sse(progress_note, id="e1")]),
        Seg(chunks=[sse(server_request("s1"), id="e2"), sse(server_request("p", "ping"), id="e3")]),
        Seg(204),
        Seg(link="/mcp/streams/t2", chunks=[sse(notification(9), id="e4"), sse(tool_result(2), id="e5")]),
    )
    asked: list[tuple[str, dict[str, Any]]] = []
    notes: list[str] = []
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_request(method: str, params: dict[str, Any]) -> dict[str, Any]:
        asked.append((method, params))
        return {"action": "accept", "content": {"name": "Ada"}}

    def on_notification(method: str, params: dict[str, Any]) -> None:
        notes.append(method)

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async with ResumableSession(
        server.url, http_client=http, on_request=on_request, on_notification=on_notification
    ) as session:
        assert await session.call_tool("t", on_progress=on_progress) == tool_result(2)["result"]

    assert asked == [("elicitation/create", {"message": "name?"})]  # ping is answered without it
    assert progress == [(1.0, 2.0, "half")]
    assert notes == ["notifications/progress", "notifications/progress"]
    flush = next(h for h in server.app.hits if h.method == "POST" and h.path == "/mcp/streams/t1")
    assert sorted(flush.json, key=lambda m: str(m["id"])) == [
        result("p", {}),
        result("s1", {"action": "accept", "content": {"name": "Ada"}}),
    ]
    # nothing was POSTed to the MCP URL but the session's own messages
    assert [h.json.get("method") for h in server.app.hits if h.method == "POST" and h.path == "/mcp"] == [
        "initialize",
        "notifications/initialized",
        "tools/call",
    ]


async def test_json_rpc_errors_and_lost_streams_raise_mcp_error(
    server: LiveServer, http: httpx.AsyncClient
) -> None:
    error = {"jsonrpc": "2.0", "id": 2, "error": {"code": -32602, "message": "bad", "data": {"field": "x"}}}
    server.app.queue(
        Seg(json_body=error),
        Seg(link="/mcp/streams/a", chunks=[prime("e0", retry=10)]),
        Seg(404),
    )
    async with ResumableSession(server.url, http_client=http) as session:
        with pytest.raises(McpError) as info:
            await session.request("tools/list")
        assert (info.value.code, info.value.message, info.value.data) == (-32602, "bad", {"field": "x"})
        with pytest.raises(McpError) as info:
            await session.call_tool("t")
        assert info.value.code == -32000
        assert "404" in info.value.message


async def test_http_errors_raise_session_error(server: LiveServer, http: httpx.AsyncClient) -> None:
    server.app.queue(Seg(500), Seg(404))
    async with ResumableSession(server.url, http_client=http) as session:
        with pytest.raises(SessionError) as info:
            await session.request("tools/list")
        assert info.value.status_code == 500
        with pytest.raises(SessionError, match="expired"):
            await session.request("tools/list")


async def test_server_request_without_handler_gets_method_not_found(
    server: LiveServer, http: httpx.AsyncClient
) -> None:
    server.app.queue(
        Seg(chunks=[prime("e0", retry=10), sse(server_request(3, "sampling/createMessage"), id="e1")]),
        Seg(chunks=[sse(tool_result(2), id="e2")]),
    )
    async with ResumableSession(server.url, http_client=http) as session:
        await session.call_tool("t")
    # no Link: the answer goes to the MCP URL, as the plain protocol says
    answer = next(h.json for h in server.app.hits if h.method == "POST" and "error" in json.loads(h.body))
    assert answer["id"] == 3
    assert answer["error"]["code"] == -32601


async def test_default_client_is_owned_and_closed(server: LiveServer) -> None:
    session = ResumableSession(server.url)
    async with session:
        assert session.session_id == SESSION_ID
    assert session._client.is_closed
    with pytest.raises(SessionError):
        await session.request("ping")


async def test_failed_initialize_raises_and_cleans_up(server: LiveServer, http: httpx.AsyncClient) -> None:
    server.app.initialize_result = {"capabilities": {}}  # no protocolVersion
    with pytest.raises(SessionError, match="protocolVersion"):
        async with ResumableSession(server.url, http_client=http):
            pytest.fail("must not get here")
    assert [h.method for h in server.app.hits] == ["POST", "DELETE"]


@pytest.mark.slow
async def test_unreachable_server_raises_session_error() -> None:
    async with httpx.AsyncClient(transport=ResumableTransport()) as http:
        with pytest.raises(SessionError, match="ConnectError"):
            async with ResumableSession("http://127.0.0.1:1/mcp", http_client=http):
                pass


async def test_exceptions_in_the_body_propagate_unwrapped(
    server: LiveServer, http: httpx.AsyncClient
) -> None:
    with pytest.raises(KeyError):
        async with ResumableSession(server.url, http_client=http):
            raise KeyError("mine")
    assert server.app.hits[-1].method == "DELETE"
