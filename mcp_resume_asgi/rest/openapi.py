"""The REST face as an OpenAPI 3.1 document, generated from the app's `tools/list` (sans-IO).

`GET /mcp/openapi.json` serves it, so gateways and code generators can use the face
without knowing MCP: every route of the face (SEP-1597's table and the listing
filters), and, per tool, a concrete `PUT /mcp/tools/<tool>/calls/{toolCallId}` whose
request body is the tool's own `inputSchema`.

The tools come from the app, so the document treats them as untrusted input:
- a tool name goes into a path percent-encoded (every byte outside RFC 3986's
  unreserved set), so `/`, `{`, `?`, spaces or non-ASCII cannot change the route; names
  that cannot be a path segment at all (empty, `.`, `..`, longer than `MAX_NAME_CHARS`)
  and duplicates get no concrete path: the templated `{toolName}` routes still serve them;
- an `inputSchema` is embedded under `components/schemas` with its local `$ref`s
  re-pointed there (a `#/$defs/X` inside it would otherwise resolve against the
  document); a schema that cannot be embedded faithfully - a remote or anchor `$ref`,
  `$id` / `$dynamicRef` (they change how references resolve), one nested deeper than
  `MAX_SCHEMA_DEPTH`, larger than `MAX_SCHEMA_BYTES`, not valid JSON Schema 2020-12
  when `jsonschema` can tell - becomes a plain `{"type": "object"}` saying so: the face
  still validates the body against the real schema on PUT;
- at most `MAX_TOOLS` tools get concrete paths and their schemas together at most
  `MAX_TOTAL_SCHEMA_BYTES`; how many were left out is `x-mcp-tools-omitted`;
- descriptions are cut at `MAX_DESCRIPTION_CHARS`.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import json
import re
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from cachetools import LRUCache

from mcp_resume_asgi.rest.openapi_components import components, problems, ref

OPENAPI_VERSION = "3.1.0"
MAX_TOOLS = 512
MAX_NAME_CHARS = 256
MAX_SCHEMA_BYTES = 64 * 1024
MAX_TOTAL_SCHEMA_BYTES = 2 * 1024 * 1024
MAX_SCHEMA_DEPTH = 64
MAX_DESCRIPTION_CHARS = 2000

_JSON = "application/json"
#: Keywords whose values are data, not schemas: never rewritten.
_DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples", "example"})
#: Keywords that change how references resolve: such a schema is not embedded.
_SCOPE_KEYWORDS = frozenset({"$id", "$anchor", "$dynamicRef", "$dynamicAnchor", "$recursiveRef"})
#: Schema digest -> whether it is valid JSON Schema 2020-12 (see `_valid_2020_12`).
_VERDICTS: LRUCache[str, bool] = LRUCache(maxsize=4096)
_VERDICTS_LOCK = threading.Lock()
_BODY_PROBLEMS = ("BadRequest", "NotFound", "PayloadTooLarge", "UnsupportedMediaType")
_PUT_PROBLEMS = (*_BODY_PROBLEMS, "Conflict", "TooManyRequests")
_ADVANCE_PROBLEMS = (*_BODY_PROBLEMS, "Conflict", "PreconditionFailed", "PreconditionRequired")
_POST_READ_PROBLEMS = _BODY_PROBLEMS
_GENERIC_BODY = {"type": "object", "description": "The tool's arguments (see GET /tools)."}


def build_openapi(
    tools: Iterable[Any],
    *,
    base_path: str = "/mcp",
    title: str = "MCP REST face",
    version: str = "1",
    description: str | None = None,
) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the face serving `tools` (as `tools/list` gave them) at `base_path`."""
    base = "/" + base_path.strip("/") if base_path.strip("/") else ""
    parts = components()
    paths: dict[str, Any] = {}
    _add_generic_routes(paths, base)
    omitted = _add_tool_routes(paths, parts["schemas"], base, tools)
    info: dict[str, Any] = {"title": _cut(title) or "MCP REST face", "version": _cut(version) or "1"}
    if description:
        info["description"] = _cut(description)
    document: dict[str, Any] = {
        "openapi": OPENAPI_VERSION,
        "info": info,
        "paths": paths,
        "components": parts,
    }
    if omitted:
        document["x-mcp-tools-omitted"] = omitted
    return document


def tool_path_segment(name: str) -> str | None:
    """`name` as one path segment (percent-encoded), or None when it cannot be one."""
    if not name or name in (".", "..") or len(name) > MAX_NAME_CHARS:
        return None
    return quote(name, safe="")


def _operation(operation_id: str, summary: str, responses: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"operationId": operation_id, "summary": summary, **more, "responses": responses}


def _ok(description: str, schema: str | None, *, etag: bool = True, retry: bool = False) -> dict[str, Any]:
    response: dict[str, Any] = {"description": description}
    if schema is not None:
        response["content"] = {_JSON: {"schema": ref("schemas", schema)}}
    headers = {}
    if etag:
        headers["ETag"] = ref("headers", "ETag")
    if retry:
        headers["Retry-After"] = ref("headers", "RetryAfter")
    if headers:
        response["headers"] = headers
    return response


