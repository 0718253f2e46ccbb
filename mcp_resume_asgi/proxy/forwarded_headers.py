"""Which headers cross the proxy, each way: the end-to-end ones pass, the hop-by-hop ones stop.

RFC 9110 section 7.6.1: `Connection` and every header it names, and the classic hop-by-hop
set (`Keep-Alive`, `Proxy-Authenticate`, `Proxy-Authorization`, `TE`, `Trailer`,
`Transfer-Encoding`, `Upgrade`), describe one connection and end with it. The rest is the
client's and the upstream's to say to each other and passes untouched, credentials
included: the upstream authenticates every request itself.

Towards the upstream, three headers are the proxy's own: `Host` names the upstream (a
server with DNS rebinding protection, the `mcp` SDK's among them, checks it), the
client's host travelling in `X-Forwarded-Host`; `Accept-Encoding` is `identity`, because
the middleware above the proxy reads the upstream's answers (compress at the edge, not
behind it); and `Content-Length` is the length of the body the proxy sends (the layers
above may have rewritten the client's). Plain data in, plain data out.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["HOP_BY_HOP", "to_client", "to_upstream"]

Headers = list[tuple[bytes, bytes]]

#: Headers of one connection, never forwarded (RFC 9110 7.6.1, and RFC 2616's list).
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
#: Set by the proxy itself towards the upstream.
_OWN_UPSTREAM = frozenset(
    {b"host", b"accept-encoding", b"content-length", b"x-forwarded-host", b"x-forwarded-proto"}
)


def _named_by_connection(headers: Iterable[tuple[bytes, bytes]]) -> set[bytes]:
    named: set[bytes] = set()
    for name, value in headers:
        if name.lower() == b"connection":
            named.update(token.strip().lower() for token in value.split(b",") if token.strip())
    return named


def _end_to_end(headers: Iterable[tuple[bytes, bytes]]) -> Headers:
    pairs = [(name.lower(), value) for name, value in headers]
    dropped = HOP_BY_HOP | _named_by_connection(pairs)
    return [(name, value) for name, value in pairs if name not in dropped]


def to_upstream(headers: Iterable[tuple[bytes, bytes]], upstream_host: bytes, scheme: str) -> Headers:
    """The client's request headers as the upstream gets them (see the module doc)."""
    forwarded = _end_to_end(headers)
    client_host = next((value for name, value in forwarded if name == b"host"), None)
    out = [(name, value) for name, value in forwarded if name not in _OWN_UPSTREAM]
    out.append((b"host", upstream_host))
    out.append((b"accept-encoding", b"identity"))
    if client_host is not None:
        out.append((b"x-forwarded-host", client_host))
    out.append((b"x-forwarded-proto", scheme.encode("latin-1")))
    return out


def to_client(headers: Iterable[tuple[bytes, bytes]]) -> Headers:
    """The upstream's response headers as the client gets them: its own, but the hop-by-hop ones."""
    return _end_to_end(headers)
