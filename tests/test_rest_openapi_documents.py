"""REST face: serving `GET /mcp/openapi.json` (rest/openapi_documents.py; issue 20 item 11,
issue 25).

A low-level MCP `Server` whose `tools/list` handler counts its calls and can be held, under
uvicorn, wrapped with `rest=True`. The document is the server's own (its name and version in
`info`); requests of one caller that arrive while its list is being fetched share the fetch
(ten at once make one `tools/list`, forced: the app holds the first until all ten are in the
face); a repeat and a `304` build nothing; concurrent callers with the same tools get one
build; the documents kept are bounded in bytes.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import mcp.types as types
import pytest
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from openapi_spec_validator import validate
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_resume_asgi import MemoryStore, resumable
from mcp_resume_asgi.rest import openapi
from mcp_resume_asgi.rest.mcp_client import Wire
from mcp_resume_asgi.rest.problems import Problem
from tests.apps.rest_app import create_app as create_rest_app
from tests.apps.rest_app import legacy
from tests.support.server import serve_in_loop
from tests.test_rest_hostile import OuterAuth

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

CONCURRENT = 10


class ListedTools:
    """A `tools/list` handler that counts its calls, and holds each until `release` is set."""

    def __init__(self, count: int = 20) -> None:
        self.tools = [
            types.Tool(
                name=f"tool_{i}",
                description=f"Tool number {i}.",
                input_schema={"type": "object", "properties": {f"p{i}": {"type": "integer"}}},
            )
            for i in range(count)
        ]
        self.calls = 0
        self.release = anyio.Event()
        self.release.set()

    async def __call__(self, ctx: Any, params: Any) -> types.ListToolsResult:
        self.calls += 1
        await self.release.wait()
        return types.ListToolsResult(tools=self.tools)


def lowlevel_app(listed: ListedTools) -> Starlette:
    server: Server[Any] = Server("documents-test-app", version="4.5.6", on_list_tools=listed)
    manager = StreamableHTTPSessionManager(app=server)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    return Starlette(routes=[Route("/mcp", StreamableHTTPASGIApp(manager))], lifespan=lifespan)


class Arrivals:
    """Counts the requests for the document as they enter the face (outside it)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.count = 0
        self.all_in = anyio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].endswith("/openapi.json"):
            self.count += 1
            if self.count >= CONCURRENT:
                self.all_in.set()
        await self.app(scope, receive, send)


