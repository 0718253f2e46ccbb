"""`GET {base}/openapi.json`: the face's OpenAPI document (`openapi.py`), built once per
tools list and kept, within bounds.

An app with 2,000 tools answers a 10 MB `tools/list`, and a document built from it costs
seconds and a few hundred MB while it is made; gateways ask for it often, mostly to hear
`304`. So:

* a document is kept under the digest of what it is made from - each `tools/list` page as
  the app wrote it (`Answer.digest`: its bytes, without reading them again), the base
  path and the server's name and version - so a repeat or a `304` costs the list and a
  digest: no build, no serialization, no hashing of the document;
* requests of one caller (the same principal and credentials: the app shows them the
  same tools) that arrive while its document is being fetched share that fetch: ten at
  once hold one list, not ten;
* one build per digest at a time (the requests that need the same document wait for it),
  at most `MAX_BUILDS` at once, in worker threads (checking schemas is CPU work);
* the kept documents are bounded in bytes (`MAX_KEPT_BYTES`, least recently used out).

The document's `info` is the app's own (`serverInfo`: its title or name, its version and
description), as the face learnt it when it first spoke to the app.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from cachetools import LRUCache
from starlette.types import Scope

from mcp_resume_asgi.rest.mcp_client import Wire
from mcp_resume_asgi.rest.openapi import build_openapi
from mcp_resume_asgi.rest.problems import Problem
from mcp_resume_asgi.rest.replies import Representation, json_representation
from mcp_resume_asgi.rest.single_flight import SingleFlight

#: Bytes of documents kept (a document of 512 tools with large schemas is a few MB).
MAX_KEPT_BYTES = 32 * 1024 * 1024
#: Documents built at once (each holds its tools list and the document while it is made).
MAX_BUILDS = 2
DEFAULT_TITLE = "MCP REST face"
DEFAULT_VERSION = "1"

#: `list_all(scope, method, key, subject, digests)` of the read routes.
ListAll = Callable[..., Awaitable["list[Any] | Problem"]]


class OpenApiDocuments:
    """The documents of one face (see the module docstring)."""

    def __init__(
        self,
        wire: Wire,
        list_all: ListAll,
        *,
        base_path: str,
        max_kept_bytes: int = MAX_KEPT_BYTES,
        max_builds: int = MAX_BUILDS,
    ) -> None:
        self.wire = wire
        self.list_all = list_all
        self.base_path = base_path
        self.kept: LRUCache[str, Representation] = LRUCache(
            maxsize=max_kept_bytes, getsizeof=lambda document: len(document.body)
        )
        self.builds = 0
        """Documents built so far (a repeat, a `304` or a waiter builds none)."""
        self._by_caller: SingleFlight[Representation | Problem] = SingleFlight()
        self._by_digest: SingleFlight[Representation] = SingleFlight()
        self._builders = anyio.CapacityLimiter(max_builds)

    async def document(self, scope: Scope) -> Representation | Problem:
        """The document for the caller of `scope`, or the problem that kept it from being made."""
        base = (scope.get("root_path", "") or "") + self.base_path
        caller = (self.wire.caller_key(scope), base)
        return await self._by_caller.run(caller, lambda: self._fetched(scope, base))

    async def _fetched(self, scope: Scope, base: str) -> Representation | Problem:
        digests: list[str] = []
        tools = await self.list_all(scope, "tools/list", "tools", "the tools list", digests)
        if isinstance(tools, Problem):
            return tools
        info = _info(self.wire.server_info)
        key = hashlib.sha256(json.dumps([base, info, digests]).encode()).hexdigest()
        kept = self.kept.get(key)
        if kept is not None:
            return kept
        return await self._by_digest.run(key, lambda: self._built(key, tools, base, info))

    async def _built(self, key: str, tools: list[Any], base: str, info: dict[str, str]) -> Representation:
        kept = self.kept.get(key)  # (made by a run that ended while this one waited)
        if kept is not None:
            return kept
        async with self._builders:
            document = await anyio.to_thread.run_sync(
                lambda: json_representation(build_openapi(tools, base_path=base, **info))
            )
        self.builds += 1
        if len(document.body) <= self.kept.maxsize:
            self.kept[key] = document
        return document


def _info(server_info: dict[str, Any] | None) -> dict[str, str]:
    """`build_openapi`'s title, version and description from the app's `serverInfo`."""
    info = server_info or {}
    title = next(
        (info[k] for k in ("title", "name") if isinstance(info.get(k), str) and info[k].strip()), None
    )
    version = info.get("version")
    out = {
        "title": title or DEFAULT_TITLE,
        "version": version if isinstance(version, str) and version.strip() else DEFAULT_VERSION,
    }
    if isinstance(info.get("description"), str) and info["description"].strip():
        out["description"] = info["description"]
    return out
