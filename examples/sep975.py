"""SEP-975 resumable requests in a few HTTP exchanges: `python -m examples.sep975`.

The example server's `countdown` tool is plain MCPServer code; the layer adds the
resume policy, `requests/getStatus` and `requests/resume`.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import anyio
import httpx
import uvicorn

from examples.server import server
from mcp_resume_asgi import Policy, resumable
from mcp_resume_asgi.wire.sse import SSEParser

app = resumable(
    server.streamable_http_app(), policy=Policy(retry_ms=300, max_wait_s=30), resumable_requests=True
)
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


async def client(base: str) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {"resumableRequests": {}},  # the opt-in
                "clientInfo": {"name": "sep975-demo", "version": "1"},
            },
        }
        reply = await http.post("/mcp", json=init, headers=HEADERS)
        headers = {
            **HEADERS,
            "mcp-session-id": reply.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-11-25",
        }
        await http.post(
            "/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers
        )

        call = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "countdown", "arguments": {"seconds": 2}},
        }
        token = None
        async with http.stream("POST", "/mcp", json=call, headers=headers) as response:
            parser = SSEParser()
            async for chunk in response.aiter_raw():
                for event in parser.feed(chunk):
                    if event.data:
                        message = json.loads(event.data)
                        print(
                            "first message:",
                            message["method"],
                            {k: v for k, v in message["params"].items() if k != "resumeToken"},
                        )
                        token = message["params"]["resumeToken"]
                if token:
                    break  # the connection drops before the app has said anything
        print("connection dropped before any message from the tool")

        status = {
            "jsonrpc": "2.0",
            "id": 8,
            "method": "requests/getStatus",
            "params": {"requestId": 7, "resumeToken": token},
        }
        print("getStatus:", (await http.post("/mcp", json=status, headers=headers)).json()["result"])
        await anyio.sleep(2.5)
        print("getStatus:", (await http.post("/mcp", json=status, headers=headers)).json()["result"])

        resume = {"jsonrpc": "2.0", "id": 7, "method": "requests/resume", "params": {"resumeToken": token}}
        async with http.stream("POST", "/mcp", json=resume, headers=headers) as response:
            parser = SSEParser()
            async for chunk in response.aiter_raw():
                for event in parser.feed(chunk):
                    if event.data:
                        message = json.loads(event.data)
                        if "result" in message:
                            print("requests/resume -> result:", message["result"]["content"][0]["text"])
                        else:
                            print(
                                "requests/resume ->", message["method"], message["params"].get("progress", "")
                            )


def main() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    uv = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not uv.started:
        time.sleep(0.05)
    try:
        anyio.run(client, f"http://127.0.0.1:{sock.getsockname()[1]}")
    finally:
        uv.should_exit = True
        thread.join(timeout=5)


if __name__ == "__main__":
    main()
