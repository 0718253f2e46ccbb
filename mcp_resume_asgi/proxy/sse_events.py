"""Cutting the upstream's SSE bytes into whole events, bounded.

The upstream's bytes come in whatever pieces the network makes; the proxy passes them on
one whole event at a time (an event ends at a blank line: `\n\n`, `\r\r` or `\r\n\r\n`),
so the middleware above records each event as the upstream sent it. An event longer than
`max_event_bytes` is the upstream's error: `EventTooLarge`. Sans-IO: bytes in, events out.
"""

from __future__ import annotations

import re

__all__ = ["EventSplitter", "EventTooLarge"]

_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r|\r\n\n|\n\r\n")


class EventTooLarge(ValueError):
    """An SSE event from the upstream past the proxy's bound."""


class EventSplitter:
    """Feeds of bytes in, whole events (their terminating blank line included) out."""

    def __init__(self, max_event_bytes: int) -> None:
        self.max_event_bytes = max_event_bytes
        self._pending = b""

    def feed(self, data: bytes) -> list[bytes]:
        """The events `data` completes, in order (the rest is kept for the next feed)."""
        buffer = self._pending + data
        events: list[bytes] = []
        start = 0
        # What was pending held no event end; one may straddle the feeds ("\r\n" then
        # "\r\n"), so the search starts three bytes before the new data, not at the start.
        search_from = max(0, len(self._pending) - 3)
        while (found := _EVENT_END.search(buffer, search_from)) is not None:
            events.append(buffer[start : found.end()])
            start = search_from = found.end()
        self._pending = buffer[start:]
        if len(self._pending) > self.max_event_bytes:
            raise EventTooLarge(f"an SSE event from the upstream is over {self.max_event_bytes} bytes")
        return events

    def rest(self) -> bytes:
        """What is left once the upstream ended: an unterminated last event (or nothing)."""
        rest, self._pending = self._pending, b""
        return rest
