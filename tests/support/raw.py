"""A raw Streamable HTTP client for protocol-level tests: every byte is visible.

The stock clients hide what the engine must get exactly right (priming events,
ids, `retry:` before a close, `Link`, 204s), so these tests speak HTTP directly.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx

from mcp_resume_asgi.wire.sse import SSEParser
from tests.support.timing import scaled

ACCEPT_BOTH = "application/json, text/event-stream"
LINK = re.compile(r'<([^>]+)>;\s*rel="stream"')


@dataclass
class Event:
    id: str | None
    data: str | None
    retry: int | None

    @property
    def message(self) -> Any:
        return json.loads(self.data) if self.data else None


@dataclass
class Reply:
    status: int
    headers: httpx.Headers
    events: list[Event] = field(default_factory=list)
    raw: bytes = b""
    closed_by_server: bool = False

    @property
    def link(self) -> str | None:
        match = LINK.search(self.headers.get("link", ""))
        return match.group(1) if match else None

    @property
    def last_id(self) -> str | None:
        ids = [e.id for e in self.events if e.id]
        return ids[-1] if ids else None

    def messages(self) -> list[Any]:
        return [e.message for e in self.events if e.data]


class RawSession:
    def __init__(self, client: httpx.AsyncClient, path: str = "/mcp", version: str = "2025-11-25") -> None:
        self.client = client
        self.path = path
        self.version = version
        self.session_id: str | None = None
        self.header_version: str | None = None
        self._next_id = 0

    def next_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def headers(self, **extra: str) -> dict[str, str]:
        headers = {"accept": ACCEPT_BOTH, "content-type": "application/json"}
        if self.session_id:
            headers["mcp-session-id"] = self.session_id
        version = self.header_version or self.version
        headers["mcp-protocol-version"] = version
        headers.update({k.replace("_", "-"): v for k, v in extra.items()})
        return headers

    def opening_headers(self) -> dict[str, str]:
        """The headers of `initialize`: no session, no protocol version yet."""
        return {"accept": ACCEPT_BOTH, "content-type": "application/json"}

    async def initialize(self, capabilities: dict[str, Any] | None = None) -> Reply:
        body = {
            "jsonrpc": "2.0",
            "id": self.next_id(),
            "method": "initialize",
            "params": {
                "protocolVersion": self.version,
                "capabilities": capabilities or {"elicitation": {}},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        }
        reply = await self.exchange("POST", self.path, body, headers=self.opening_headers())
        self.session_id = reply.headers.get("mcp-session-id")
        await self.notify("notifications/initialized")
        return reply

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> httpx.Response:
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            body["params"] = params
        return await self.client.post(self.path, json=body, headers=self.headers())

    def tool_call(
        self, name: str, arguments: dict[str, Any] | None = None, progress: bool = False
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
        request_id = self.next_id()
        if progress:
            params["_meta"] = {"progressToken": f"p{request_id}"}
        return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}

    @contextlib.asynccontextmanager
    async def open(
        self, method: str, url: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> AsyncIterator[tuple[httpx.Response, SSEReader]]:
        request_headers = headers if headers is not None else self.headers()
        content = None if body is None else json.dumps(body).encode()
        async with self.client.stream(method, url, content=content, headers=request_headers) as response:
            yield response, SSEReader(response)

    async def exchange(
        self,
        method: str,
        url: str,
        body: Any = None,
        *,
        headers: dict[str, str] | None = None,
        stop_after: int | None = None,
        timeout: float = 10.0,
    ) -> Reply:
        """Send a request and read its answer to the end (or `stop_after` data events, then drop it)."""
        async with self.open(method, url, body, headers) as (response, reader):
            reply = Reply(response.status_code, response.headers)
            if "text/event-stream" not in response.headers.get("content-type", ""):
                reply.raw = await response.aread()
                return reply
            with anyio.fail_after(scaled(timeout)):
                async for event in reader:
                    reply.events.append(event)
                    if stop_after is not None and sum(1 for e in reply.events if e.data) >= stop_after:
                        return reply
            reply.raw = reader.raw
            reply.closed_by_server = True
            return reply


class SSEReader:
    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.parser = SSEParser()
        self.raw = b""

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._events()

    async def _events(self) -> AsyncIterator[Event]:
        async for chunk in self.response.aiter_raw():
            self.raw += chunk
            for event in self.parser.feed(chunk):
                yield Event(
                    id=event.id.decode() if event.id is not None else None,
                    data=event.data.decode() if event.data is not None else None,
                    retry=event.retry,
                )
