"""Attributes that most objects never write, kept in one side object shared by them all.

An object that lives long and by the thousands (an idle detached stream: its core, its host)
pays for every slot it has. Attributes that few of them ever write are kept instead in a side
object (`holder`), which every object shares - one instance of defaults - until it writes a value
other than the default: only then does it get a side object of its own.

In `wire`, the bottom layer, because both `core` (the stream's state) and `store` (its record)
use it, and neither may import the other.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

__all__ = ["SideAttribute", "side_attribute"]

_T = TypeVar("_T")


class SideAttribute(Protocol[_T]):
    """(typing) What `side_attribute` makes: an attribute of type `_T`."""

    def __get__(self, owner: Any, owner_type: Any = None) -> _T: ...
    def __set__(self, owner: Any, value: _T) -> None: ...


def side_attribute(holder: str, defaults: object, make: Callable[[], object], name: str) -> Any:
    """The attribute `name`, kept in the side object at `holder` (`defaults`, shared, until a
    write changes a default: then `make()`'s own). Read as is."""
    default = getattr(defaults, name)

    def write(owner: object, value: object) -> None:
        side = getattr(owner, holder)
        if side is defaults:
            if value is default:
                return
            side = make()
            setattr(owner, holder, side)
        setattr(side, name, value)

    return property(operator.attrgetter(f"{holder}.{name}"), write)
