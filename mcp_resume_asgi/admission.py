"""Moved to `mcp_resume_asgi.engine.admission` (issue 21): this path re-exports it until the old
paths are retired."""

from mcp_resume_asgi.engine.admission import *  # noqa: F403
from mcp_resume_asgi.engine.admission import (
    MAX_REPLY_BYTES,
    NOT_FOUND,
    PROBE_ID_PREFIX,
    PROBE_TIMEOUT_S,
    SILENT,
    Admission,
    AppReply,
    Refusal,
    post_to_app,
)

__all__ = [
    "MAX_REPLY_BYTES",
    "NOT_FOUND",
    "PROBE_ID_PREFIX",
    "PROBE_TIMEOUT_S",
    "SILENT",
    "Admission",
    "AppReply",
    "Refusal",
    "post_to_app",
]
