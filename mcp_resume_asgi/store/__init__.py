"""Stores: where recorded events and stream state live.

`RedisStore` is imported on first use (`from mcp_resume_asgi.store import RedisStore`),
so the core never imports `redis`; it needs `pip install mcp-resume-asgi[redis]`.
`SQLiteStore` (one process, on one file, standard library `sqlite3`) is imported on first use
too. `store_from_url("sqlite:///path.db")` names any of them by URL (`urls.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcp_resume_asgi.store.base import (
    FencedError,
    GapError,
    KeyAndStream,
    Listing,
    SessionInfo,
    Store,
    StoreFullError,
    StoreUsage,
    StreamKind,
    StreamMeta,
    StreamState,
)
from mcp_resume_asgi.store.memory import MemoryStore
from mcp_resume_asgi.store.urls import store_from_url

if TYPE_CHECKING:
    from mcp_resume_asgi.store.redis import RedisStore
    from mcp_resume_asgi.store.sqlite import SQLiteStore
    from mcp_resume_asgi.store.sqlite_file import SQLiteStoreError, SQLiteStoreLockedError

__all__ = [
    "FencedError",
    "GapError",
    "KeyAndStream",
    "Listing",
    "MemoryStore",
    "RedisStore",
    "SQLiteStore",
    "SQLiteStoreError",
    "SQLiteStoreLockedError",
    "SessionInfo",
    "Store",
    "StoreFullError",
    "StoreUsage",
    "StreamKind",
    "StreamMeta",
    "StreamState",
    "store_from_url",
]


def __getattr__(name: str) -> Any:
    if name == "SQLiteStore":
        from mcp_resume_asgi.store.sqlite import SQLiteStore

        return SQLiteStore
    if name in ("SQLiteStoreError", "SQLiteStoreLockedError"):
        from mcp_resume_asgi.store import sqlite_file

        return getattr(sqlite_file, name)
    if name == "RedisStore":
        try:
            from mcp_resume_asgi.store.redis import RedisStore
        except ModuleNotFoundError as exc:
            if exc.name != "redis":
                raise
            raise ImportError(
                "RedisStore needs the redis client: pip install 'mcp-resume-asgi[redis]'"
            ) from exc
        return RedisStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
