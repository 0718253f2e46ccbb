"""The main job, end to end: a wrapped server, a dropped connection, a resume.

Starts `examples.server:app` under uvicorn on a free loopback port, then:

1. calls the `countdown` tool over raw HTTP, shows the priming event, the
   `Link: rel="stream"` header and a few events, and drops the connection;
2. resumes through the Link URL with `Last-Event-ID` and receives exactly the
   events it missed, then the result;
3. runs the same tool with the stock `mcp` client while the middleware closes
   the connection every 2 seconds, and counts the resumes;
4. (`examples/restart.py`) serves the tool on a SQLite store in a child process, stops
   that process mid-call as a deploy would, starts a new one on the same file, and
   resumes there: the client gets the result, exactly once.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

import anyio
import httpx
import uvicorn

from examples.restart import restart_demo
from examples.server import app
from mcp_resume_asgi.wire.sse import SSEParser

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def show(label: str, text: str) -> None:
    print(f"  {label:<10} {text}")


def describe(event_id: bytes | None, data: bytes | None) -> str:
    short = (event_id or b"-").decode()
    short = short if len(short) < 24 else f"...{short[-12:]}"
    if not data:
        return f"id={short} (priming event: nothing to dispatch, an id to resume from)"
    message = json.loads(data)
    if "params" in message and "progress" in message["params"]:
        body = f"progress {message['params']['progress']:g}/{message['params']['total']:g}"
    elif "result" in message:
        body = f"RESULT {message['result']['content'][0]['text']!r}"
    else:
        body = message.get("method", "?")
    return f"id={short} {body}"


async def raw_demo(base: str) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "demo", "version": "1"},
            },
        }
        reply = await http.post("/mcp", json=init, headers=HEADERS)
        session = reply.headers["mcp-session-id"]
        headers = {**HEADERS, "mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
        await http.post(
            "/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers
        )
        print(f"session {session}")

        call: dict[str, Any] = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "countdown", "arguments": {"seconds": 3}, "_meta": {"progressToken": "t"}},
        }
        print("\n1. POST tools/call countdown(3s), then the network 'fails' after 3 events")
        last_id = None
        async with http.stream("POST", "/mcp", json=call, headers=headers) as response:
            link = response.headers["link"].split(";")[0].strip("<>")
            show("Link", response.headers["link"][:60] + "...")
            parser, count = SSEParser(), 0
            async for chunk in response.aiter_raw():
                for event in parser.feed(chunk):
                    show(
                        "event",
                        describe(event.id, event.data) + (f" retry={event.retry}ms" if event.retry else ""),
                    )
                    last_id = event.id
                    count += 1
                if count >= 4:
                    break
        print("   connection dropped; the tool keeps running on the server, its events are recorded")
        await anyio.sleep(1.5)

        print("\n2. GET <Link URL> with Last-Event-ID: exactly the missed events, then the result")
        assert last_id is not None
        resume_headers = {**headers, "last-event-id": last_id.decode()}
        async with http.stream("GET", link, headers=resume_headers) as response:
            parser = SSEParser()
            async for chunk in response.aiter_raw():
                for event in parser.feed(chunk):
                    show("event", describe(event.id, event.data))
                    last_id = event.id or last_id
        after = await http.get(link, headers={**headers, "last-event-id": last_id.decode()})
        show("then", f"GET <Link URL> after the result -> HTTP {after.status_code} (the stream is over)")


async def stock_client_demo(base: str) -> None:
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    print("\n3. The stock `mcp` client, countdown(5s), the server closing the connection every 2s")
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async with streamable_http_client(f"{base}/mcp") as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        started = time.monotonic()
        result = await session.call_tool("countdown", {"seconds": 5}, progress_callback=on_progress)
        text = result.content[0].text if result.content and result.content[0].type == "text" else "?"
        show("result", f"{text!r} after {time.monotonic() - started:.1f}s")
        show("progress", f"{len(progress)} notifications, in order: {progress == sorted(set(progress))}")


class Counter:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.resumes = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] == "GET"
            and any(k == b"last-event-id" for k, _ in scope["headers"])
        ):
            self.resumes += 1
        await self.inner(scope, receive, send)


def main() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    counter = Counter(app)
    server = uvicorn.Server(uvicorn.Config(counter, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}"
    print(f"wrapped example server (in-memory store) at {base}/mcp\n")
    try:
        anyio.run(raw_demo, base)
        before = counter.resumes
        anyio.run(stock_client_demo, base)
        show(
            "resumes",
            f"{counter.resumes - before} GETs with Last-Event-ID by the stock client (call stream + GET stream)",
        )
    finally:
        server.should_exit = True
        thread.join(timeout=5)
    if restart_demo() != 1:
        raise SystemExit("the result did not arrive exactly once across the restart")


if __name__ == "__main__":
    main()
