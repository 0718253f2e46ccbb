"""A store's bounds as its constructor takes them: each a positive int, checked at construction.

A bound given as text (from a config file) or as a float would compare and count wrongly much
later (`'100' <= 0` raises mid-request, `True` is a bound of one): every store refuses it at
once, with the same words.
"""

from __future__ import annotations

__all__ = ["check_bounds"]


def check_bounds(store: str, **bounds: object) -> None:
    """Each of `bounds` is a positive int (TypeError when not an int, ValueError when not positive)."""
    for name, value in bounds.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{store}: {name} must be an int, not {value!r}")
        if value <= 0:
            raise ValueError(f"{store} bounds must be positive: {name}={value!r}")
