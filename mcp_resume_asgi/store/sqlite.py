"""`SQLiteStore`: the `Store` contract on one SQLite file, for one process (being built)."""

from __future__ import annotations

from typing import Any

from mcp_resume_asgi.store.memory import MemoryStore

__all__ = ["SQLiteStore"]


class SQLiteStore(MemoryStore):
    """Not usable yet: refuses to be built, so a `sqlite://` URL fails at startup."""

    def __init__(self, path: str, **options: Any) -> None:
        raise NotImplementedError("SQLiteStore is not available in this build")
