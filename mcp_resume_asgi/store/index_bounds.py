"""The bounds every store puts on its index operations' arguments (`Store.index_add` and the rest).

Index names and members are built from request data (a principal's digest, a call id), so
each store refuses the same oversized or malformed arguments with the same `ValueError`
before touching its data: the checks live here, shared by `memory_index.py` and
`redis_index.py`, rather than in `base.py`, which is the `Store` interface.
"""

from __future__ import annotations

import math

#: Longest index name and member the index operations take (UTF-8 bytes): names are built from
#: request data (a principal's digest, a call id), and a store must not hold unbounded keys.
MAX_INDEX_NAME_BYTES = 256
MAX_INDEX_MEMBER_BYTES = 256
#: Most members one `index_page` returns (a larger `limit` is cut to this).
MAX_INDEX_PAGE = 1000


def _check_index_text(what: str, value: str, max_bytes: int) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string")
    try:
        size = len(value.encode())
    except UnicodeEncodeError:
        raise ValueError(f"{what} must be valid Unicode text") from None
    if size > max_bytes:
        raise ValueError(f"{what} is {size} bytes, more than {max_bytes}")


def _check_time(what: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number (unix time)")


def check_index_args(
    index: str,
    member: str | None = None,
    *,
    expires_at: float | None = None,
    cap: int | None = None,
    after: tuple[float, str] | None = None,
) -> None:
    """Refuse what no index operation may get (ValueError), the same for every store."""
    _check_index_text("index name", index, MAX_INDEX_NAME_BYTES)
    if member is not None:
        _check_index_text("index member", member, MAX_INDEX_MEMBER_BYTES)
    if expires_at is not None:
        _check_time("expires_at", expires_at)
    if after is not None:
        if not isinstance(after, tuple) or len(after) != 2:
            raise ValueError("after must be an (expires_at, member) pair")
        _check_time("after's expires_at", after[0])
        _check_index_text("after's member", after[1], MAX_INDEX_MEMBER_BYTES)
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap <= 0):
        raise ValueError("cap must be a positive int")


def page_limit(limit: int) -> int:
    """`index_page`'s `limit`, capped at `MAX_INDEX_PAGE`."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise ValueError("limit must be a positive int")
    return min(limit, MAX_INDEX_PAGE)
