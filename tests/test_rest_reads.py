"""REST face: the read routes (rest/reads.py) against wrapped stock MCP servers over uvicorn.

`GET /mcp/prompts`, `POST /mcp/prompts/{name}`, `GET /mcp/resources`, `GET
/mcp/resources/{name}` (by name or percent-encoded URI; one content as itself - binary
as raw bytes -, several as JSON), `GET /mcp/resources-templates`, `POST /mcp/complete`,
`GET /mcp/openapi.json`: plain `httpx`, no MCP client. ETags and 304s, problem+json for
every failure. Lists concatenated over pages and bounded: a low-level `Server` that
pages its prompts and loops its resource cursors.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import mcp.types as types
import pytest
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.types import Completion, PromptReference, ResourceTemplateReference
from openapi_spec_validator import validate
from starlette.applications import Starlette
from starlette.routing import Route

from mcp_resume_asgi import resumable
from mcp_resume_asgi.rest.middleware import DEFAULT_MAX_BODY_BYTES
from mcp_resume_asgi.rest.reads import MAX_PAGES, contents_representation, media_type
from tests.apps.rest_app import legacy
from tests.support.server import serve_in_thread

PNG = b"\x89PNG\r\n\x1a\n\x00\x01\x02\xff\xfe binary \x00 bytes"
PROBLEM = "application/problem+json"
FORM = {"content-type": "application/x-www-form-urlencoded"}


def create_stock_app() -> Starlette:
    server = MCPServer("reads-test-app", log_level="WARNING")

    @server.prompt()
    def greet(name: str, punctuation: str = "!") -> str:
        """Greet someone."""
        return f"Hello {name}{punctuation}"

    @server.prompt()
    def review(code: str, language: str) -> str:
        """Review some code."""
        return f"Review this {language}: {code}"

    @server.resource("docs://readme", mime_type="text/markdown")
    def readme() -> str:
        """The README."""
        return "# Read me\n\nNon-ASCII: é ✓"

    @server.resource("images://logo.png", mime_type="image/png")
    def logo() -> bytes:
        """A binary resource."""
        return PNG

    @server.resource("items://{item_id}", mime_type="application/json")
    def item(item_id: str) -> str:
        """A template."""
        return f'{{"id": "{item_id}"}}'

    @server.completion()
    async def complete(
        ref: PromptReference | ResourceTemplateReference, argument: types.CompletionArgument, context: Any
    ) -> Completion | None:
        if isinstance(ref, PromptReference) and argument.name == "language":
            options = ["python", "perl", "php", "rust"]
            return Completion(values=[o for o in options if o.startswith(argument.value)], hasMore=False)
        if isinstance(ref, ResourceTemplateReference) and argument.name == "item_id":
            return Completion(values=[f"{argument.value}{i}" for i in range(3)])
        return None

    async def echo(text: str) -> str:
        """A tool, so the OpenAPI document has one."""
        return text

    server.add_tool(echo)
    return server.streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")


PAGE_SIZE = 3
PROMPT_COUNT = 8


async def _paged_prompts(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListPromptsResult:
    start = int(params.cursor) if params is not None and params.cursor else 0
    names = [f"p{i}" for i in range(start, min(start + PAGE_SIZE, PROMPT_COUNT))]
    following = start + PAGE_SIZE
    return types.ListPromptsResult(
        prompts=[types.Prompt(name=n) for n in names],
        next_cursor=str(following) if following < PROMPT_COUNT else None,
    )


async def _looping_resources(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListResourcesResult:
    cursor = params.cursor if params is not None else None
    following = {None: "a", "a": "b", "b": "a"}[cursor]
    resource = types.Resource(name=f"r-{cursor}", uri=f"loop://{cursor}")
    return types.ListResourcesResult(resources=[resource], next_cursor=following)


async def _endless_templates(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListResourceTemplatesResult:
    cursor = int(params.cursor) if params is not None and params.cursor else 0
    template = types.ResourceTemplate(name=f"t{cursor}", uri_template=f"t{cursor}://{{x}}")
    return types.ListResourceTemplatesResult(resource_templates=[template], next_cursor=str(cursor + 1))


def create_paging_app() -> Starlette:
    """A low-level server: prompts over 3 pages, resource cursors in a loop, endless templates."""
    server: Server[Any] = Server(
        "paging-test-app",
        on_list_prompts=_paged_prompts,
        on_list_resources=_looping_resources,
        on_list_resource_templates=_endless_templates,
    )
    manager = StreamableHTTPSessionManager(app=server, json_response=True)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    return Starlette(routes=[Route("/mcp", endpoint=StreamableHTTPASGIApp(manager))], lifespan=lifespan)


ERAS = ["2026-07-28", "2025-11-25"]


def wrap(app: Starlette, era: str) -> Any:
    """The app wrapped with the face; at 2025-11-25 it refuses 2026-07-28 (the face opens sessions)."""
    return resumable(app if era == "2026-07-28" else legacy(app), rest=True)


#: The face serving each base URL, and the era it was built for.
FACES: dict[str, tuple[Any, str]] = {}


@pytest.fixture(scope="module", params=ERAS)
def base(request: pytest.FixtureRequest) -> Iterator[str]:
    app = wrap(create_stock_app(), request.param)
    with serve_in_thread(app) as info:
        FACES[info.mcp_url] = (app, request.param)
        yield info.mcp_url


@pytest.fixture(scope="module", params=ERAS)
def paging_base(request: pytest.FixtureRequest) -> Iterator[str]:
    with serve_in_thread(wrap(create_paging_app(), request.param)) as info:
        yield info.mcp_url


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=15) as http:
        yield http


def assert_problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body: dict[str, Any] = response.json()
    assert body["status"] == status and body["detail"]
    return body


def assert_conditional(client: httpx.Client, url: str, response: httpx.Response) -> None:
    """The answer has a strong ETag, a GET with it is a 304, a GET with another a 200."""
    etag = response.headers["etag"]
    assert etag.startswith('"') and etag.endswith('"') and not etag.startswith("W/")
    again = client.get(url, headers={"if-none-match": etag})
    assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == etag
    other = client.get(url, headers={"if-none-match": '"something-else"'})
    assert other.status_code == 200 and other.headers["etag"] == etag and other.content == response.content


# ---------------------------------------------------------------------- prompts


def test_the_face_speaks_the_era_the_app_does(base: str, client: httpx.Client) -> None:
    assert client.get(f"{base}/prompts").status_code == 200
    app, era = FACES[base]
    assert app.wire.era == era


def test_prompts_list(base: str, client: httpx.Client) -> None:
    response = client.get(f"{base}/prompts")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    prompts = {p["name"]: p for p in response.json()["prompts"]}
    assert set(prompts) == {"greet", "review"}
    assert [a["name"] for a in prompts["greet"]["arguments"]] == ["name", "punctuation"]
    assert_conditional(client, f"{base}/prompts", response)


def test_prompt_get_with_arguments(base: str, client: httpx.Client) -> None:
    response = client.post(f"{base}/prompts/greet", json={"name": "Ada", "punctuation": "?"})
    assert response.status_code == 200, response.text
    messages = response.json()["messages"]
    assert messages[0]["content"]["text"] == "Hello Ada?"
    assert "resultType" not in response.json()


def test_prompt_failures(base: str, client: httpx.Client) -> None:
    assert_problem(client.post(f"{base}/prompts/nope", json={}), 404)
    wrong = assert_problem(client.post(f"{base}/prompts/greet", json={"name": 3, "a/b": "ok"}), 400)
    assert wrong["errors"] == [{"pointer": "#/name", "detail": "must be a string"}]
    assert_problem(client.post(f"{base}/prompts/greet", json=["Ada"]), 400)
    assert_problem(client.post(f"{base}/prompts/greet", content=b"{not json"), 400)
    too_large = b" " * (DEFAULT_MAX_BODY_BYTES + 1)
    assert_problem(client.post(f"{base}/prompts/greet", content=too_large), 413)
    assert_problem(client.post(f"{base}/prompts/greet", content=b"[" * 100_000), 400)  # too deep to parse
    assert_problem(client.post(f"{base}/prompts/greet", content=b"name=Ada", headers=FORM), 415)
    missing = assert_problem(client.post(f"{base}/prompts/greet", json={"punctuation": "."}), 400)
    assert missing["errors"] == [{"pointer": "#/name", "detail": "is required"}]
    not_allowed = client.get(f"{base}/prompts/greet")
    assert not_allowed.status_code == 405 and "POST" in not_allowed.headers["allow"]


# ---------------------------------------------------------------------- resources


def test_resources_list(base: str, client: httpx.Client) -> None:
    response = client.get(f"{base}/resources")
    assert response.status_code == 200
    resources = {r["name"]: r for r in response.json()["resources"]}
    assert set(resources) == {"readme", "logo"}
    assert resources["logo"]["mimeType"] == "image/png"
    assert_conditional(client, f"{base}/resources", response)


def test_a_binary_resource_is_served_as_its_bytes(base: str, client: httpx.Client) -> None:
    response = client.get(f"{base}/resources/logo")
    assert response.status_code == 200
    assert response.headers["content-type"] == "image/png"
    assert response.content == PNG  # raw bytes, not base64 in JSON
    assert response.headers["x-content-type-options"] == "nosniff"
    assert_conditional(client, f"{base}/resources/logo", response)
    head = client.head(f"{base}/resources/logo")
    assert head.status_code == 200 and head.content == b""
    assert (
        head.headers["content-length"] == str(len(PNG)) and head.headers["etag"] == response.headers["etag"]
    )


def test_a_text_resource_is_served_as_text(base: str, client: httpx.Client) -> None:
    response = client.get(f"{base}/resources/readme")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/markdown; charset=utf-8"
    assert response.text == "# Read me\n\nNon-ASCII: é ✓"
    assert_conditional(client, f"{base}/resources/readme", response)


def test_a_resource_by_its_percent_encoded_uri(base: str, client: httpx.Client) -> None:
    by_uri = client.get(f"{base}/resources/images%3A%2F%2Flogo.png")
    assert by_uri.status_code == 200 and by_uri.content == PNG
    by_name = client.get(f"{base}/resources/logo")
    assert by_uri.headers["etag"] == by_name.headers["etag"]
    templated = client.get(f"{base}/resources/items%3A%2F%2F42")
    assert templated.status_code == 200
    assert templated.headers["content-type"] == "application/json"
    assert templated.json() == {"id": "42"}


def test_unknown_resources_are_404(base: str, client: httpx.Client) -> None:
    assert_problem(client.get(f"{base}/resources/nope"), 404)
    assert_problem(client.get(f"{base}/resources/docs%3A%2F%2Fmissing"), 404)


def test_resource_templates(base: str, client: httpx.Client) -> None:
    response = client.get(f"{base}/resources-templates")
    assert response.status_code == 200
    templates = response.json()["resourceTemplates"]
    assert [(t["name"], t["uriTemplate"]) for t in templates] == [("item", "items://{item_id}")]
    assert_conditional(client, f"{base}/resources-templates", response)


# ---------------------------------------------------------------------- completion


def test_completion(base: str, client: httpx.Client) -> None:
    prompt = {"ref": {"type": "ref/prompt", "name": "review"}, "argument": {"name": "language", "value": "p"}}
    response = client.post(f"{base}/complete", json=prompt)
    assert response.status_code == 200, response.text
    assert response.json()["completion"]["values"] == ["python", "perl", "php"]
    template = {
        "ref": {"type": "ref/resource", "uri": "items://{item_id}"},
        "argument": {"name": "item_id", "value": "x"},
    }
    response = client.post(f"{base}/complete", json=template)
    assert response.status_code == 200, response.text
    assert response.json()["completion"]["values"] == ["x0", "x1", "x2"]


def test_completion_failures(base: str, client: httpx.Client) -> None:
    wrong = assert_problem(
        client.post(f"{base}/complete", json={"argument": {"name": "a", "value": ""}}), 400
    )
    assert wrong["errors"] == [{"pointer": "#/ref", "detail": "must be an object"}]
    assert_problem(client.post(f"{base}/complete", content=b""), 400)
    assert_problem(client.post(f"{base}/complete", json="text"), 400)
    assert client.get(f"{base}/complete").status_code == 405


# ---------------------------------------------------------------------- OpenAPI


@pytest.mark.slow
def test_the_openapi_document(base: str, client: httpx.Client) -> None:
    response = client.get(f"{base}/openapi.json")
    assert response.status_code == 200
    document = response.json()
    validate(document)
    assert "/mcp/tools/echo/calls/{toolCallId}" in document["paths"]
    body = document["components"]["schemas"]["echoArguments"]
    assert body["properties"]["text"]["type"] == "string" and body["required"] == ["text"]
    assert_conditional(client, f"{base}/openapi.json", response)


# ---------------------------------------------------------------------- paging and bounds


def test_lists_are_every_page_concatenated(paging_base: str, client: httpx.Client) -> None:
    response = client.get(f"{paging_base}/prompts")
    assert response.status_code == 200, response.text
    assert [p["name"] for p in response.json()["prompts"]] == [f"p{i}" for i in range(PROMPT_COUNT)]
    assert "nextCursor" not in response.json()


def test_looping_or_endless_lists_are_refused(paging_base: str, client: httpx.Client) -> None:
    loop = assert_problem(client.get(f"{paging_base}/resources"), 502)
    assert "loop" in loop["detail"]
    endless = assert_problem(client.get(f"{paging_base}/resources-templates"), 502)
    assert f"{MAX_PAGES} pages" in endless["detail"]


def test_a_method_the_app_does_not_serve_is_404(paging_base: str, client: httpx.Client) -> None:
    params = {"ref": {"type": "ref/prompt", "name": "p0"}, "argument": {"name": "a", "value": ""}}
    assert_problem(client.post(f"{paging_base}/complete", json=params), 404)  # -32601 from the app


# ---------------------------------------------------------------------- rendering (sans-IO)


def test_several_contents_are_json_and_odd_types_are_defaulted() -> None:
    several = {
        "contents": [{"uri": "a", "text": "x"}, {"uri": "b", "blob": "AA=="}],
        "resultType": "complete",
    }
    shown = contents_representation(several)
    assert not isinstance(shown, Exception) and hasattr(shown, "body")
    assert shown.content_type == b"application/json"  # type: ignore[union-attr]
    none = contents_representation({"contents": []})
    assert none.content_type == b"application/json"  # type: ignore[union-attr]
    bad_blob = contents_representation({"contents": [{"uri": "a", "blob": "not base64!"}]})
    assert getattr(bad_blob, "status", None) == 502
    blob = contents_representation({"contents": [{"uri": "a", "blob": base64.b64encode(PNG).decode()}]})
    assert blob.body == PNG and blob.content_type == b"application/octet-stream"  # type: ignore[union-attr]
    assert media_type("text/html\r\nSet-Cookie: x=1", "d") == "d"
    assert media_type("text/html; charset=utf-8", "d") == "text/html; charset=utf-8"
    assert media_type("ünï/code", "d") == "d"
    assert media_type("x" * 300 + "/y", "d") == "d"
