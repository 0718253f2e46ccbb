"""The stream URL a server names in ``Link: <...>; rel="stream"`` (SEP-1335), and why it must stay on its origin.

Why apart from the transport: the ``Link`` header is server input that the
transport *follows*, with the headers of the original POST - session id,
protocol version, authorization. Parsing it (RFC 8288) and deciding whether a
URL may be followed are plain functions on strings and URLs, tested alone; a
URL on another origin, or one carrying userinfo, is refused here so the
session's credentials never leave the server that issued them.
"""

from __future__ import annotations

import logging
from typing import Final

import httpx

logger = logging.getLogger(__name__)

_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    scheme = url.scheme.lower()
    return scheme, url.host.lower(), url.port if url.port is not None else _DEFAULT_PORTS.get(scheme)


def same_origin(a: httpx.URL, b: httpx.URL) -> bool:
    """Scheme, host and port equal (with default ports filled in)."""
    return _origin(a) == _origin(b)


def parse_link_header(values: list[str]) -> list[tuple[str, dict[str, str]]]:
    """Parse ``Link`` header values (RFC 8288) into ``(target, params)`` pairs.

    Parameter names are lower-cased; quoted values are unquoted. Malformed
    entries are skipped rather than guessed at.
    """
    links: list[tuple[str, dict[str, str]]] = []
    for value in values:
        for entry in _split_outside_quotes(value, ","):
            entry = entry.strip()
            if not entry.startswith("<") or ">" not in entry:
                continue
            target, _, rest = entry[1:].partition(">")
            params: dict[str, str] = {}
            for param in _split_outside_quotes(rest, ";"):
                name, eq, pvalue = param.strip().partition("=")
                name = name.strip().lower()
                if not name or name in params:
                    continue
                pvalue = pvalue.strip()
                if len(pvalue) >= 2 and pvalue[0] == pvalue[-1] == '"':
                    pvalue = pvalue[1:-1].replace('\\"', '"').replace("\\\\", "\\")
                params[name] = pvalue if eq else ""
            links.append((target.strip(), params))
    return links


def _split_outside_quotes(text: str, separator: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    in_quotes = in_angle = escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif in_quotes and char == "\\":
            escaped = True
        elif char == '"' and not in_angle:
            in_quotes = not in_quotes
        elif char == "<" and not in_quotes:
            in_angle = True
        elif char == ">" and not in_quotes:
            in_angle = False
        elif char == separator and not in_quotes and not in_angle:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return parts


def stream_link(response: httpx.Response, base: httpx.URL) -> httpx.URL | None:
    """The ``rel="stream"`` URL of ``response``, resolved against ``base``; None if absent or refused.

    A URL on another origin (or carrying userinfo, which httpx would turn into
    credentials) is refused: the session headers must never leave the server
    that issued them.
    """
    values = response.headers.get_list("link")
    if not values:
        return None
    for target, params in parse_link_header(values):
        if "stream" not in params.get("rel", "").lower().split():
            continue
        try:
            url = base.join(target)
        except (httpx.InvalidURL, ValueError):
            logger.warning("ignoring malformed stream Link URL")
            return None
        if not same_origin(url, base) or url.userinfo:
            logger.warning("ignoring stream Link URL on another origin than %s", safe_url(base))
            return None
        return url
    return None


def safe_url(url: httpx.URL) -> str:
    """A URL fit for a log line: no userinfo, query or fragment (they can carry secrets)."""
    return str(url.copy_with(userinfo=b"", query=None, fragment=None))
