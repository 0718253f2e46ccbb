"""Moved to `mcp_resume_asgi.wire.principal` (issue 21): this path re-exports it until the old
paths are retired."""

from mcp_resume_asgi.wire.principal import *  # noqa: F403
from mcp_resume_asgi.wire.principal import (
    PrincipalOf,
    default_principal,
)

__all__ = [
    "PrincipalOf",
    "default_principal",
]
