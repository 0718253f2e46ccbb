"""REST face: a tool call's arguments checked against the tool's inputSchema (rest/validation.py).

The schemas are the ones a stock `MCPServer` generates for its tools (pydantic), plus
hand-written hostile ones: remote `$ref`s, invalid schemas, huge schemas, deep data.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
from enum import StrEnum
from typing import Annotated, Literal

import anyio
import pytest
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel, Field

from mcp_resume_asgi.rest.validation import (
    MAX_MESSAGE_CHARS,
    ArgumentsValidator,
    Reason,
    pointer_of,
    require_jsonschema,
    validate_arguments,
)


class Color(StrEnum):
    red = "red"
    blue = "blue"


class Point(BaseModel):
    x: float
    y: float


async def many(
    n: int,
    s: str,
    f: float,
    b: bool,
    items: list[int],
    labels: dict[str, str],
    maybe: int | None = None,
    mode: Literal["a", "b"] = "a",
    color: Color = Color.red,
    point: Point | None = None,
    small: Annotated[int, Field(ge=0, le=10)] = 1,
) -> str:
    """A tool with arguments of many types."""
    return "ok"


def stock_schema() -> dict[str, object]:
    """The inputSchema a stock MCPServer publishes for `many`."""
    server = MCPServer("validation-test")
    server.add_tool(many)

    async def listed() -> dict[str, object]:
        tools = await server.list_tools()
        dumped = tools[0].model_dump(mode="json", by_alias=True, exclude_none=True)
        schema: dict[str, object] = dumped["inputSchema"]
        return schema

    return anyio.run(listed)


SCHEMA = stock_schema()
GOOD = {"n": 1, "s": "x", "f": 1.5, "b": True, "items": [1, 2], "labels": {"k": "v"}}


def by_pointer(reasons: list[Reason]) -> dict[str, str]:
    return {r.pointer: r.detail for r in reasons}


def test_valid_arguments_of_a_stock_tool_have_no_reasons() -> None:
    assert validate_arguments(SCHEMA, GOOD) == []
    full = {**GOOD, "maybe": None, "mode": "b", "color": "blue", "point": {"x": 1, "y": 2.5}, "small": 10}
    assert validate_arguments(SCHEMA, full) == []


def test_each_wrong_argument_is_a_reason_at_its_place() -> None:
    bad = {
        "n": "5",
        "s": 1,
        "f": 1,
        "b": True,
        "items": [1, "x"],
        "labels": {"k": 1},
        "maybe": "q",
        "mode": "z",
        "color": "green",
        "point": {"x": 1},
        "small": 11,
    }
    found = by_pointer(validate_arguments(SCHEMA, bad))
    assert set(found) == {
        "/n",
        "/s",
        "/items/1",
        "/labels/k",
        "/maybe",
        "/mode",
        "/color",
        "/point",
        "/small",
    }
    assert "'integer'" in found["/n"]
    assert found["/maybe"] == "'q' is not of type 'integer', 'null'"  # both alternatives named
    assert "'y' is a required property" in found["/point"]
    assert "maximum of 10" in found["/small"]
    assert "'green'" in found["/color"]


def test_missing_required_arguments_are_named() -> None:
    reasons = validate_arguments(SCHEMA, {"n": 1})
    assert {r.pointer for r in reasons} == {""}
    details = " ".join(r.detail for r in reasons)
    for name in ("s", "f", "b", "items", "labels"):
        assert f"'{name}' is a required property" in details
    assert reasons[0].as_json()["pointer"] == "#"


@pytest.mark.parametrize("body", [[], "text", 3, None, [GOOD]])
def test_a_body_that_is_not_an_object_is_refused(body: object) -> None:
    assert [r.pointer for r in validate_arguments(SCHEMA, body)] == [""]


def test_pointers_escape_slash_and_tilde() -> None:
    assert pointer_of(["a/b", "c~d", 0]) == "/a~1b/c~0d/0"
    schema = {"type": "object", "properties": {"a/b~c": {"type": "integer"}}}
    assert [r.as_json() for r in validate_arguments(schema, {"a/b~c": "x"})] == [
        {"pointer": "#/a~1b~0c", "detail": "'x' is not of type 'integer'"}
    ]


def test_the_number_of_reasons_is_bounded() -> None:
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    arguments = {f"k{i}": "x" for i in range(1000)}
    assert len(ArgumentsValidator(max_reasons=5).reasons(schema, arguments)) == 5
    assert len(validate_arguments(schema, arguments)) == 16


def test_a_huge_value_is_described_not_echoed() -> None:
    schema = {"type": "object", "properties": {"v": {"type": "integer"}, "w": {"maxLength": 3}}}
    reasons = by_pointer(validate_arguments(schema, {"v": "x" * 100_000, "w": "y" * 50_000}))
    assert reasons["/v"] == "a string of length 100000 is not of type 'integer'"
    assert reasons["/w"] == "a string of length 50000 is too long"
    listing = validate_arguments(schema, {"v": list(range(10_000))})
    assert listing[0].detail == "an array of length 10000 is not of type 'integer'"
    assert all(len(r.detail) <= MAX_MESSAGE_CHARS for r in listing)


def test_deep_arguments_are_refused_before_validation() -> None:
    # A recursive schema over deep data would exhaust the stack inside jsonschema.
    schema = {"type": "object", "properties": {"t": {"$ref": "#/$defs/tree"}}, "$defs": {}}
    schema["$defs"] = {"tree": {"type": "object", "properties": {"c": {"$ref": "#/$defs/tree"}}}}
    deep: dict[str, object] = {}
    node = deep
    for _ in range(5000):
        child: dict[str, object] = {}
        node["c"] = child
        node = child
    reasons = validate_arguments(schema, {"t": deep})
    assert [r.pointer for r in reasons] == [""]
    assert "deeper than 64" in reasons[0].detail
    shallow = {"c": {"c": {"c": 1}}}
    assert [r.pointer for r in validate_arguments(schema, {"t": shallow})] == ["/t/c/c/c"]


@pytest.mark.slow
def test_remote_references_are_never_fetched() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(1.0)
    port = listener.getsockname()[1]
    connections: list[object] = []

    def accept() -> None:
        with contextlib.suppress(TimeoutError):
            connections.append(listener.accept())

    thread = threading.Thread(target=accept)
    thread.start()
    try:
        schema = {"type": "object", "properties": {"a": {"$ref": f"http://127.0.0.1:{port}/s.json"}}}
        # Unresolvable within the schema: not judged here (the app will), and nothing fetched.
        assert ArgumentsValidator().reasons(schema, {"a": 1}) == []
        # A body that never reaches the reference is still judged by the rest of the schema.
        typed = {**schema, "required": ["b"]}
        assert [r.detail for r in ArgumentsValidator().reasons(typed, {})] == ["'b' is a required property"]
    finally:
        thread.join()
        listener.close()
    assert connections == []


def test_a_schema_that_is_not_json_schema_is_left_to_the_app() -> None:
    assert validate_arguments({"type": 12}, {"a": 1}) == []
    assert validate_arguments({"properties": []}, {}) == []
    assert validate_arguments("not a schema", {}) == []


@pytest.mark.slow
def test_a_schema_too_large_is_not_compiled() -> None:
    properties = {f"p{i}": {"type": "integer", "description": "d" * 100} for i in range(4000)}
    schema = {"type": "object", "properties": properties, "required": ["p0"]}
    assert validate_arguments(schema, {}) == []  # ~500 KB: over the 256 KiB bound
    small = ArgumentsValidator(max_schema_bytes=10 * 1024 * 1024)
    assert [r.detail for r in small.reasons(schema, {})] == ["'p0' is a required property"]


def test_the_draft_named_by_schema_is_used() -> None:
    # Draft 7's tuple form of `items`: not valid 2020-12 (where it would be left to the app).
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"pair": {"type": "array", "items": [{"type": "integer"}, {"type": "string"}]}},
    }
    assert [r.pointer for r in validate_arguments(schema, {"pair": ["x", "y"]})] == ["/pair/0"]
    # 2020-12 is the default: `prefixItems` applies.
    modern = {"type": "object", "properties": {"pair": {"prefixItems": [{"type": "integer"}]}}}
    assert [r.pointer for r in validate_arguments(modern, {"pair": ["x"]})] == ["/pair/0"]


def test_boolean_schemas() -> None:
    assert validate_arguments(True, {"anything": 1}) == []
    assert [r.pointer for r in validate_arguments(False, {})] == [""]


def test_missing_jsonschema_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "jsonschema", None)  # what `import` meets when it is absent
    with pytest.raises(ImportError, match=r"mcp-resume-asgi\[rest\]"):
        require_jsonschema()
    with pytest.raises(ImportError, match=r"mcp-resume-asgi\[rest\]"):
        ArgumentsValidator().reasons({"type": "object"}, {})


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError):
        ArgumentsValidator(max_reasons=0)