def _params(*names: str) -> list[dict[str, str]]:
    return [ref("parameters", name) for name in names]


def _json_body(schema: dict[str, Any], *, required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {_JSON: {"schema": schema}}}


def _call_put(operation_id: str, body: dict[str, Any], params: list[dict[str, str]]) -> dict[str, Any]:
    call_ok = _ok(
        "The call's current state (a retry with the same key: no second run).", "ToolCall", retry=True
    )
    created = _ok("The call was created; its state.", "ToolCall", retry=True)
    return _operation(
        operation_id,
        "Start a tool call (idempotent with Idempotency-Key); the body is the tool's arguments",
        {"200": call_ok, "201": created, **problems(*_PUT_PROBLEMS)},
        parameters=[*params, *_params("IdempotencyKey")],
        requestBody=_json_body(body),
    )


def _call_get(operation_id: str, params: list[dict[str, str]]) -> dict[str, Any]:
    return _operation(
        operation_id,
        "The call's current state",
        {
            "200": _ok("The call's current state.", "ToolCall", retry=True),
            "304": ref("responses", "NotModified"),
            **problems("NotFound"),
        },
        parameters=[*params, *_params("IfNoneMatch")],
    )


def _list_get(operation_id: str, summary: str, schema: str) -> dict[str, Any]:
    return _operation(
        operation_id,
        summary,
        {"200": _ok(summary, schema), "304": ref("responses", "NotModified"), **problems()},
        parameters=_params("IfNoneMatch"),
    )


def _add_generic_routes(paths: dict[str, Any], base: str) -> None:
    call = f"{base}/tools/{{toolName}}/calls/{{toolCallId}}"
    tool_call = _params("ToolName", "ToolCallId")
    paths[f"{base}/tools"] = {"get": _list_get("listTools", "The app's tools (every page)", "ToolList")}
    paths[call] = {
        "put": _call_put("callTool", {"type": "object"}, tool_call),
        "get": _call_get("getToolCall", tool_call),
    }
    advance_body = {"oneOf": [ref("schemas", "SamplingResult"), ref("schemas", "ElicitationResult")]}
    paths[f"{call}/advance"] = {
        "post": _operation(
            "advanceToolCall",
            "Answer the call's sampling or elicitation request",
            {
                "200": _ok("The call's new state.", "ToolCall", retry=True),
                **problems(*_ADVANCE_PROBLEMS),
            },
            parameters=[*tool_call, *_params("IfMatch")],
            requestBody=_json_body(advance_body),
        )
    }
    paths[f"{call}/cancel"] = {
        "post": _operation(
            "cancelToolCall",
            "Cancel the call (idempotent)",
            {"200": _ok("The call's state.", "ToolCall"), **problems("NotFound")},
            parameters=tool_call,
        )
    }
    paths[f"{base}/tools/{{toolName}}/calls"] = {
        "get": _operation(
            "listToolCalls",
            "The caller's calls of this tool",
            {
                "200": _ok("A page of calls.", "ToolCallList", etag=False),
                **problems("BadRequest", "NotFound"),
            },
            parameters=_params("ToolName", "Status", "CreatedAfter", "Cursor", "Limit"),
        )
    }
    paths[f"{base}/prompts"] = {
        "get": _list_get("listPrompts", "The app's prompts (every page)", "PromptList")
    }
    paths[f"{base}/prompts/{{name}}"] = {
        "post": _operation(
            "getPrompt",
            "Get a prompt; the body is its arguments",
            {"200": _ok("The prompt.", "GetPromptResult"), **problems(*_POST_READ_PROBLEMS)},
            parameters=_params("PromptName"),
            requestBody=_json_body(ref("schemas", "PromptArguments"), required=False),
        )
    }
    paths[f"{base}/resources"] = {
        "get": _list_get("listResources", "The app's resources (every page)", "ResourceList")
    }
    read_ok = _ok("One content as itself (bytes or text, its mimeType); several as JSON.", None)
    read_ok["content"] = {"*/*": {"schema": {}}, _JSON: {"schema": ref("schemas", "ReadResourceResult")}}
    paths[f"{base}/resources/{{name}}"] = {
        "get": _operation(
            "readResource",
            "Read a resource",
            {"200": read_ok, "304": ref("responses", "NotModified"), **problems("NotFound")},
            parameters=_params("ResourceName", "IfNoneMatch"),
        )
    }
    paths[f"{base}/resources-templates"] = {
        "get": _list_get("listResourceTemplates", "The app's resource templates", "ResourceTemplateList")
    }
    paths[f"{base}/complete"] = {
        "post": _operation(
            "complete",
            "Complete a prompt or resource-template argument",
            {"200": _ok("Completions.", "CompleteResult"), **problems(*_POST_READ_PROBLEMS)},
            requestBody=_json_body(ref("schemas", "CompleteRequest")),
        )
    }
    openapi_ok = {
        "description": "This document.",
        "headers": {"ETag": ref("headers", "ETag")},
        "content": {_JSON: {"schema": {"type": "object"}}},
    }
    paths[f"{base}/openapi.json"] = {
        "get": _operation(
            "getOpenApi",
            "This document",
            {"200": openapi_ok, "304": ref("responses", "NotModified"), **problems()},
            parameters=_params("IfNoneMatch"),
        )
    }


