"""An incremental, size-bounded Server-Sent Events parser and encoder.

Why not reuse an existing parser: `httpx-sse` is not a dependency we may take,
the `mcp` SDK's parser lives in the optional `httpx2` package, and the resuming
transport needs three things most parsers do not give: it is fed raw bytes as
they arrive (so it can be interrupted between reads without losing state),
it refuses to buffer more than a configured number of bytes for one event (every
byte from the network is hostile: a server that never sends a blank line must
not make us buffer without limit), and it reports whether an event carried an
``id`` field of its own, which is what de-duplication after a resume keys on.

The parsing rules follow the WHATWG HTML "event stream interpretation" section:
lines end in CRLF, LF or CR; a leading UTF-8 BOM is skipped; lines starting
with ``:`` are comments; ``id`` values containing NUL are ignored; ``retry``
must be all ASCII digits; an event is dispatched at a blank line. Unlike a
browser we also dispatch events whose data is empty (the "priming" events of
SEP-1699 consist of just ``id`` and ``retry``), and an incomplete event at the
end of the stream is discarded.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TypeVar

import anyio

logger = logging.getLogger(__name__)

#: Default bound on the bytes of one event (its field lines, without comments).
DEFAULT_MAX_EVENT_BYTES = 1024 * 1024

_MAX_RETRY_DIGITS = 12
_LINE_END = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"


class SSEError(Exception):
    """The event stream cannot be parsed or violates a configured bound."""


class SSEEventTooLarge(SSEError):
    """One event (or one unterminated line) is larger than ``max_event_bytes``."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"server-sent event larger than the limit of {limit} bytes")
        self.limit = limit


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event.

    ``id`` and ``event`` are ``None`` when the event did not carry that field
    (the stream-level "last event id" of the SSE spec is tracked by the caller),
    ``retry`` is the reconnection time in milliseconds if the event set one.
    """

    data: str = ""
    id: str | None = None
    event: str | None = None
    retry: int | None = None


class SSEParser:
    """Feed bytes with :meth:`feed`, get back the events completed by them."""

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        if max_event_bytes <= 0:
            raise ValueError("max_event_bytes must be positive")
        self._max = max_event_bytes
        self._partial = b""  # bytes of a line whose end has not arrived yet
        self._skip_lf = False  # the previous chunk ended in CR: a leading LF belongs to it
        self._started = False  # BOM handling happens once, at the start of the stream
        self._reset_event()

    def _reset_event(self) -> None:
        self._data: list[str] = []
        self._id: str | None = None
        self._event: str | None = None
        self._retry: int | None = None
        self._pending = False
        self._size = 0

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Parse ``chunk``; raise :class:`SSEEventTooLarge` when a bound is crossed."""
        if not chunk:
            return []
        data = self._partial + chunk if self._partial else chunk
        self._partial = b""
        start = 0
        if self._skip_lf:
            self._skip_lf = False
            if data.startswith(b"\n"):
                start = 1
        if not self._started:
            if len(data) - start < len(_BOM) and _BOM.startswith(data[start:]):
                self._partial = data[start:]  # could still become a BOM
                return []
            self._started = True
            if data.startswith(_BOM, start):
                start += len(_BOM)
        events: list[SSEEvent] = []
        for match in _LINE_END.finditer(data, start):
            line = data[start : match.start()]
            start = match.end()
            event = self._line(line)
            if event is not None:
                events.append(event)
        # A final CR has been taken as a line end; an LF opening the next chunk completes it.
        self._skip_lf = data.endswith(b"\r")
        rest = data[start:]
        if self._size + len(rest) > self._max:
            raise SSEEventTooLarge(self._max)
        self._partial = bytes(rest)
        return events

    def _line(self, raw: bytes) -> SSEEvent | None:
        if not raw:
            return self._dispatch()
        if raw.startswith(b":"):
            return None
        self._size += len(raw) + 1
        if self._size > self._max:
            raise SSEEventTooLarge(self._max)
        name, colon, value = raw.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        text = value.decode("utf-8", errors="replace")
        if name == b"data":
            self._data.append(text)
            self._pending = True
        elif name == b"id":
            if "\0" not in text:
                self._id = text
                self._pending = True
        elif name == b"event":
            self._event = text
            self._pending = True
        elif name == b"retry" and text.isascii() and text.isdigit():
            # A huge digit string would make int() raise (or take long): saturate instead.
            self._retry = int(text) if len(text) <= _MAX_RETRY_DIGITS else 10**_MAX_RETRY_DIGITS
            self._pending = True
        # any other field name is ignored, as the spec requires
        return None

    def _dispatch(self) -> SSEEvent | None:
        if not self._pending:
            self._reset_event()
            return None
        event = SSEEvent(data="\n".join(self._data), id=self._id, event=self._event, retry=self._retry)
        self._reset_event()
        return event


def encode_event(data: str, *, id: str | None = None, event: str | None = None) -> bytes:
    """Serialise one event. ``id`` and ``event`` must not contain line breaks."""
    parts: list[str] = []
    if event is not None:
        parts.append(f"event: {_single_line(event)}\n")
    if id is not None:
        parts.append(f"id: {_single_line(id)}\n")
    for line in data.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        parts.append(f"data: {line}\n")
    parts.append("\n")
    return "".join(parts).encode("utf-8")


def _single_line(value: str) -> str:
    if "\n" in value or "\r" in value or "\0" in value:
        raise ValueError("SSE field values must not contain CR, LF or NUL")
    return value


_T = TypeVar("_T")


@asynccontextmanager
async def closing_iterator(iterator: AsyncIterator[_T]) -> AsyncGenerator[AsyncIterator[_T], None]:
    """Close an async generator we stop reading early (httpx's ``aiter_*`` are generators).

    Left to the garbage collector, an unfinished generator is finalised at some
    arbitrary later point (and trio warns about it); its ``finally`` blocks, which
    release connections, should run now.
    """
    try:
        yield iterator
    finally:
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            with anyio.CancelScope(shield=True):
                await aclose()
