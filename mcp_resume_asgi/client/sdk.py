"""Make the stock `mcp` SDK client resumable: an ``httpx2`` client backed by ``ResumableTransport``.

Why a bridge: since 2.x the `mcp` SDK talks HTTP through ``httpx2``, a fork of
httpx with the same API under another module name, so an ``httpx`` transport
cannot be plugged into it directly. :func:`sdk_http_client` returns an
``httpx2.AsyncClient`` whose transport converts each ``httpx2`` request into an
``httpx`` one, hands it to a :class:`ResumableTransport`, and streams the
response bytes back. The SDK then reads, for every request, one uninterrupted
SSE stream (reconnects, ``Link`` following and SEP-1335 answer buffering all
happen underneath); its own reconnect logic never has anything to do.

Usage::

    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp_resume_asgi.client import sdk_http_client

    async with sdk_http_client() as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                ...

(``mcp.Client(streamable_http_client(url, http_client=http))`` works the same
way.) The SDK does not close an ``http_client`` it was given, hence the outer
``async with``. ``sdk_http_client`` takes the arguments of the SDK's own
``create_mcp_http_client`` (``headers``, ``timeout``, ``auth``) and uses the same
default timeouts (30 s, and 300 s between bytes of a stream), so it can stand in
wherever the SDK accepts an ``McpHttpClientFactory``.

``mcp`` and ``httpx2`` are optional: they are imported only when
:func:`sdk_http_client` is called. It needs mcp >= 2: mcp 1.x talks plain
``httpx``, so there the transport plugs in without a bridge, through
``streamablehttp_client(url, httpx_client_factory=...)`` with a factory returning
``httpx.AsyncClient(headers=headers, timeout=timeout, auth=auth,
transport=ResumableTransport())`` (see the README).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Final

import httpx

from .sse_reader import closing_iterator
from .transport import ResumableTransport

if TYPE_CHECKING:
    import httpx2

logger = logging.getLogger(__name__)

# The SDK's defaults (mcp.shared._httpx_utils), used if that private module moves.
_FALLBACK_TIMEOUT: Final = 30.0
_FALLBACK_SSE_READ_TIMEOUT: Final = 300.0
# Both libraries decode these without optional packages; asking for more (br, zstd) could
# produce a body the httpx side of the bridge (which decodes logical streams) cannot read.
_ACCEPT_ENCODING: Final = b"gzip, deflate"


def _import_httpx2() -> Any:
    try:
        import httpx2
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError(
            "sdk_http_client needs the `mcp` SDK >= 2 (it brings httpx2). With mcp 1.x (>= 1.24), which "
            "talks plain httpx, pass streamable_http_client(url, http_client=...) a client opened with "
            "`async with httpx.AsyncClient(transport=ResumableTransport(), timeout=httpx.Timeout(30, read=300))`"
        ) from exc
    return httpx2


def _default_timeout() -> httpx2.Timeout:
    import httpx2

    try:
        from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

        return httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT)
    except ImportError:  # pragma: no cover - the SDK reorganised its private modules
        return httpx2.Timeout(_FALLBACK_TIMEOUT, read=_FALLBACK_SSE_READ_TIMEOUT)


def sdk_http_client(
    headers: dict[str, str] | None = None,
    timeout: httpx2.Timeout | None = None,
    auth: httpx2.Auth | None = None,
    *,
    transport: ResumableTransport | None = None,
    **client_kwargs: Any,
) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` for the `mcp` SDK (>= 2) whose requests go through ``ResumableTransport``.

    Args:
        headers, timeout, auth: as for the SDK's ``create_mcp_http_client``.
        transport: the resuming transport to use (to set its options or inner transport);
            a default ``ResumableTransport()`` otherwise. It is closed with the client.
        client_kwargs: passed on to ``httpx2.AsyncClient``.
    """
    httpx2_module = _import_httpx2()
    bridge = _bridge_class()(transport if transport is not None else ResumableTransport())
    client: httpx2.AsyncClient = httpx2_module.AsyncClient(
        headers=headers,
        timeout=timeout if timeout is not None else _default_timeout(),
        auth=auth,
        transport=bridge,
        **client_kwargs,
    )
    return client


@functools.cache
def _bridge_class() -> Callable[[ResumableTransport], httpx2.AsyncBaseTransport]:
    """Build the bridge classes on first use, so importing this module needs no httpx2."""
    import httpx2

    def convert(exc: httpx.HTTPError, request: httpx2.Request) -> Exception:
        """The httpx2 exception the SDK expects for an httpx one (same names in both)."""
        cls = getattr(httpx2, type(exc).__name__, None)
        if isinstance(exc, httpx.TransportError):
            if isinstance(cls, type) and issubclass(cls, httpx2.TransportError):
                return cls(str(exc), request=request)
            return httpx2.TransportError(str(exc), request=request)
        return (
            httpx2.StreamError(str(exc)) if isinstance(exc, httpx.StreamError) else httpx2.HTTPError(str(exc))
        )

    class ResponseStream(httpx2.AsyncByteStream):
        def __init__(self, response: httpx.Response, request: httpx2.Request) -> None:
            self._response = response
            self._request = request
            self._iterator: AsyncGenerator[bytes, None] | None = None

        def __aiter__(self) -> AsyncIterator[bytes]:
            self._iterator = self._chunks()
            return self._iterator

        async def _chunks(self) -> AsyncGenerator[bytes, None]:
            try:
                async with closing_iterator(self._response.aiter_raw()) as chunks:
                    async for chunk in chunks:
                        yield chunk
            except httpx.HTTPError as exc:
                raise convert(exc, self._request) from exc

        async def aclose(self) -> None:
            iterator, self._iterator = self._iterator, None
            if iterator is not None:
                try:
                    await iterator.aclose()
                except RuntimeError:  # being iterated by another task right now
                    logger.debug("response stream closed while being read", exc_info=True)
            await self._response.aclose()

    class Httpx2Bridge(httpx2.AsyncBaseTransport):
        """An httpx2 transport that sends through an httpx ``ResumableTransport``."""

        def __init__(self, transport: ResumableTransport) -> None:
            self.transport = transport

        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            body = await request.aread()
            headers = [
                (name, _ACCEPT_ENCODING if name.lower() == b"accept-encoding" else value)
                for name, value in request.headers.raw
            ]
            extensions: dict[str, Any] = {}
            if "timeout" in request.extensions:
                extensions["timeout"] = request.extensions["timeout"]
            inner_request = httpx.Request(
                request.method, str(request.url), headers=headers, content=body, extensions=extensions
            )
            try:
                response = await self.transport.handle_async_request(inner_request)
            except httpx.HTTPError as exc:
                raise convert(exc, request) from exc
            return httpx2.Response(
                response.status_code,
                headers=response.headers.raw,
                stream=ResponseStream(response, request),
                request=request,
                extensions={
                    k: v for k, v in response.extensions.items() if k in ("http_version", "reason_phrase")
                },
            )

        async def aclose(self) -> None:
            await self.transport.aclose()

    return Httpx2Bridge