def _add_tool_routes(paths: dict[str, Any], schemas: dict[str, Any], base: str, tools: Iterable[Any]) -> int:
    """One concrete call path per tool; returns how many tools got none (bounds, bad names)."""
    seen_names: set[str] = set()
    seen_ids: set[str] = set()
    budget = MAX_TOTAL_SCHEMA_BYTES
    omitted = 0
    for tool in tools:
        name = tool.get("name") if isinstance(tool, dict) else None
        if not isinstance(name, str):
            omitted += 1
            continue
        segment = tool_path_segment(name)
        if segment is None or name in seen_names or len(seen_names) >= MAX_TOOLS:
            omitted += 1
            continue
        seen_names.add(name)
        key = _unique(_identifier(name), seen_ids)
        schema_key = f"{key}Arguments"
        embedded, size = _embeddable(tool.get("inputSchema"), f"#/components/schemas/{schema_key}")
        if embedded is not None and size > budget:
            embedded = None
        if embedded is None:
            embedded = dict(
                _GENERIC_BODY, description="The tool's arguments; its inputSchema is in GET /tools."
            )
        else:
            budget -= size
        summary = tool.get("description")
        embedded.setdefault("description", _cut(summary) if isinstance(summary, str) else f"{name} arguments")
        schemas[schema_key] = embedded
        path = f"{base}/tools/{segment}/calls/{{toolCallId}}"
        params = _params("ToolCallId")
        put = _call_put(f"callTool_{key}", ref("schemas", schema_key), params)
        put["summary"] = _cut(f"Call the tool {name!r}")
        paths[path] = {"put": put, "get": _call_get(f"getToolCall_{key}", params)}
    return omitted


def _embeddable(schema: Any, at: str) -> tuple[dict[str, Any] | None, int]:
    """`schema` with its local `$ref`s re-pointed under `at`, and its size; None if not faithful."""
    if not isinstance(schema, dict):
        return None, 0
    try:
        text = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return None, 0
    encoded = text.encode("utf-8", "surrogatepass")
    size = len(encoded)
    if size > MAX_SCHEMA_BYTES or not _valid_2020_12(schema, hashlib.sha256(encoded).hexdigest()):
        return None, size
    copied = copy.deepcopy(schema)
    copied.pop("$schema", None)
    stack: list[tuple[Any, int]] = [(copied, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_SCHEMA_DEPTH:
            return None, size
        if isinstance(node, list):
            stack.extend((item, depth + 1) for item in node)
            continue
        if not isinstance(node, dict):
            continue
        if _SCOPE_KEYWORDS.intersection(k for k, v in node.items() if isinstance(v, str)):
            return None, size
        target = node.get("$ref")
        if isinstance(target, str):
            if not target.startswith("#") or not _resolves(schema, target[1:]):
                return None, size
            node["$ref"] = at + target[1:]
        stack.extend((v, depth + 1) for k, v in node.items() if k not in _DATA_KEYWORDS)
    return copied, size


def _resolves(schema: dict[str, Any], pointer: str) -> bool:
    """Whether the JSON Pointer `pointer` (a `$ref` fragment) names a part of `schema`."""
    if pointer == "":
        return True
    if not pointer.startswith("/"):
        return False  # a plain-name fragment (an anchor)
    node: Any = schema
    for raw in pointer[1:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return isinstance(node, dict | bool)


def _valid_2020_12(schema: dict[str, Any], digest: str) -> bool:
    """Whether `schema` (without `$schema`) is valid JSON Schema 2020-12; True when jsonschema is absent.

    The check costs ~1.6 ms per KiB of schema (jsonschema walks the meta-schema), so
    verdicts are remembered by the schema's digest: a document rebuilt after one tool
    changed checks that tool only.
    """
    with _VERDICTS_LOCK:  # documents are built in worker threads (reads.py)
        known = _VERDICTS.get(digest)
    if known is not None:
        return known
    try:
        jsonschema = importlib.import_module("jsonschema")
    except ImportError:
        return True
    bare = {k: v for k, v in schema.items() if k != "$schema"}
    try:
        jsonschema.Draft202012Validator.check_schema(bare)
        verdict = True
    except Exception:  # SchemaError, or RecursionError on a pathological schema
        verdict = False
    with _VERDICTS_LOCK:
        _VERDICTS[digest] = verdict
    return verdict


def _identifier(name: str) -> str:
    """A name usable as an operationId / component key (`^[A-Za-z0-9._-]+$`)."""
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", name)[:64].strip("_")
    return cleaned or "tool"


def _unique(candidate: str, taken: set[str]) -> str:
    key, n = candidate, 2
    while key in taken:
        key, n = f"{candidate}_{n}", n + 1
    taken.add(key)
    return key


def _cut(text: str) -> str:
    return text if len(text) <= MAX_DESCRIPTION_CHARS else text[: MAX_DESCRIPTION_CHARS - 1] + "…"
