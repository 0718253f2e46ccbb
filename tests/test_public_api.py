"""The names users import: from the package and from its client helper."""

from __future__ import annotations

import mcp_resume_asgi
import mcp_resume_asgi.client as client


def test_the_package_exports_what_the_readme_uses() -> None:
    for name in ("resumable", "ResumeMiddleware", "Policy", "Route", "MemoryStore", "TasksMiddleware"):
        assert name in mcp_resume_asgi.__all__ and getattr(mcp_resume_asgi, name) is not None


def test_resumable_lives_in_api() -> None:
    from mcp_resume_asgi.api import resumable

    assert resumable is mcp_resume_asgi.resumable


def test_the_client_package_exports_everything_in_its_all() -> None:
    for name in client.__all__:
        assert getattr(client, name) is not None, name
