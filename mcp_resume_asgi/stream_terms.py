"""Moved to `mcp_resume_asgi.core.stream` (issue 21); this name stays until the imports move."""

from mcp_resume_asgi.core.stream import (
    AT_WILL,
    Attachment,
    Due,
    Reason,
    Recorded,
    close_cancels,
    primed,
)

__all__ = ["AT_WILL", "Attachment", "Due", "Reason", "Recorded", "close_cancels", "primed"]
