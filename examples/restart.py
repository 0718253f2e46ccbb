"""The demo's last act: the server restarted mid-call on a SQLite store, the client still answered once.

`create_app()` is `examples.server`'s countdown server wrapped with no store given: the store
is the URL in the `MCP_RESUME_STORE` environment variable (here `sqlite:///<tmp>/demo.db`).
`restart_demo()` serves it with uvicorn in a child process, calls `countdown`, and while the
call runs stops that process as a deploy would (SIGTERM: it drains, the call finishes there and
its result is written to the file), starts a new process on the same file and port, and resumes
there from the last event it got: the missed events, then the result, once.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from starlette.types import ASGIApp

from mcp_resume_asgi import Policy, resumable
from mcp_resume_asgi.wire.sse import SSEParser

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
ROOT = Path(__file__).resolve().parents[1]
UVICORN = ("--lifespan", "on", "--log-level", "warning", "--port")


def create_app() -> ASGIApp:
    """The countdown server, on the store `MCP_RESUME_STORE` names."""
    from examples.server import server

    return resumable(server.streamable_http_app(), policy=Policy(retry_ms=300, max_wait_s=60))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _start(port: int, store_url: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "MCP_RESUME_STORE": store_url, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", "examples.restart:create_app", *UVICORN, str(port)],
        env=env,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("the server did not start") from None
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the server did not start in 60 s")


def _describe(data: bytes | None) -> str:
    if not data:
        return "(priming event)"
    message = json.loads(data)
    if "result" in message:
        return f"RESULT {message['result']['content'][0]['text']!r}"
    if "params" in message and "progress" in message["params"]:
        return f"progress {message['params']['progress']:g}/{message['params']['total']:g}"
    return str(message.get("method", "?"))


def restart_demo() -> int:
    """Run the act; returns how many results the client received (1)."""
    folder = tempfile.mkdtemp(prefix="mcp-resume-demo-")
    store_url = f"sqlite://{folder}/demo.db"
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    print(f"\n4. A server on SQLite ({store_url}), restarted mid-call")
    first = _start(port, store_url)
    results = 0
    try:
        with httpx.Client(base_url=base, timeout=30) as http:
            init: dict[str, Any] = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "demo", "version": "1"},
                },
            }
            reply = http.post("/mcp", json=init, headers=HEADERS)
            headers = {
                **HEADERS,
                "mcp-session-id": reply.headers["mcp-session-id"],
                "mcp-protocol-version": "2025-11-25",
            }
            http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
            call = {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "countdown", "arguments": {"seconds": 3}, "_meta": {"progressToken": "t"}},
            }
            last_id: bytes | None = None
            with http.stream("POST", "/mcp", json=call, headers=headers) as response:
                link = response.headers["link"].split(";")[0].strip("<>")
                parser, seen = SSEParser(), 0
                for chunk in response.iter_raw():
                    for event in parser.feed(chunk):
                        print(f"  {'event':<10} {_describe(event.data)}")
                        last_id = event.id or last_id
                        results += _describe(event.data).startswith("RESULT")
                        seen += 1
                    if seen == 3:
                        print("  the server is stopped (SIGTERM, as a deploy does): it drains, the call")
                        print("  finishes there and is written to the file; its client's connection closes")
                        first.send_signal(signal.SIGTERM)
                        seen += 1
            first.wait(60)
            print(f"  {'old server':<10} exited ({first.returncode}); a new process starts on the same file")
        second = _start(port, store_url)
        try:
            with httpx.Client(base_url=base, timeout=30) as http:
                assert last_id is not None
                with http.stream(
                    "GET", link, headers={**headers, "last-event-id": last_id.decode()}
                ) as response:
                    print(
                        f"  {'resume':<10} GET <Link URL> with Last-Event-ID -> HTTP {response.status_code}"
                    )
                    parser = SSEParser()
                    for chunk in response.iter_raw():
                        for event in parser.feed(chunk):
                            print(f"  {'event':<10} {_describe(event.data)}")
                            results += _describe(event.data).startswith("RESULT")
            print(f"  {'results':<10} {results} (exactly once, across the restart)")
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(60)
    finally:
        if first.poll() is None:
            first.kill()
    return results
