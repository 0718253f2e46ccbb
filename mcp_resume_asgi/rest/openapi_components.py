"""The fixed parts of the REST face's OpenAPI document: shapes, parameters, headers, responses.

Everything here is the same for every app (the tool-call resource of SEP-1597, RFC 9457
problems, the MCP result shapes the read routes return, the conditional-request headers);
`openapi.py` adds what depends on the app: one PUT body per tool, from its `inputSchema`.

The MCP shapes are deliberately loose (`additionalProperties` allowed, few `required`):
the face passes the app's answers through as the app wrote them, under whatever
protocol revision it speaks, and a generated client must not reject a field a newer
revision adds.
"""

from __future__ import annotations

from typing import Any

#: The tool-call statuses of SEP-1597.
CALL_STATUSES = (
    "submitted",
    "running",
    "awaitingSamplingResult",
    "awaitingElicitationResult",
    "success",
    "failed",
    "canceled",
)


def ref(kind: str, name: str) -> dict[str, str]:
    """A reference to a component of this document."""
    return {"$ref": f"#/components/{kind}/{name}"}


def _obj(properties: dict[str, Any], required: tuple[str, ...] = (), **more: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties, **more}
    if required:
        schema["required"] = list(required)
    return schema


def _list_of(key: str, item: str) -> dict[str, Any]:
    """A list answer: the MCP list result, every page concatenated (no `nextCursor`)."""
    return _obj({key: {"type": "array", "items": ref("schemas", item)}}, (key,))


_ANY_OBJECT: dict[str, Any] = {"type": "object"}
_CONTENT_LIST: dict[str, Any] = {"type": "array", "items": ref("schemas", "ContentBlock")}

