"""Moved to `mcp_resume_asgi.core.cancel_notices` (issue 21); this name stays until the imports move."""

from mcp_resume_asgi.core.cancel_notices import (
    INDEX_PREFIX,
    MAX_REASON_CHARS,
    MAX_SHARING,
    METHOD,
    CancelNotice,
    Where,
    binding,
    cancellable,
    named,
    notice_of,
    valid_key,
    where,
)

__all__ = [
    "INDEX_PREFIX",
    "MAX_REASON_CHARS",
    "MAX_SHARING",
    "METHOD",
    "CancelNotice",
    "Where",
    "binding",
    "cancellable",
    "named",
    "notice_of",
    "valid_key",
    "where",
]
