"""Moved to `mcp_resume_asgi.wire.tokens` (issue 21): this path re-exports it until the old
paths are retired."""

from mcp_resume_asgi.wire.tokens import *  # noqa: F403
from mcp_resume_asgi.wire.tokens import (
    MAX_EVENT_ID_LENGTH,
    MAX_LINK_TOKEN_LENGTH,
    TokenSigner,
    new_stream_id,
)

# A private name tests reach (tests/test_tasks_ids.py clears its key cache).
from mcp_resume_asgi.wire.tokens import _CachedKeySigner as _CachedKeySigner

__all__ = [
    "MAX_EVENT_ID_LENGTH",
    "MAX_LINK_TOKEN_LENGTH",
    "TokenSigner",
    "new_stream_id",
]