@contextlib.asynccontextmanager
async def served(app: ASGIApp) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        serve_in_loop(app) as info,
        httpx.AsyncClient(
            base_url=info.base_url, timeout=60, limits=httpx.Limits(max_connections=50)
        ) as client,
    ):
        yield client


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many documents were built (each build adds the tools' routes once)."""
    counted: list[int] = []
    original = openapi._add_tool_routes

    def counting(*args: Any, **kwargs: Any) -> int:
        counted.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(openapi, "_add_tool_routes", counting)
    return counted


@pytest.mark.parametrize("era", ["2026-07-28", "2025-11-25"])
async def test_the_document_is_titled_and_versioned_as_the_server(era: str) -> None:
    inner = create_rest_app()
    app = resumable(inner if era == "2026-07-28" else legacy(inner), store=MemoryStore(), rest=True)
    async with served(app) as client:
        response = await client.get("/mcp/openapi.json")
    assert response.status_code == 200, response.text
    document = response.json()
    assert document["info"]["title"] == "rest-test-app"
    assert document["info"]["version"] == "0.0.1"
    validate(document)


async def test_concurrent_requests_of_one_caller_share_one_tools_list(builds: list[int]) -> None:
    listed = ListedTools()
    arrivals = Arrivals(resumable(lowlevel_app(listed), store=MemoryStore(), rest=True))
    async with served(arrivals) as client:
        assert (await client.get("/mcp/prompts")).status_code < 500  # the face has met the app
        listed.calls, listed.release = 0, anyio.Event()
        answers: list[httpx.Response] = []

        async def get() -> None:
            answers.append(await client.get("/mcp/openapi.json"))

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for _ in range(CONCURRENT):
                    tg.start_soon(get)
                await arrivals.all_in.wait()  # all ten are in the face: the app may answer
                listed.release.set()
    assert [a.status_code for a in answers] == [200] * CONCURRENT
    assert len({a.content for a in answers}) == 1 and len({a.headers["etag"] for a in answers}) == 1
    assert listed.calls == 1, f"{listed.calls} tools/list for {CONCURRENT} requests of one caller"
    assert len(builds) == 1


async def test_a_repeat_and_a_304_build_nothing_and_a_changed_list_builds_again(builds: list[int]) -> None:
    listed = ListedTools()
    async with served(resumable(lowlevel_app(listed), store=MemoryStore(), rest=True)) as client:
        first = await client.get("/mcp/openapi.json")
        again = await client.get("/mcp/openapi.json")
        cached = await client.get("/mcp/openapi.json", headers={"if-none-match": first.headers["etag"]})
        assert (first.status_code, again.status_code, cached.status_code) == (200, 200, 304)
        assert again.content == first.content and len(builds) == 1
        listed.tools = listed.tools[:5]  # the app's tools change: another document
        changed = await client.get("/mcp/openapi.json", headers={"if-none-match": first.headers["etag"]})
        assert changed.status_code == 200 and changed.headers["etag"] != first.headers["etag"]
        assert len(changed.json()["components"]["schemas"]) < len(first.json()["components"]["schemas"])
        assert len(builds) == 2 and listed.calls == 4


async def test_concurrent_callers_with_the_same_tools_get_one_build(builds: list[int]) -> None:
    listed = ListedTools()
    arrivals = Arrivals(resumable(lowlevel_app(listed), store=MemoryStore(), rest=True))
    async with served(OuterAuth(arrivals)) as client:
        assert (await client.get("/mcp/prompts")).status_code < 500
        listed.calls, listed.release = 0, anyio.Event()
        answers: list[httpx.Response] = []

        async def get(user: str) -> None:
            answers.append(await client.get("/mcp/openapi.json", headers={"x-user": user}))

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for i in range(CONCURRENT):
                    tg.start_soon(get, f"user-{i}")
                await arrivals.all_in.wait()
                listed.release.set()
    assert [a.status_code for a in answers] == [200] * CONCURRENT
    assert listed.calls == CONCURRENT, "each caller's own list (the app may show each other tools)"
    assert len(builds) == 1 and len({a.content for a in answers}) == 1


def documents_for(lists: dict[str, list[dict[str, Any]]], **options: Any) -> Any:
    """`OpenApiDocuments` over a wire that is never called: `list_all` answers each caller's list."""
    from mcp_resume_asgi.rest.openapi_documents import OpenApiDocuments

    async def list_all(scope: Scope, method: str, key: str, subject: str, digests: list[str]) -> Any:
        tools = lists[scope["user"]]
        digests.append(str(hash(repr(tools))))
        return tools

    wire = Wire(lambda *_: None, path="/mcp", principal=lambda scope: str(scope["user"]))  # type: ignore[arg-type,return-value]
    return OpenApiDocuments(wire, list_all, base_path="/mcp", **options)


def scope_of(user: str) -> Scope:
    return {"type": "http", "headers": [], "root_path": "", "user": user}


def tools(count: int, size: int) -> list[dict[str, Any]]:
    return [
        {"name": f"t{i}", "description": "d" * size, "inputSchema": {"type": "object"}} for i in range(count)
    ]


async def test_the_documents_kept_are_bounded_in_bytes() -> None:
    lists = {
        "small-1": tools(1, 10),
        "small-2": tools(2, 10),
        "small-3": tools(3, 10),
        "large": tools(40, 1900),
    }
    one = await documents_for(lists).document(scope_of("small-3"))
    assert not isinstance(one, Problem)
    bound = len(one.body) * 5 // 2  # room for two small documents, not three
    documents = documents_for(lists, max_kept_bytes=bound)
    sizes: dict[str, int] = {}
    for user in lists:
        document = await documents.document(scope_of(user))
        assert not isinstance(document, Problem)
        sizes[user] = len(document.body)
        assert documents.kept.currsize <= bound
    assert sizes["large"] > bound and documents.builds == 4
    await documents.document(scope_of("large"))
    assert documents.builds == 5, "a document larger than the bound is served, never kept"
    await documents.document(scope_of("small-3"))
    assert documents.builds == 5, "the last small one is kept"
    await documents.document(scope_of("small-1"))
    assert documents.builds == 6, "the least recently used one made room"
    assert documents.kept.currsize <= bound


async def test_a_failed_fetch_is_not_shared_and_not_kept() -> None:
    from mcp_resume_asgi.rest.openapi_documents import OpenApiDocuments

    calls: list[str] = []

    async def list_all(scope: Scope, method: str, key: str, subject: str, digests: list[str]) -> Any:
        calls.append(scope["user"])
        if len(calls) == 1:
            return Problem(502, "the app failed")
        digests.append("d")
        return tools(1, 10)

    wire = Wire(lambda *_: None, path="/mcp", principal=lambda scope: str(scope["user"]))  # type: ignore[arg-type,return-value]
    documents = OpenApiDocuments(wire, list_all, base_path="/mcp")
    assert isinstance(await documents.document(scope_of("a")), Problem)
    assert not isinstance(await documents.document(scope_of("a")), Problem)
    assert len(calls) == 2 and documents.builds == 1


def test_the_info_is_the_servers_or_the_default() -> None:
    from mcp_resume_asgi.rest.openapi_documents import _info

    assert _info(None) == {"title": "MCP REST face", "version": "1"}
    assert _info({"name": "n", "version": "2.0"}) == {"title": "n", "version": "2.0"}
    assert _info({"name": "n", "title": "Nice Name", "version": "2", "description": "What it does."}) == {
        "title": "Nice Name",
        "version": "2",
        "description": "What it does.",
    }
    assert _info({"name": 5, "title": " ", "version": ["x"]}) == {"title": "MCP REST face", "version": "1"}
