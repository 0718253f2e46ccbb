"""`wire.side_slots`: rarely written attributes share one defaults object until written."""

from __future__ import annotations

from mcp_resume_asgi.wire.side_slots import SideAttribute, side_attribute


class _Side:
    __slots__ = ("count", "label")

    def __init__(self) -> None:
        self.count = 0
        self.label: str | None = None


_DEFAULTS = _Side()


class Owner:
    __slots__ = ("_side",)

    def __init__(self) -> None:
        self._side = _DEFAULTS

    count: SideAttribute[int] = side_attribute("_side", _DEFAULTS, _Side, "count")
    label: SideAttribute[str | None] = side_attribute("_side", _DEFAULTS, _Side, "label")


def test_owners_share_the_defaults_until_one_writes_another_value() -> None:
    a, b = Owner(), Owner()
    assert a.count == 0 and a.label is None and a._side is _DEFAULTS
    a.label = None  # the default: nothing of its own yet
    assert a._side is _DEFAULTS
    a.count = 3
    assert a._side is not _DEFAULTS and a.count == 3 and a.label is None
    assert b.count == 0 and b._side is _DEFAULTS, "another owner keeps the defaults"
    assert _DEFAULTS.count == 0, "the defaults are never written"
    a.count = 0  # back to the default: its own side object keeps it
    assert a.count == 0 and a._side is not _DEFAULTS
