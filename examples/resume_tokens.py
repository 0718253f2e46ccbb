"""Polling a slow tool with resume tokens: `python -m examples.resume_tokens`.

The server answers `countdown` after a 1-second soft deadline with an interim result
carrying `_meta.nextResumeToken`; the client helper re-issues the call with the token
until the final result, and hands only that to the application.
"""

from __future__ import annotations

import socket
import threading
import time

import anyio
import uvicorn

from examples.server import server
from mcp_resume_asgi import Policy, resumable
from mcp_resume_asgi.client import ResumableSession

app = resumable(
    server.streamable_http_app(), policy=Policy(soft_deadline_s=1.0, retry_ms=100), resume_tokens=True
)


async def client(url: str) -> None:
    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        print(f"  progress {progress:g}/{total:g}: {message}")

    async with ResumableSession(url) as session:  # declares experimental.resumeTokens
        started = time.monotonic()
        result = await session.call_tool("countdown", {"seconds": 3}, on_progress=on_progress)
        print(f"final result after {time.monotonic() - started:.1f}s: {result['content'][0]['text']!r}")


def main() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    uv = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not uv.started:
        time.sleep(0.05)
    try:
        anyio.run(client, f"http://127.0.0.1:{sock.getsockname()[1]}/mcp")
    finally:
        uv.should_exit = True
        thread.join(timeout=5)


if __name__ == "__main__":
    main()
