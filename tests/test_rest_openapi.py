"""REST face: the OpenAPI 3.1 document generated from `tools/list` (rest/openapi.py).

Every document built here is checked with `openapi-spec-validator` (which also resolves
every `$ref` in it, and checks each schema against the OpenAPI 3.1 dialect). The tools
come from a stock `MCPServer` over the real wire (uvicorn on 127.0.0.1, raw JSON-RPC),
and from hand-written hostile tool lists: names that need escaping in a path, schemas
with remote references, scope keywords, bad drafts, huge sizes and counts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Annotated, Any, Literal
from urllib.parse import unquote

import httpx
import pytest
import referencing
from jsonschema import Draft202012Validator
from mcp.server.mcpserver import MCPServer
from openapi_spec_validator import validate
from pydantic import BaseModel, Field
from starlette.applications import Starlette

from mcp_resume_asgi.rest import openapi
from mcp_resume_asgi.rest.openapi import build_openapi, tool_path_segment
from mcp_resume_asgi.rest.openapi_components import CALL_STATUSES
from tests.support.server import serve_in_thread


class Item(BaseModel):
    sku: str
    quantity: Annotated[int, Field(ge=1)]


class Order(BaseModel):
    customer: str
    items: list[Item]
    note: str | None = None


async def many(
    n: int,
    ratio: float,
    flag: bool,
    tags: list[str],
    labels: dict[str, int],
    maybe: int | None = None,
    mode: Literal["fast", "slow"] = "fast",
) -> str:
    """Arguments of many kinds."""
    return "ok"


async def place(order: Order) -> str:
    """Nested models: `$defs` and `$ref`s in the schema."""
    return order.customer


async def ping() -> str:
    """No arguments."""
    return "pong"


async def read(path: str) -> str:
    """Registered under a name that needs escaping in a path."""
    return path


ODD_NAMES = ("files/read {path}?", "héllo wörld", "a%2Fb")


def create_app() -> Starlette:
    server = MCPServer("openapi-test-app", log_level="WARNING")
    for fn in (many, place, ping):
        server.add_tool(fn)
    for name in ODD_NAMES:
        server.add_tool(read, name=name)
    return server.streamable_http_app(streamable_http_path="/mcp", json_response=True, host="127.0.0.1")


def rpc(client: httpx.Client, url: str, method: str, params: dict[str, Any], **headers: str) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    base = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    response = client.post(url, json=body, headers=base | headers)
    response.raise_for_status()
    return response


@pytest.fixture(scope="module")
def stock_tools() -> Iterator[list[dict[str, Any]]]:
    """The stock server's `tools/list` result, as it comes over the wire."""
    with serve_in_thread(create_app()) as info, httpx.Client(timeout=10) as client:
        opened = rpc(
            client,
            info.mcp_url,
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        )
        session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        listed = rpc(client, info.mcp_url, "tools/list", {}, **session).json()
        yield listed["result"]["tools"]


