"""Server-Sent Events, parsed once on the way in and written cheaply on the way out.

The engine sits between an app that writes SSE and clients that read it. It must
see each event (to give it an id of its own, to notice the final response and
server-to-client requests) but it should not pay for that twice, so the parser
keeps `data` as bytes and `encode_payload` produces the frame minus its `id:`
line, which is what the store keeps; `frame_events` puts the ids back on the way out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "KEEPALIVE",
    "SSEError",
    "SSEEvent",
    "SSEParser",
    "encode_payload",
    "frame_events",
    "priming_frame",
    "retry_frame",
    "single_event_frame",
]


class SSEError(Exception):
    """The app wrote an event larger than the engine is willing to hold."""


@dataclass(slots=True)
class SSEEvent:
    data: bytes | None
    """The `data:` lines joined with newlines; None when the block had no data field."""
    event: bytes | None = None
    id: bytes | None = None
    retry: int | None = None


class SSEParser:
    """Incremental parser for the `text/event-stream` format (WHATWG HTML, 9.2).

    Accepts CRLF, LF and CR line endings, also when a CRLF is split between chunks.
    Comment-only blocks (keep-alive pings) yield nothing.
    """

    __slots__ = ("_buf", "_max")

    def __init__(self, max_event_bytes: int = 16 * 1024 * 1024) -> None:
        self._buf = b""
        self._max = max_event_bytes

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        buf = self._buf + chunk if self._buf else chunk
        if b"\r" in buf:
            held_cr = buf.endswith(b"\r")
            if held_cr:
                buf = buf[:-1]
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if held_cr:  # may be the first half of a CRLF that the next chunk completes
                blocks = buf.split(b"\n\n")
                self._buf = blocks.pop() + b"\r"
                return self._check(_parse_blocks(blocks))
        blocks = buf.split(b"\n\n")
        self._buf = blocks.pop()
        return self._check(_parse_blocks(blocks))

    def _check(self, events: list[SSEEvent]) -> list[SSEEvent]:
        if len(self._buf) > self._max:
            raise SSEError(f"an SSE event exceeded {self._max} bytes")
        return events

    @property
    def pending(self) -> bytes:
        return self._buf


def _parse_blocks(blocks: list[bytes]) -> list[SSEEvent]:
    out: list[SSEEvent] = []
    for block in blocks:
        if not block:
            continue
        data: list[bytes] | None = None
        event = ev_id = None
        retry = None
        for line in block.split(b"\n"):
            if not line or line[0] == 0x3A:  # ':' comment
                continue
            name, colon, value = line.partition(b":")
            if colon and value[:1] == b" ":
                value = value[1:]
            if name == b"data":
                if data is None:
                    data = [value]
                else:
                    data.append(value)
            elif name == b"event":
                event = value
            elif name == b"id":
                if b"\0" not in value:
                    ev_id = value
            elif name == b"retry" and value.isdigit():
                retry = int(value)
        if data is None and event is None and ev_id is None and retry is None:
            continue
        out.append(
            SSEEvent(data=None if data is None else b"\n".join(data), event=event, id=ev_id, retry=retry)
        )
    return out


def single_event_frame(chunk: bytes) -> tuple[bytes, bytes] | None:
    """`(chunk, data)` when `chunk` is exactly one `event:` + one `data:` line event, else None.

    That is what SSE libraries write per message (sse-starlette: `event: message\\r\\n
    data: {...}\\r\\n\\r\\n`), and such a chunk is already a valid frame without an id:
    it can be stored as it is. Anything else (ids, retry, comments, several data lines,
    events split across chunks) goes through the full parser.
    """
    # Exactly three line ends: after the event line, after the data line, the blank line (this
    # runs for every event the app sends: as few calls as will tell).
    if not chunk.startswith(b"event: "):
        return None
    if chunk.endswith(b"\r\n\r\n"):
        # Three CRs and three LFs, two pairs of them the end: the third pair ends the event line.
        if chunk.count(b"\r") != 3 or chunk.count(b"\n") != 3:
            return None
        start = chunk.find(b"\r\ndata: ")
        return None if start < 0 else (chunk, chunk[start + 8 : -4])
    if chunk.endswith(b"\n\n"):
        if chunk.count(b"\n") != 3 or b"\r" in chunk:
            return None
        start = chunk.find(b"\ndata: ")
        return None if start < 0 else (chunk, chunk[start + 7 : -2])
    return None


def encode_payload(data: bytes, event: bytes | None = b"message") -> bytes:
    """The SSE frame for one event, without the `id:` line the engine prepends."""
    head = b"event: " + event + b"\n" if event else b""
    if b"\n" not in data and b"\r" not in data:
        return head + b"data: " + data + b"\n\n"
    lines = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    return head + b"".join(b"data: " + line + b"\n" for line in lines) + b"\n"


def frame_events(
    prefix: bytes | None, events: list[tuple[int, bytes]], transform: Callable[[int, bytes], bytes] | None
) -> bytes:
    """The SSE bytes of `(seq, frame without id)` events: each gets its id line, `<prefix><seq>`
    (none when `prefix` is None: a stream nobody may resume)."""
    if prefix is None:
        return b"".join(transform(seq, payload) if transform else payload for seq, payload in events)
    if len(events) == 1 and transform is None:  # (the usual: one event the app just sent)
        seq, payload = events[0]
        return b"id: %b%d\n%b" % (prefix, seq, payload)
    id_head = b"id: " + prefix
    if transform is not None:
        parts = [id_head + str(seq).encode() + b"\n" + transform(seq, payload) for seq, payload in events]
    else:
        parts = [id_head + str(seq).encode() + b"\n" + payload for seq, payload in events]
    return parts[0] if len(parts) == 1 else b"".join(parts)


def retry_frame(retry_ms: int) -> bytes:
    return b"retry: " + str(retry_ms).encode() + b"\n\n"


def priming_frame(event_id: bytes, retry_ms: int | None) -> bytes:
    """SEP-1699's priming event: an id the client can resume from, and no data to dispatch."""
    retry = b"" if retry_ms is None else b"retry: " + str(retry_ms).encode() + b"\n"
    return b"id: " + event_id + b"\n" + retry + b"data: \n\n"


KEEPALIVE = b": keepalive\n\n"
