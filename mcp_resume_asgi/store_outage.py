"""Moved to `http/outage.py` (the store's health itself: `store/health.py`) (issue 21);
re-exported here until the old paths go."""

from __future__ import annotations

from mcp_resume_asgi.http.outage import (
    STORE_RETRY_S,
    StoreOutage,
    TrackedSend,
    send_unavailable,
    without_store,
)

__all__ = ["STORE_RETRY_S", "StoreOutage", "TrackedSend", "send_unavailable", "without_store"]
