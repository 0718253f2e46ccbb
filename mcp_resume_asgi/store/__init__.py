"""Stores: where recorded events and stream state live."""

from mcp_resume_asgi.store.base import GapError, SessionInfo, Store, StreamKind, StreamMeta, StreamState
from mcp_resume_asgi.store.memory import MemoryStore, StoreFullError

__all__ = [
    "GapError",
    "MemoryStore",
    "SessionInfo",
    "Store",
    "StoreFullError",
    "StreamKind",
    "StreamMeta",
    "StreamState",
]