def refs_in(value: Any) -> Iterator[str]:
    """Every `$ref` of a document or schema (not inside data: `enum`, `const`, `default`...)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "$ref" and isinstance(item, str):
                yield item
            elif key not in ("enum", "const", "default", "examples", "example"):
                yield from refs_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from refs_in(item)


def put_body_schema(document: dict[str, Any], path: str) -> dict[str, Any]:
    reference = document["paths"][path]["put"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    schema: dict[str, Any] = document["components"]["schemas"][reference.rsplit("/", 1)[1]]
    return schema


@pytest.mark.slow
def test_the_document_of_a_stock_server_validates(stock_tools: list[dict[str, Any]]) -> None:
    document = build_openapi(stock_tools, title="openapi-test-app", version="0.1")
    validate(document)
    assert document["openapi"] == "3.1.0"
    assert "x-mcp-tools-omitted" not in document
    json.dumps(document, allow_nan=False)  # plain JSON, as served
    assert all(r.startswith("#/components/") for r in refs_in(document))


def test_every_route_of_the_face_is_described(stock_tools: list[dict[str, Any]]) -> None:
    paths = build_openapi(stock_tools)["paths"]
    call = "/mcp/tools/{toolName}/calls/{toolCallId}"
    expected = {
        "/mcp/tools": {"get"},
        call: {"put", "get"},
        f"{call}/advance": {"post"},
        f"{call}/cancel": {"post"},
        "/mcp/tools/{toolName}/calls": {"get"},
        "/mcp/prompts": {"get"},
        "/mcp/prompts/{name}": {"post"},
        "/mcp/resources": {"get"},
        "/mcp/resources/{name}": {"get"},
        "/mcp/resources-templates": {"get"},
        "/mcp/complete": {"post"},
        "/mcp/openapi.json": {"get"},
    }
    for path, methods in expected.items():
        assert set(paths[path]) == methods, path
    for name in ("many", "place", "ping", *ODD_NAMES):
        assert set(paths[f"/mcp/tools/{tool_path_segment(name)}/calls/{{toolCallId}}"]) == {"put", "get"}


def test_each_tool_put_body_is_its_input_schema(stock_tools: list[dict[str, Any]]) -> None:
    document = build_openapi(stock_tools)
    registry: referencing.Registry[Any] = referencing.Registry().with_resource(
        "urn:doc", referencing.Resource.from_contents(document, referencing.jsonschema.DRAFT202012)
    )
    for tool in stock_tools:
        path = f"/mcp/tools/{tool_path_segment(tool['name'])}/calls/{{toolCallId}}"
        embedded = put_body_schema(document, path)
        reference = document["paths"][path]["put"]["requestBody"]["content"]["application/json"]["schema"]
        original = tool["inputSchema"]
        repointed = json.dumps(original).replace('"#/$defs/', '"' + reference["$ref"] + "/$defs/")
        expected = json.loads(repointed) | {"description": tool.get("description") or embedded["description"]}
        assert embedded == expected
        # Faithful: the embedded schema, resolved inside the document, judges as the original.
        inside = Draft202012Validator({"$ref": "urn:doc" + reference["$ref"]}, registry=registry)
        alone = Draft202012Validator(original)
        for sample in ({}, {"n": "x", "ratio": 1, "flag": True, "tags": [1], "labels": {}}, {"order": {}}):
            assert sorted(e.message for e in inside.iter_errors(sample)) == sorted(
                e.message for e in alone.iter_errors(sample)
            )
    place_schema = put_body_schema(document, "/mcp/tools/place/calls/{toolCallId}")
    assert "#/components/schemas/placeArguments/$defs/Order" in set(refs_in(place_schema))


def test_headers_parameters_and_problems(stock_tools: list[dict[str, Any]]) -> None:
    document = build_openapi(stock_tools)
    components = document["components"]
    put = document["paths"]["/mcp/tools/many/calls/{toolCallId}"]["put"]
    params = [components["parameters"][p["$ref"].rsplit("/", 1)[1]] for p in put["parameters"]]
    assert {"name": "Idempotency-Key", "in": "header", "required": True}.items() <= next(
        p for p in params if p["name"] == "Idempotency-Key"
    ).items()
    assert set(put["responses"]) >= {"200", "201", "400", "404", "409", "413", "415", "429", "502", "503"}
    assert set(put["responses"]["200"]["headers"]) == {"ETag", "Retry-After"}
    for code in ("400", "404", "409", "503"):
        problem = components["responses"][put["responses"][code]["$ref"].rsplit("/", 1)[1]]
        assert list(problem["content"]) == ["application/problem+json"]
    assert "Retry-After" in components["responses"]["Unavailable"]["headers"]
    advance = document["paths"]["/mcp/tools/{toolName}/calls/{toolCallId}/advance"]["post"]
    assert {"412", "428"} <= set(advance["responses"])
    assert {"$ref": "#/components/parameters/IfMatch"} in advance["parameters"]
    get = document["paths"]["/mcp/tools/{toolName}/calls/{toolCallId}"]["get"]
    assert "304" in get["responses"] and {"$ref": "#/components/parameters/IfNoneMatch"} in get["parameters"]
    listing = document["paths"]["/mcp/tools/{toolName}/calls"]["get"]
    names = {components["parameters"][p["$ref"].rsplit("/", 1)[1]]["name"] for p in listing["parameters"]}
    assert names == {"toolName", "status", "createdAfter", "cursor", "limit"}
    assert components["parameters"]["Status"]["schema"]["enum"] == list(CALL_STATUSES)
    resource = components["schemas"]["ToolCall"]
    assert set(resource["properties"]) == {
        "toolname",
        "id",
        "etag",
        "status",
        "request",
        "samplingRequest",
        "elicitationRequest",
        "progress",
        "result",
        "error",
    }
    read = document["paths"]["/mcp/resources/{name}"]["get"]["responses"]["200"]["content"]
    assert set(read) == {"*/*", "application/json"}


@pytest.mark.parametrize("base", ["/", "", "/api/mcp/", "/mcp"])
@pytest.mark.slow
def test_the_base_path(base: str) -> None:
    document = build_openapi([{"name": "t", "inputSchema": {"type": "object"}}], base_path=base)
    validate(document)
    prefix = "/" + base.strip("/") if base.strip("/") else ""
    assert f"{prefix}/tools/t/calls/{{toolCallId}}" in document["paths"]
    assert all(p.startswith(prefix + "/") for p in document["paths"])


@pytest.mark.slow
def test_hostile_names_are_escaped_or_left_to_the_templated_routes() -> None:
    names = ["a/b", "{toolName}", "x?y#z", "../etc", "%41", "sp ace", "ünï", "t\u2028", "dup", "dup"]
    skipped: list[Any] = ["", ".", "..", "n" * 300, None, 42]
    tools: list[Any] = [{"name": n, "inputSchema": {"type": "object"}} for n in names + skipped]
    tools += ["not a tool", {"inputSchema": {}}]
    document = build_openapi(tools)
    validate(document)
    concrete = {
        unquote(p.split("/")[3])
        for p in document["paths"]
        if p.startswith("/mcp/tools/") and "{toolName}" not in p and p.count("/") == 5
    }
    assert concrete == set(names)  # each once, decoding back to the tool's own name
    for name in names:
        segment = tool_path_segment(name)
        assert segment is not None and "/" not in segment and "{" not in segment and "?" not in segment
    assert document["x-mcp-tools-omitted"] == 1 + len(skipped) + 2  # the duplicate, the skipped, the junk
    operation_ids = [op["operationId"] for item in document["paths"].values() for op in item.values()]
    assert len(operation_ids) == len(set(operation_ids))


HOSTILE_SCHEMAS: dict[str, Any] = {
    "remote_ref": {"type": "object", "properties": {"a": {"$ref": "http://127.0.0.1:9/evil.json"}}},
    "relative_ref": {"type": "object", "properties": {"a": {"$ref": "other.json#/x"}}},
    "anchor_ref": {
        "type": "object",
        "properties": {"a": {"$ref": "#thing"}},
        "$defs": {"t": {"$anchor": "thing"}},
    },
    "dangling_ref": {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},
    "with_id": {"$id": "https://example.com/s", "type": "object"},
    "dynamic": {"type": "object", "properties": {"a": {"$dynamicRef": "#meta"}}},
    "draft7_tuple": {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"p": {"items": [{"type": "string"}]}},
    },
    "not_a_schema": {"type": 12},
    "a_list": [{"type": "object"}],
    "too_big": {"type": "object", "properties": {f"p{i}": {"description": "d" * 200} for i in range(400)}},
    "too_deep": {"type": "object"},
}
node = HOSTILE_SCHEMAS["too_deep"]
for _ in range(100):
    node["properties"] = {"x": {"type": "object"}}
    node = node["properties"]["x"]


@pytest.mark.slow
def test_hostile_schemas_become_a_plain_object() -> None:
    tools = [{"name": name, "inputSchema": schema} for name, schema in HOSTILE_SCHEMAS.items()]
    draft7 = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "definitions": {"D": {}},
    }
    draft7["properties"] = {"d": {"$ref": "#/definitions/D"}, "e": {"enum": [{"$ref": "data, not a ref"}]}}
    tools.append({"name": "draft7_plain", "inputSchema": draft7})
    document = build_openapi(tools)
    validate(document)
    assert all(r.startswith("#/components/") for r in refs_in(document))
    for name in HOSTILE_SCHEMAS:
        body = put_body_schema(document, f"/mcp/tools/{name}/calls/{{toolCallId}}")
        assert body == {
            "type": "object",
            "description": "The tool's arguments; its inputSchema is in GET /tools.",
        }
    kept = put_body_schema(document, "/mcp/tools/draft7_plain/calls/{toolCallId}")
    assert "$schema" not in kept
    assert kept["properties"]["d"] == {"$ref": "#/components/schemas/draft7_plainArguments/definitions/D"}
    assert kept["properties"]["e"] == {"enum": [{"$ref": "data, not a ref"}]}  # data is left alone


@pytest.mark.slow
def test_many_tools_and_huge_schemas_are_bounded() -> None:
    tools = [{"name": f"t{i}", "inputSchema": {"type": "object"}} for i in range(openapi.MAX_TOOLS + 100)]
    document = build_openapi(tools)
    assert document["x-mcp-tools-omitted"] == 100
    assert sum(1 for p in document["paths"] if p.startswith("/mcp/tools/t")) == openapi.MAX_TOOLS
    # Schemas just under the per-schema bound, until the total budget is spent.
    big = {"type": "object", "properties": {f"p{i}": {"description": "d" * 100} for i in range(500)}}
    size = len(json.dumps(big, separators=(",", ":")))
    assert size < openapi.MAX_SCHEMA_BYTES
    count = openapi.MAX_TOTAL_SCHEMA_BYTES // size + 5
    document = build_openapi([{"name": f"b{i}", "inputSchema": big} for i in range(count)])
    embedded = [
        s
        for k, s in document["components"]["schemas"].items()
        if k.endswith("Arguments") and "properties" in s
    ]
    assert len(embedded) == openapi.MAX_TOTAL_SCHEMA_BYTES // size
    assert len(json.dumps(document)) < openapi.MAX_TOTAL_SCHEMA_BYTES + 1024 * 1024
    validate(build_openapi([{"name": "b", "inputSchema": big}]))


@pytest.mark.slow
def test_long_texts_are_cut() -> None:
    document = build_openapi(
        [{"name": "t", "description": "w" * 10_000, "inputSchema": {"type": "object"}}],
        title="T" * 5000,
        description="D" * 5000,
    )
    validate(document)
    assert len(document["info"]["title"]) == openapi.MAX_DESCRIPTION_CHARS
    assert (
        len(document["components"]["schemas"]["tArguments"]["description"]) == openapi.MAX_DESCRIPTION_CHARS
    )
