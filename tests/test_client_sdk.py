"""The stock `mcp` SDK client, made resumable by `sdk_http_client`, against the scripted server."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from mcp_resume_asgi.client import ResumableTransport, sdk_http_client
from tests.test_client_transport import (
    LiveServer,
    Seg,
    anyio_backend,
    live_server,
    prime,
    result,
    server,
    sse,
)

__all__ = ["anyio_backend", "live_server", "server"]  # fixtures shared with the transport tests

pytestmark = pytest.mark.anyio

mcp = pytest.importorskip("mcp")


def tool_result(request_id: Any, text: str) -> dict[str, Any]:
    return result(request_id, {"content": [{"type": "text", "text": text}], "isError": False})


ELICIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "elicitation/create",
    "params": {
        "mode": "form",
        "message": "name?",
        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
    },
}


async def test_stock_sdk_client_rides_out_disconnects_and_multi_turn(server: LiveServer) -> None:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp_types import ElicitResult, TextContent

    server.app.queue(
        # tools/call: the stream closes after the priming event, resumes on the Link
        Seg(link="/mcp/streams/t1", chunks=[prime("e0", retry=10), sse(ELICIT, id="e1")]),
        Seg(204),  # GET t1: waiting for the answer
        Seg(link="/mcp/streams/t2", chunks=[prime("e2", retry=10)]),  # POST t1 (the answer)
        Seg(chunks=[sse(tool_result(2, "hello Ada"), id="e3")]),  # GET t2
        Seg(json_body=result(3, {"tools": [{"name": "t", "inputSchema": {"type": "object"}}]})),  # tools/list
    )
    asked: list[str] = []

    async def on_elicit(context: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"name": "Ada"})

    async with (
        sdk_http_client(transport=ResumableTransport(default_retry_ms=10)) as http,
        streamable_http_client(server.url, http_client=http) as (read, write),
        ClientSession(read, write, elicitation_callback=on_elicit) as session,
    ):
        await session.initialize()
        outcome = await session.call_tool("t", {})

    assert asked == ["name?"]
    assert not outcome.is_error
    assert isinstance(outcome.content[0], TextContent)
    assert outcome.content[0].text == "hello Ada"
    paths = [(h.method, h.path) for h in server.app.hits]
    assert ("POST", "/mcp/streams/t1") in paths
    answer = next(h for h in server.app.hits if h.path == "/mcp/streams/t1" and h.method == "POST")
    assert answer.json == [
        {"jsonrpc": "2.0", "id": 0, "result": {"action": "accept", "content": {"name": "Ada"}}}
    ]
    assert answer.headers["last-event-id"] == "e1"
    # the SDK's answer never reached the MCP URL
    assert not any(h.method == "POST" and h.path == "/mcp" and "result" in h.json for h in server.app.hits)


async def test_sdk_client_defaults_mirror_the_sdk() -> None:
    import httpx2
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with sdk_http_client(headers={"x-a": "1"}) as http, create_mcp_http_client() as stock:
        assert isinstance(http, httpx2.AsyncClient)
        assert http.timeout == stock.timeout
        assert http.headers["x-a"] == "1"
        assert http.follow_redirects == stock.follow_redirects


async def test_network_errors_surface_as_httpx2_errors() -> None:
    import httpx2

    async with sdk_http_client() as http:
        with pytest.raises(httpx2.ConnectError):
            await http.get("http://127.0.0.1:1/mcp")


@pytest.mark.slow
def test_importing_the_client_package_does_not_import_the_sdk() -> None:
    code = (
        "import sys, mcp_resume_asgi.client; assert 'httpx2' not in sys.modules and 'mcp' not in sys.modules"
    )
    import subprocess

    subprocess.run([sys.executable, "-c", code], check=True)