SCHEMAS: dict[str, Any] = {
    "ToolCall": _obj(
        {
            "toolname": {"type": "string", "description": "The tool, as named in the URL."},
            "id": {"type": "string", "description": "The tool call id, as chosen by the client in the URL."},
            "etag": {"type": "string", "description": "The strong entity tag of this state (If-Match)."},
            "status": {"type": "string", "enum": list(CALL_STATUSES)},
            "request": {"type": "object", "description": "The PUT body that started the call."},
            "samplingRequest": {
                "type": "object",
                "description": "`sampling/createMessage` params; present while awaitingSamplingResult.",
            },
            "elicitationRequest": {
                "type": "object",
                "description": "`elicitation/create` params; present while awaitingElicitationResult.",
            },
            "progress": ref("schemas", "Progress"),
            "result": ref("schemas", "CallToolResult"),
            "error": {"type": "object", "description": "Why the call failed; present when failed."},
        },
        ("toolname", "id", "etag", "status", "request"),
        description="A tool call as an HTTP resource (SEP-1597).",
    ),
    "ToolCallSummary": _obj(
        {
            "toolname": {"type": "string"},
            "id": {"type": "string"},
            "status": {"type": "string", "enum": list(CALL_STATUSES)},
            "createdAt": {"type": "string", "format": "date-time"},
        },
        ("toolname", "id", "status"),
    ),
    "ToolCallList": _obj(
        {
            "calls": {"type": "array", "items": ref("schemas", "ToolCallSummary")},
            "nextCursor": {"type": "string", "description": "Pass as `cursor` for the next page."},
        },
        ("calls",),
    ),
    "Progress": _obj(
        {"progress": {"type": "number"}, "total": {"type": "number"}, "message": {"type": "string"}},
        description="The latest progress the tool reported.",
    ),
    "CallToolResult": _obj(
        {
            "content": _CONTENT_LIST,
            "structuredContent": _ANY_OBJECT,
            "isError": {"type": "boolean"},
        }
    ),
    "ContentBlock": _obj(
        {"type": {"type": "string"}, "text": {"type": "string"}, "mimeType": {"type": "string"}},
        ("type",),
    ),
    "SamplingResult": _obj(
        {
            "role": {"type": "string", "enum": ["user", "assistant"]},
            "content": {},
            "model": {"type": "string"},
            "stopReason": {"type": "string"},
        },
        ("role", "content", "model"),
        description="The result of `sampling/createMessage`.",
    ),
    "ElicitationResult": _obj(
        {"action": {"type": "string", "enum": ["accept", "decline", "cancel"]}, "content": _ANY_OBJECT},
        ("action",),
        description="The result of `elicitation/create`.",
    ),
    "Problem": _obj(
        {
            "type": {"type": "string", "format": "uri-reference"},
            "title": {"type": "string"},
            "status": {"type": "integer", "minimum": 100, "maximum": 599},
            "detail": {"type": "string"},
            "instance": {"type": "string", "format": "uri-reference"},
            "errors": {
                "type": "array",
                "items": _obj(
                    {"pointer": {"type": "string"}, "detail": {"type": "string"}}, ("pointer", "detail")
                ),
                "description": "What is wrong with the body (a JSON Pointer into it, and why).",
            },
            "error": {"type": "object", "description": "The app's JSON-RPC error, when it refused."},
        },
        description="An RFC 9457 problem.",
    ),
    "Tool": _obj(
        {
            "name": {"type": "string"},
            "title": {"type": "string"},
            "description": {"type": "string"},
            "inputSchema": _ANY_OBJECT,
            "outputSchema": _ANY_OBJECT,
            "annotations": _ANY_OBJECT,
        },
        ("name", "inputSchema"),
    ),
    "ToolList": _list_of("tools", "Tool"),
    "Prompt": _obj(
        {
            "name": {"type": "string"},
            "title": {"type": "string"},
            "description": {"type": "string"},
            "arguments": {"type": "array", "items": _ANY_OBJECT},
        },
        ("name",),
    ),
    "PromptList": _list_of("prompts", "Prompt"),
    "PromptArguments": {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "description": "The prompt's arguments (`prompts/get` params.arguments).",
    },
    "GetPromptResult": _obj(
        {"description": {"type": "string"}, "messages": {"type": "array", "items": _ANY_OBJECT}},
        ("messages",),
    ),
    "Resource": _obj(
        {
            "uri": {"type": "string"},
            "name": {"type": "string"},
            "title": {"type": "string"},
            "description": {"type": "string"},
            "mimeType": {"type": "string"},
            "size": {"type": "integer"},
        },
        ("uri", "name"),
    ),
    "ResourceList": _list_of("resources", "Resource"),
    "ResourceTemplate": _obj(
        {
            "uriTemplate": {"type": "string"},
            "name": {"type": "string"},
            "description": {"type": "string"},
            "mimeType": {"type": "string"},
        },
        ("uriTemplate", "name"),
    ),
    "ResourceTemplateList": _list_of("resourceTemplates", "ResourceTemplate"),
    "ReadResourceResult": _obj(
        {"contents": {"type": "array", "items": _ANY_OBJECT}},
        ("contents",),
        description="Several contents: the `resources/read` result as the app gave it.",
    ),
    "CompleteRequest": _obj(
        {
            "ref": _obj({"type": {"type": "string"}, "name": {"type": "string"}, "uri": {"type": "string"}}),
            "argument": _obj({"name": {"type": "string"}, "value": {"type": "string"}}, ("name", "value")),
            "context": _ANY_OBJECT,
        },
        ("ref", "argument"),
        description="`completion/complete` params.",
    ),
    "CompleteResult": _obj(
        {
            "completion": _obj(
                {
                    "values": {"type": "array", "items": {"type": "string"}},
                    "total": {"type": "integer"},
                    "hasMore": {"type": "boolean"},
                },
                ("values",),
            )
        },
        ("completion",),
    ),
}


def _header(description: str, schema: dict[str, Any], *, required: bool = False) -> dict[str, Any]:
    return {"description": description, "required": required, "schema": schema}


HEADERS: dict[str, Any] = {
    "ETag": _header("Strong entity tag of the representation.", {"type": "string"}),
    "RetryAfter": _header("Seconds to wait before polling again.", {"type": "integer", "minimum": 0}),
}

