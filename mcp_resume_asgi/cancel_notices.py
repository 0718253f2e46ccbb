"""Moved to `mcp_resume_asgi.core.cancel_notices` (issue 21); this name stays until the imports move."""

from mcp_resume_asgi.core.cancel_notices import (
    MAX_REASON_CHARS,
    MAX_SHARING,
    METHOD,
    CancelNotice,
    Where,
    cancellable,
    named,
    notice_of,
    valid_key,
    where,
)
from mcp_resume_asgi.store import keys

#: A binding's store index is a key format, built in `store/keys.py` (these names stay).
INDEX_PREFIX = keys.CANCEL_BINDING_PREFIX
binding = keys.cancel_binding

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
