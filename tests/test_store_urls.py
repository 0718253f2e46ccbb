"""Stores named by URL (`store.urls`): `store_from_url`, `resumable(store="...")` and the
`MCP_RESUME_STORE` environment variable; a URL that names no store fails at startup, saying
what is accepted."""

from __future__ import annotations

import pytest

from mcp_resume_asgi import ResumeMiddleware, resumable
from mcp_resume_asgi.store import MemoryStore, store_from_url
from mcp_resume_asgi.store.urls import ENVIRONMENT_VARIABLE, sqlite_path, store_from_setting
from tests.apps.mcpserver_app import create_server


def inner_store(app: object) -> object:
    """The store a `ResumeMiddleware` (or `resumable`'s outermost layer over it) runs on."""
    while not isinstance(app, ResumeMiddleware):
        app = getattr(app, "app")  # noqa: B009
    return app.store.inner if hasattr(app.store, "inner") else app.store


def test_memory_url_is_a_memory_store_with_the_options_given() -> None:
    store = store_from_url("memory://", max_streams=7)
    assert isinstance(store, MemoryStore) and store.max_streams == 7
    assert isinstance(store_from_url("MEMORY://"), MemoryStore)


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///var/lib/app/mcp.db", "/var/lib/app/mcp.db"),
        ("sqlite://mcp.db", "mcp.db"),
        ("sqlite://data/mcp.db", "data/mcp.db"),
    ],
)
def test_sqlite_urls_name_an_absolute_or_a_relative_file(url: str, path: str) -> None:
    assert sqlite_path(url) == path


def test_redis_urls_are_redis_stores_with_the_options_given() -> None:
    pytest.importorskip("redis")
    from mcp_resume_asgi.store.redis import RedisStore

    for url in ("redis://localhost:6379/0", "rediss://user:pw@example.invalid:6380/2"):
        store = store_from_url(url, prefix="p:")  # (nothing is connected before first use)
        assert isinstance(store, RedisStore) and store.prefix == "p:"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("", "not a URL"),
        ("/var/lib/mcp.db", "not a URL"),
        ("postgres://db/x", "unknown scheme 'postgres'"),
        ("memory://somewhere", "memory:// takes no host or path"),
        ("sqlite://", "names a file"),
        ("sqlite:///", "names a file"),
        ("sqlite://:memory:", "use memory://"),
        ("sqlite:///x.db?mode=ro", "no query"),
        ("redis://", "names a host"),
    ],
)
def test_a_bad_url_is_a_value_error_naming_what_is_accepted(url: str, why: str) -> None:
    with pytest.raises(ValueError) as caught:
        store_from_url(url)
    message = str(caught.value)
    assert why in message
    for accepted in ("memory://", "sqlite:///", "redis://", "rediss://"):
        assert accepted in message


def test_a_store_url_that_is_not_a_string_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        store_from_url(b"memory://")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        store_from_setting(42)  # type: ignore[arg-type]


def test_resumable_takes_a_store_url() -> None:
    app = resumable(create_server().streamable_http_app(), store="memory://")
    assert isinstance(inner_store(app), MemoryStore)
    with pytest.raises(ValueError, match="unknown scheme"):
        resumable(create_server().streamable_http_app(), store="mongodb://x")


def test_a_store_passed_is_used_whatever_the_environment_says(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, "bogus://")
    mine = MemoryStore()
    assert inner_store(resumable(create_server().streamable_http_app(), store=mine)) is mine


def test_without_a_store_the_environment_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("redis")
    from mcp_resume_asgi.store.redis import RedisStore

    monkeypatch.setenv(ENVIRONMENT_VARIABLE, "redis://localhost:6379/3")
    app = resumable(create_server().streamable_http_app(), secret="s" * 32)
    assert isinstance(inner_store(app), RedisStore)


def test_without_a_store_or_the_environment_the_store_is_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENVIRONMENT_VARIABLE, raising=False)
    assert isinstance(inner_store(resumable(create_server().streamable_http_app())), MemoryStore)
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, "  ")
    assert isinstance(inner_store(resumable(create_server().streamable_http_app())), MemoryStore)


def test_a_bad_url_in_the_environment_fails_at_startup_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, "sqlite:/relative.db")
    with pytest.raises(ValueError) as caught:
        resumable(create_server().streamable_http_app())
    assert ENVIRONMENT_VARIABLE in str(caught.value) and "accepted" in str(caught.value)
