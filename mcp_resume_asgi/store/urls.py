"""Stores named by URL, so a deployment picks its store in configuration, not in code.

`store_from_url` turns a URL into a store: `memory://` (`MemoryStore`), `sqlite:///abs/path.db`
or `sqlite://relative/path.db` (`SQLiteStore`), `redis://host:6379/0` or `rediss://...`
(`RedisStore`, which finds out on first use whether the server is a node of a Redis Cluster).
`store_from_setting` is what `ResumeMiddleware` does with its `store=` argument: a store as it
is, a URL through `store_from_url`, and nothing at all through the `MCP_RESUME_STORE`
environment variable, or a `MemoryStore` when that is not set. A URL that names no store this
module knows is a `ValueError` at startup that lists the accepted forms.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from mcp_resume_asgi.store.base import Store
from mcp_resume_asgi.store.memory import MemoryStore

__all__ = ["ENVIRONMENT_VARIABLE", "sqlite_path", "store_from_setting", "store_from_url"]

#: Where `store_from_setting` looks for a store URL when none is passed.
ENVIRONMENT_VARIABLE = "MCP_RESUME_STORE"

ACCEPTED = (
    "memory://, sqlite:///absolute/path.db, sqlite://relative/path.db, "
    "redis://host:6379/0, rediss://host:6379/0"
)


def _refuse(url: str, why: str) -> ValueError:
    shown = url if len(url) <= 200 else url[:200] + "..."
    return ValueError(f"store URL {shown!r}: {why}; accepted: {ACCEPTED}")


def sqlite_path(url: str) -> str:
    """The file a `sqlite://` URL names: `sqlite:///var/lib/app.db` is `/var/lib/app.db`,
    `sqlite://data/app.db` is `data/app.db` (relative to the working directory)."""
    rest = url[len("sqlite://") :]
    if "?" in rest or "#" in rest:
        raise _refuse(url, "a sqlite URL takes no query or fragment (pass options as keywords)")
    if not rest or rest == "/":
        raise _refuse(url, "a sqlite URL names a file")
    if rest in (":memory:", "/:memory:"):
        raise _refuse(url, "an in-memory SQLite database survives nothing: use memory://")
    if "\x00" in rest:
        raise _refuse(url, "the path holds a NUL character")
    return rest


def store_from_url(url: str, **options: Any) -> Store:
    """The store `url` names, built with `options` (the store class's own keyword options).

    `memory://` is a `MemoryStore`; `sqlite:///abs/path.db` (three slashes: an absolute
    path) or `sqlite://rel/path.db` a `SQLiteStore` on that file; `redis://` and `rediss://`
    a `RedisStore` on that URL (a Redis Cluster node is found out as `RedisStore` does).
    Anything else is a ValueError naming what is accepted.
    """
    if not isinstance(url, str):
        raise TypeError(f"a store URL is a str, not {type(url).__name__}")
    text = url.strip()
    scheme, sep, _ = text.partition("://")
    scheme = scheme.lower()
    if not sep or not scheme:
        raise _refuse(url, "not a URL")
    if scheme == "memory":
        if text[len("memory://") :] not in ("", "/"):
            raise _refuse(url, "memory:// takes no host or path")
        return MemoryStore(**options)
    if scheme == "sqlite":
        from mcp_resume_asgi.store.sqlite import SQLiteStore

        return SQLiteStore(sqlite_path(text), **options)
    if scheme in ("redis", "rediss"):
        parts = urlsplit(text)
        if not parts.hostname:
            raise _refuse(url, "a redis URL names a host")
        from mcp_resume_asgi.store import RedisStore  # (an ImportError that says to install the extra)

        return RedisStore(text, **options)
    raise _refuse(url, f"unknown scheme {scheme!r}")


def store_from_setting(
    store: Store | str | None, *, environ: Mapping[str, str] | None = None, **options: Any
) -> Store:
    """The store a `store=` argument means: a `Store` as it is, a URL (`store_from_url`), or,
    for None, the URL in `MCP_RESUME_STORE` when it is set and not blank, else a `MemoryStore`."""
    if isinstance(store, Store):
        return store
    if store is None:
        found = (os.environ if environ is None else environ).get(ENVIRONMENT_VARIABLE, "").strip()
        if not found:
            return MemoryStore(**options)
        try:
            return store_from_url(found, **options)
        except ValueError as exc:
            raise ValueError(f"{ENVIRONMENT_VARIABLE}: {exc}") from None
    if isinstance(store, str):
        return store_from_url(store, **options)
    raise TypeError(f"store must be a Store or a store URL, not {type(store).__name__}")
