"""The engine on trio: the same resume, served by hypercorn's trio worker.

uvicorn runs only on asyncio, so the rest of the suite would not notice an
asyncio-only call in the engine; this test would.
"""

from __future__ import annotations

import socket

import anyio
import httpx
import pytest
from hypercorn.config import Config
from hypercorn.trio import serve

from mcp_resume_asgi import Policy, resumable
from tests.apps.probe_app import create_app
from tests.support.raw import RawSession
from tests.support.timing import scaled

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.parametrize("anyio_backend", ["trio"])
@pytest.mark.anyio
async def test_resume_after_at_will_disconnects_under_trio() -> None:
    app = resumable(create_app(), policy=Policy(retry_ms=20, max_connection_s=0.15))
    port = _free_port()
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.loglevel = "WARNING"
    shutdown = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: serve(app, config, shutdown_trigger=shutdown.wait))  # type: ignore[arg-type]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            with anyio.fail_after(scaled(10)):
                while True:
                    try:
                        await client.get("/")
                        break
                    except httpx.ConnectError:
                        await anyio.sleep(0.05)
            s = RawSession(client)
            await s.initialize()
            call = s.tool_call("progress", {"steps": 10, "seconds": 1.0}, progress=True)
            reply = await s.exchange("POST", "/mcp", call)
            assert reply.closed_by_server
            progress = [m["params"]["progress"] for m in reply.messages() if "params" in m]
            last = reply.last_id
            for _ in range(50):
                more = await s.exchange("GET", "/mcp", headers=s.headers(last_event_id=last))
                progress += [m["params"]["progress"] for m in more.messages() if "params" in m]
                last = more.last_id or last
                if more.messages() and "result" in more.messages()[-1]:
                    break
            assert progress == list(range(1, 11))
        shutdown.set()
