"""The test apps, servers, proxy and client helpers work bare (no middleware)."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import time
from collections.abc import AsyncIterator, Iterator

import anyio
import httpx
import mcp.types as types
import pytest
from mcp.shared.exceptions import MCPError
from starlette.applications import Starlette

from tests.apps import APP_FACTORIES, ELICIT_MESSAGE, FAIL_MESSAGE, NOTIFY_LOGGER
from tests.support.mcp_client import (
    LogCollector,
    call_with_progress,
    result_text,
    stock_session,
    tool_error_message,
)
from tests.support.proxy import CutProxy, proxy_in_thread
from tests.support.server import (
    ServerInfo,
    ServerStartError,
    SubprocessServer,
    ThreadedServer,
    serve,
    serve_in_loop,
    serve_in_thread,
    serve_subprocess,
)
from tests.support.timing import scaled

pytestmark = pytest.mark.timeout(30)

FLAVOURS = sorted(APP_FACTORIES)

INIT_BODY = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
).encode()
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def raw_initialize_request(*, close: bool) -> bytes:
    """A hand-written HTTP/1.1 ``initialize`` POST to /mcp."""
    head = (
        "POST /mcp HTTP/1.1\r\n"
        "Host: 127.0.0.1\r\n"
        "Accept: application/json, text/event-stream\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(INIT_BODY)}\r\n"
        f"Connection: {'close' if close else 'keep-alive'}\r\n\r\n"
    )
    return head.encode() + INIT_BODY


async def read_until_eof(stream: anyio.abc.ByteReceiveStream) -> bytes:
    data = b""
    with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, OSError):
        while True:
            data += await stream.receive()
    return data


@pytest.fixture(scope="module", params=FLAVOURS)
def app_server(request: pytest.FixtureRequest) -> Iterator[ServerInfo]:
    """Each app flavour under uvicorn (thread), shared by the tests of this module."""
    with serve_in_thread(APP_FACTORIES[request.param]) as info:
        yield info


@pytest.fixture(scope="module")
def lowlevel_server() -> Iterator[ServerInfo]:
    with serve_in_thread(APP_FACTORIES["lowlevel"]) as info:
        yield info


@contextlib.asynccontextmanager
async def proxied(server: ServerInfo, **kwargs: object) -> AsyncIterator[CutProxy]:
    async with CutProxy(server.port, **kwargs) as proxy:  # type: ignore[arg-type]
        yield proxy


# --------------------------------------------------------------------------- the apps, bare


@pytest.mark.anyio
@pytest.mark.slow
async def test_echo(app_server: ServerInfo) -> None:
    async with stock_session(app_server.mcp_url) as session:
        assert session.protocol_version == "2025-11-25"
        tools = {tool.name for tool in (await session.list_tools()).tools}
        assert {"echo", "slow_progress", "ask_name", "fail"} <= tools
        result = await session.call_tool("echo", {"text": "héllo"})
        assert not result.is_error
        assert result_text(result) == "héllo"


@pytest.mark.anyio
@pytest.mark.slow
async def test_slow_progress_in_order(app_server: ServerInfo) -> None:
    async with stock_session(app_server.mcp_url) as session:
        result, progress = await call_with_progress(session, "slow_progress", {"seconds": 0.5, "steps": 5})
    assert result_text(result) == "done 5"
    assert progress == [(float(i), 5.0, f"step {i}") for i in range(1, 6)]


@pytest.mark.anyio
@pytest.mark.slow
async def test_ask_name_round_trip(app_server: ServerInfo) -> None:
    seen: list[types.ElicitRequestParams] = []

    async def elicit(context: object, params: types.ElicitRequestParams) -> types.ElicitResult:
        seen.append(params)
        return types.ElicitResult(action="accept", content={"name": "bob"})

    async with stock_session(app_server.mcp_url) as session:
        assert result_text(await session.call_tool("ask_name", {})) == "hello alice"
    async with stock_session(app_server.mcp_url, elicitation_callback=elicit) as session:
        assert result_text(await session.call_tool("ask_name", {})) == "hello bob"
    async with stock_session(app_server.mcp_url, elicit_name=None) as session:
        assert result_text(await session.call_tool("ask_name", {})) == "declined"
    [params] = seen
    assert isinstance(params, types.ElicitRequestFormParams)
    assert params.message == ELICIT_MESSAGE
    assert params.requested_schema["properties"]["name"]["type"] == "string"


@pytest.mark.anyio
async def test_fail_gives_error(app_server: ServerInfo) -> None:
    async with stock_session(app_server.mcp_url) as session:
        assert FAIL_MESSAGE in await tool_error_message(session, "fail")
        # the session is still fine afterwards
        assert result_text(await session.call_tool("echo", {"text": "ok"})) == "ok"


@pytest.mark.anyio
@pytest.mark.slow
async def test_lowlevel_notify_later_goes_to_get_stream(lowlevel_server: ServerInfo) -> None:
    logs = LogCollector()
    async with stock_session(lowlevel_server.mcp_url, logging_callback=logs) as session:
        result = await session.call_tool("notify_later", {"count": 3, "interval": 0.1})
        assert result_text(result) == "scheduled 3"
        with anyio.fail_after(scaled(5)):
            messages = await logs.wait_for(3)
    assert [m.data for m in messages] == ["tick 1", "tick 2", "tick 3"]
    assert {m.logger for m in messages} == {NOTIFY_LOGGER}


@pytest.mark.anyio
@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.slow
async def test_json_response_mode(flavour: str) -> None:
    async with (
        serve(APP_FACTORIES[flavour], factory_kwargs={"json_response": True}) as server,
        stock_session(server.mcp_url) as session,
    ):
        assert result_text(await session.call_tool("echo", {"text": "json"})) == "json"
    async with httpx.AsyncClient() as client:
        # (the server is gone: nothing listens any more)
        with pytest.raises(httpx.ConnectError):
            await client.post(server.mcp_url, content=INIT_BODY, headers=MCP_HEADERS)


# --------------------------------------------------------------------------- server runners


@pytest.mark.anyio
async def test_serve_in_loop() -> None:
    async with serve_in_loop(APP_FACTORIES["lowlevel"]) as server, stock_session(server.mcp_url) as session:
        assert result_text(await session.call_tool("echo", {"text": "in loop"})) == "in loop"


@pytest.mark.slow
def test_threaded_server_sync_and_restart_on_same_port() -> None:
    with serve_in_thread(APP_FACTORIES["lowlevel"]) as server:
        response = httpx.post(server.mcp_url, content=INIT_BODY, headers=MCP_HEADERS)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["mcp-session-id"]
    with ThreadedServer(APP_FACTORIES["lowlevel"], port=server.port) as again:
        assert again.info == server
        assert httpx.post(server.mcp_url, content=INIT_BODY, headers=MCP_HEADERS).status_code == 200


def test_startup_failure_raises() -> None:
    @contextlib.asynccontextmanager
    async def broken_lifespan(app: Starlette) -> AsyncIterator[None]:
        raise RuntimeError("lifespan startup failed on purpose")
        yield

    with pytest.raises(ServerStartError):
        ThreadedServer(Starlette(lifespan=broken_lifespan)).start()


@pytest.mark.anyio
@pytest.mark.slow
async def test_subprocess_server_crash_restart_and_kill_on_exit() -> None:
    async with SubprocessServer(APP_FACTORIES["mcpserver"]) as child:
        assert child.info is not None and child.pid is not None
        async with stock_session(child.info.mcp_url) as session:
            assert result_text(await session.call_tool("echo", {"text": "child"})) == "child"
        child.kill()  # a crash, on demand
        assert child.returncode == -signal.SIGKILL
        async with httpx.AsyncClient() as client:
            with pytest.raises(httpx.ConnectError):
                await client.post(child.info.mcp_url, content=INIT_BODY, headers=MCP_HEADERS)
        # a new process on the same port, with factory kwargs
        async with (
            serve_subprocess(
                APP_FACTORIES["lowlevel"], port=child.info.port, factory_kwargs={"json_response": True}
            ) as again,
            httpx.AsyncClient() as client,
        ):
            assert again == child.info
            response = await client.post(again.mcp_url, content=INIT_BODY, headers=MCP_HEADERS)
            assert response.headers["content-type"].startswith("application/json")
    assert nothing_listens_on(again.port)


def nothing_listens_on(port: int) -> bool:
    """Nothing listens on ``port`` any more (the restarted child was stopped on exit)."""
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
@pytest.mark.slow
async def test_thread_server_proxy_and_stock_client_on_trio(anyio_backend: str) -> None:
    async with (
        serve(APP_FACTORIES["mcpserver"]) as server,
        CutProxy(server.port) as proxy,
        stock_session(proxy.mcp_url) as session,
    ):
        result, progress = await call_with_progress(session, "slow_progress", {"seconds": 0.1, "steps": 2})
        assert result_text(result) == "done 2" and len(progress) == 2
        assert result_text(await session.call_tool("ask_name", {})) == "hello alice"


# --------------------------------------------------------------------------- proxy


@pytest.mark.anyio
@pytest.mark.slow
async def test_proxy_passes_traffic_through(lowlevel_server: ServerInfo) -> None:
    async with proxied(lowlevel_server) as proxy:
        async with stock_session(proxy.mcp_url) as session:
            result, progress = await call_with_progress(
                session, "slow_progress", {"seconds": 0.3, "steps": 3}
            )
            assert result_text(result) == "done 3"
            assert len(progress) == 3
            assert result_text(await session.call_tool("ask_name", {})) == "hello alice"
        assert proxy.stats.connections >= 2  # POSTs + the standalone GET stream
        assert proxy.stats.cuts == 0
        assert proxy.stats.bytes_down > 0 and proxy.stats.bytes_up > 0


@pytest.mark.anyio
@pytest.mark.slow
async def test_proxy_cut_all_drops_post_stream_mid_response(lowlevel_server: ServerInfo) -> None:
    async with proxied(lowlevel_server) as proxy, stock_session(proxy.mcp_url) as session:
        first_progress = anyio.Event()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            first_progress.set()

        outcome: list[BaseException | types.CallToolResult] = []

        async def call() -> None:
            try:
                outcome.append(
                    await session.call_tool(
                        "slow_progress", {"seconds": 3, "steps": 30}, progress_callback=on_progress
                    )
                )
            except MCPError as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            with anyio.fail_after(scaled(5)):
                await first_progress.wait()
            assert await proxy.cut_all() >= 1

        # The stock client cannot resume (no event ids): the request fails fast.
        [error] = outcome
        assert isinstance(error, MCPError)
        assert error.error.code == types.CONNECTION_CLOSED
        # ... but the session itself survives (new connections for new requests).
        assert result_text(await session.call_tool("echo", {"text": "still here"})) == "still here"


@pytest.mark.anyio
async def test_proxy_cut_after_bytes_is_exact(lowlevel_server: ServerInfo) -> None:
    async with proxied(lowlevel_server, cut_after_bytes=(50, 50)) as proxy:
        stream = await anyio.connect_tcp("127.0.0.1", proxy.port)
        async with stream:
            await stream.send(raw_initialize_request(close=False))
            data = await read_until_eof(stream)
        assert len(data) == 50
        assert data.startswith(b"HTTP/1.1 200")
        assert proxy.stats.cuts == 1
        [record] = proxy.records
        assert record.cut and record.cut_reason == "bytes" and record.bytes_down == 50


@pytest.mark.anyio
async def test_proxy_random_byte_cuts_are_seeded_and_capped(lowlevel_server: ServerInfo) -> None:
    offsets: list[list[int | None]] = []
    for _ in range(2):
        async with proxied(lowlevel_server, cut_after_bytes=(20, 80), seed=7, max_cuts=2) as proxy:
            received = []
            for _ in range(3):
                stream = await anyio.connect_tcp("127.0.0.1", proxy.port)
                async with stream:
                    await stream.send(raw_initialize_request(close=True))
                    received.append(await read_until_eof(stream))
            offsets.append([r.cut_at_bytes for r in proxy.records])
            assert proxy.stats.cuts == 2
            assert [len(r) for r in received[:2]] == offsets[-1][:2]
            assert all(20 <= len(r) <= 80 for r in received[:2])
            assert offsets[-1][2] is None  # max_cuts reached: no cut planned for the 3rd connection
            assert (
                received[2].rstrip().endswith(b"0")
            )  # complete chunked response, then EOF (Connection: close)
    assert offsets[0] == offsets[1]


@pytest.mark.anyio
async def test_proxy_cut_after_delay(lowlevel_server: ServerInfo) -> None:
    async with proxied(lowlevel_server, cut_after_delay=(0.1, 0.2)) as proxy:
        stream = await anyio.connect_tcp("127.0.0.1", proxy.port)
        start = anyio.current_time()
        async with stream:
            with anyio.fail_after(scaled(3)):
                assert await read_until_eof(stream) == b""
        assert 0.05 <= anyio.current_time() - start < scaled(2)
        assert proxy.stats.cuts == 1 and proxy.records[0].cut_reason == "delay"


@pytest.mark.anyio
async def test_proxy_rst_mode(lowlevel_server: ServerInfo) -> None:
    async with proxied(lowlevel_server, rst=True) as proxy:
        async with httpx.AsyncClient() as client:
            async with client.stream("GET", proxy.base_url + "/nothing-here") as response:
                assert response.status_code == 404
            await proxy.cut_all()  # the idle keep-alive connection
        assert proxy.stats.cuts == 1


@pytest.mark.slow
def test_proxy_in_thread_sync(lowlevel_server: ServerInfo) -> None:
    with proxy_in_thread(lowlevel_server.port) as proxy:
        response = httpx.post(proxy.mcp_url, content=INIT_BODY, headers=MCP_HEADERS)
        assert response.status_code == 200
        assert "serverInfo" in response.text
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as sock:
            deadline = time.monotonic() + scaled(5)
            while proxy.stats.active < 1 or proxy.stats.connections < 2:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            assert proxy.cut_all() >= 1
            assert sock.recv(100) == b""  # FIN
        assert proxy.stats.connections == 2 and proxy.stats.cuts >= 1
