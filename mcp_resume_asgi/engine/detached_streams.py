"""The streams counted in the telemetry's `streams_detached`: which ones, so each is taken back once.

A stream is counted while its app runs with no client connection attached (`Writer`, which
attaches and lets go its connections, counts it). Its writer is let go while it is detached and
quiet, and its app may end then, so what was counted is kept here, by the counter, not by the
stream: the stream's end (`HostedStream`) takes back what is counted of it. Only streams counted
while telemetry records are listed: with telemetry off the set stays empty.
"""

from __future__ import annotations

from mcp_resume_asgi.telemetry import Telemetry

__all__ = ["DetachedStreams"]


class DetachedStreams:
    """The ids of the streams counted detached now, and the telemetry they are counted in."""

    __slots__ = ("counted", "telemetry")

    def __init__(self, telemetry: Telemetry) -> None:
        self.telemetry = telemetry
        self.counted: set[str] = set()
        """The ids of the streams counted now (read, never written, by others: empty for most
        of a node's life, which spares a stream's end a call, `ended`)."""

    def note(self, stream_id: str, detached: bool) -> None:
        """The stream's app now runs without a connection (`detached`), or not: counted, or taken
        back, if that changes what is counted of it."""
        counted = self.counted
        if detached:
            if stream_id not in counted:
                counted.add(stream_id)
                self.telemetry.streams_detached(1)
        elif stream_id in counted:
            counted.discard(stream_id)
            self.telemetry.streams_detached(-1)

    def ended(self, stream_id: str) -> None:
        """The stream's app ended: taken back if it was counted."""
        counted = self.counted
        if stream_id in counted:
            counted.discard(stream_id)
            self.telemetry.streams_detached(-1)
