"""What the client saw: every HTTP exchange of a test's clients, and which node answered it.

`Recorder` keeps one `Exchange` per request (the node from the answer's `x-node` header);
the stock `mcp` client records through `Recorder.httpx2_client`, the client helper through
`helper_http_client` (a `RecordingTransport` under its `ResumableTransport`);
`recorded_session` opens a session of either, recorded.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import httpx2

from mcp_resume_asgi.client import ResumableSession, ResumableTransport
from mcp_resume_asgi.client.incoming import NotificationHandler
from tests.support.mcp_client import stock_session

__all__ = [
    "Exchange",
    "Recorder",
    "RecordingTransport",
    "helper_http_client",
    "owner_of",
    "recorded_session",
]


@dataclass
class Exchange:
    """One HTTP request/response as the client saw it (one TCP connection each, here)."""

    method: str
    path: str
    rpc: str
    """For a POST: the JSON-RPC method, ``"response"`` (an answer to the server), ``"batch"``; else ``""``."""
    resume: bool
    """``Last-Event-ID`` was sent."""
    status: int
    node: int | None
    """The ``x-node`` pid of the process that answered the connection."""
    resume_header: str | None
    link: str | None


def _rpc_kind(body: bytes) -> str:
    try:
        message = json.loads(body)
    except ValueError:
        return "?"
    if isinstance(message, list):
        return "batch"
    if not isinstance(message, dict):
        return "?"
    if isinstance(message.get("method"), str):
        return str(message["method"])
    return "response" if "result" in message or "error" in message else "?"


@dataclass
class Recorder:
    exchanges: list[Exchange] = field(default_factory=list)

    def add(
        self, method: str, path: str, headers: Any, body: bytes, status: int, response_headers: Any
    ) -> None:
        node = response_headers.get("x-node")
        self.exchanges.append(
            Exchange(
                method=method,
                path=path,
                rpc=_rpc_kind(body) if method == "POST" else "",
                resume="last-event-id" in headers,
                status=status,
                node=int(node) if node else None,
                resume_header=response_headers.get("mcp-resume"),
                link=response_headers.get("link"),
            )
        )

    # httpx2 event hook (the stock client)
    async def on_response(self, response: httpx2.Response) -> None:
        request = response.request
        try:
            body = request.content
        except Exception:
            body = b""
        self.add(
            request.method, request.url.path, request.headers, body, response.status_code, response.headers
        )

    def httpx2_client(self) -> httpx2.AsyncClient:
        """A client for the stock `mcp` client: a new connection per request, every answer recorded."""
        return httpx2.AsyncClient(
            limits=httpx2.Limits(max_keepalive_connections=0),
            timeout=httpx2.Timeout(30, read=300),
            event_hooks={"response": [self.on_response]},
        )

    def where(self, **match: Any) -> list[Exchange]:
        return [e for e in self.exchanges if all(getattr(e, k) == v for k, v in match.items())]

    def nodes(self, **match: Any) -> Counter[int | None]:
        return Counter(e.node for e in self.where(**match))

    def summary(self) -> str:
        counts = Counter(
            f"{e.method}{' resume' if e.resume else ''}{' link' if '/streams/' in e.path else ''}"
            f"{' ' + e.rpc if e.rpc else ''} -> {e.node} {e.status}"
            for e in self.exchanges
        )
        return "\n".join(f"  {n:3d} x {kind}" for kind, n in sorted(counts.items()))


class RecordingTransport(httpx.AsyncBaseTransport):
    """Under a `ResumableTransport`: records every real HTTP exchange (not the logical stream)."""

    def __init__(self, inner: httpx.AsyncBaseTransport, recorder: Recorder) -> None:
        self.inner = inner
        self.recorder = recorder

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        try:
            body = request.content
        except Exception:
            body = b""
        self.recorder.add(
            request.method, request.url.path, request.headers, body, response.status_code, response.headers
        )
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def helper_http_client(recorder: Recorder) -> httpx.AsyncClient:
    """The client helper's httpx client: `ResumableTransport` over new-connection-per-request, recorded."""
    inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))
    return httpx.AsyncClient(
        transport=ResumableTransport(RecordingTransport(inner, recorder)),
        timeout=httpx.Timeout(30, read=300),
    )


def owner_of(recorder: Recorder) -> int:
    answers = recorder.where(method="POST", rpc="initialize")
    assert len(answers) == 1 and answers[0].node is not None, recorder.summary()
    return answers[0].node


@contextlib.asynccontextmanager
async def recorded_session(
    client: str,
    url: str,
    recorder: Recorder,
    *,
    logging_callback: Any = None,
    on_notification: NotificationHandler | None = None,
) -> AsyncIterator[Any]:
    """A session at `url` of the stock `mcp` client (`client == "stock"`: initialized, not
    terminated on close; `logging_callback` its) or of the client helper (`on_notification` its),
    every HTTP exchange recorded by `recorder`."""
    if client == "stock":
        async with (
            recorder.httpx2_client() as http2,
            stock_session(
                url, http_client=http2, terminate_on_close=False, logging_callback=logging_callback
            ) as session,
        ):
            yield session
    else:
        async with (
            helper_http_client(recorder) as http,
            ResumableSession(url, http_client=http, on_notification=on_notification) as helper,
        ):
            yield helper
