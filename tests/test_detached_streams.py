"""The count of streams detached (`engine/detached_streams.py`): each stream counted once, taken
back once - when a connection comes back, or when its app ends while it is detached."""

from __future__ import annotations

from mcp_resume_asgi.engine.detached_streams import DetachedStreams
from mcp_resume_asgi.telemetry import Telemetry


class Noted(Telemetry):
    """A telemetry that notes each move of `streams_detached`."""

    __slots__ = ("moves",)

    enabled = True

    def __init__(self) -> None:
        self.moves: list[int] = []

    def streams_detached(self, delta: int) -> None:
        self.moves.append(delta)


def test_a_stream_is_counted_once_and_taken_back_once() -> None:
    telemetry = Noted()
    detached = DetachedStreams(telemetry)
    detached.note("a", True)
    detached.note("a", True)  # (let go again before a connection came back: still one)
    detached.note("b", True)
    detached.note("a", False)  # a connection came back
    detached.note("a", False)
    assert telemetry.moves == [1, 1, -1]
    assert detached.counted == {"b"}


def test_a_stream_whose_app_ends_detached_is_taken_back_by_its_end_only() -> None:
    telemetry = Noted()
    detached = DetachedStreams(telemetry)
    detached.ended("never counted")
    assert telemetry.moves == []
    detached.note("a", True)
    detached.ended("a")
    detached.ended("a")
    detached.note("a", False)  # (its writer lets go of a connection afterwards: nothing counted)
    assert telemetry.moves == [1, -1]
    assert not detached.counted
