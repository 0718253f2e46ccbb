"""Moved to `mcp_resume_asgi.core.held_writes` (issue 21); this name stays until the imports move."""

from mcp_resume_asgi.core.held_writes import MAX_HELD_BYTES, Backoff, Batch, HeldBudget, HeldWrites

__all__ = ["MAX_HELD_BYTES", "Backoff", "Batch", "HeldBudget", "HeldWrites"]