PARAMETERS: dict[str, Any] = {
    "ToolName": {"name": "toolName", "in": "path", "required": True, "schema": {"type": "string"}},
    "ToolCallId": {
        "name": "toolCallId",
        "in": "path",
        "required": True,
        "description": "The client's id for the call.",
        "schema": {"type": "string"},
    },
    "PromptName": {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}},
    "ResourceName": {
        "name": "name",
        "in": "path",
        "required": True,
        "description": "The resource's name in the resources list, or its URI percent-encoded.",
        "schema": {"type": "string"},
    },
    "IdempotencyKey": {
        "name": "Idempotency-Key",
        "in": "header",
        "required": True,
        "description": "Retrying the PUT with the same key is safe: the call runs once.",
        "schema": {"type": "string"},
    },
    "IfMatch": {
        "name": "If-Match",
        "in": "header",
        "required": True,
        "description": "The etag of the state being advanced (428 without it, 412 when stale).",
        "schema": {"type": "string"},
    },
    "IfNoneMatch": {
        "name": "If-None-Match",
        "in": "header",
        "required": False,
        "description": "304 when the representation still has this etag.",
        "schema": {"type": "string"},
    },
    "Status": {
        "name": "status",
        "in": "query",
        "required": False,
        "description": "Only calls with this status.",
        "schema": {"type": "string", "enum": list(CALL_STATUSES)},
    },
    "CreatedAfter": {
        "name": "createdAfter",
        "in": "query",
        "required": False,
        "description": "Only calls created after this time (RFC 3339 date or date-time).",
        "schema": {"type": "string"},
    },
    "Cursor": {"name": "cursor", "in": "query", "required": False, "schema": {"type": "string"}},
    "Limit": {
        "name": "limit",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 1, "maximum": 1000},
    },
}

_PROBLEM_CONTENT = {"application/problem+json": {"schema": ref("schemas", "Problem")}}
_PROBLEMS = {
    "BadRequest": "The request is malformed, or the body does not match the schema (see `errors`).",
    "NotFound": "No such tool, call, prompt or resource (for this principal).",
    "Conflict": "The call id is taken by a PUT with another Idempotency-Key.",
    "PreconditionFailed": "If-Match is stale: GET the call for its current state.",
    "PreconditionRequired": "If-Match is required.",
    "PayloadTooLarge": "The body is larger than the face accepts.",
    "UnsupportedMediaType": "The body must be application/json.",
    "TooManyRequests": "The caller holds as many calls of this tool as the face allows.",
    "BadGateway": "The app failed, or its answer could not be read.",
    "Unavailable": "The store or the app is unavailable; retry after Retry-After.",
}

RESPONSES: dict[str, Any] = {
    name: {"description": text, "content": _PROBLEM_CONTENT} for name, text in _PROBLEMS.items()
}
RESPONSES["NotModified"] = {
    "description": "Not modified: the representation still has the If-None-Match etag.",
    "headers": {"ETag": ref("headers", "ETag")},
}
RESPONSES["Unavailable"]["headers"] = {"Retry-After": ref("headers", "RetryAfter")}


def problems(*names: str) -> dict[str, Any]:
    """The error responses of an operation, by status code."""
    codes = {
        "BadRequest": "400",
        "NotFound": "404",
        "Conflict": "409",
        "PreconditionFailed": "412",
        "PayloadTooLarge": "413",
        "UnsupportedMediaType": "415",
        "TooManyRequests": "429",
        "PreconditionRequired": "428",
        "BadGateway": "502",
        "Unavailable": "503",
    }
    return {codes[name]: ref("responses", name) for name in (*names, "BadGateway", "Unavailable")}


def components() -> dict[str, Any]:
    """The document's `components`, fresh (callers add the tools' argument schemas to it)."""
    return {
        "schemas": dict(SCHEMAS),
        "parameters": dict(PARAMETERS),
        "headers": dict(HEADERS),
        "responses": dict(RESPONSES),
    }
