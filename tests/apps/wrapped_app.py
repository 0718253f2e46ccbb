"""A test app, wrapped: for servers that import their app in a child process (granian).

``create_app(flavour="mcpserver", policy={...}, **options)`` returns
``resumable(<flavour's create_app()>, policy=Policy(**policy), **options)``, so a
child process can be told which wrapped app to serve with JSON-able arguments.
"""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp

from mcp_resume_asgi import Policy, resumable
from tests.apps import APP_FACTORIES
from tests.support.server import load_app


def create_app(flavour: str = "mcpserver", policy: dict[str, Any] | None = None, **options: Any) -> ASGIApp:
    return resumable(load_app(APP_FACTORIES[flavour]), policy=Policy(**(policy or {})), **options)
