"""The REST face's routes (SEP-1597): an HTTP method and path -> which operation, on what.

Sans-IO: `match(base, method, raw_path)` is a plain function of three strings, tested
without an event loop. Everything lives under the app's MCP path (`/mcp` by default),
beside the Streamable HTTP endpoint itself, which is never matched here:

    GET  {base}/tools                              tools/list
    PUT  {base}/tools/{tool}/calls/{id}            tools/call (a new call, or its retry)
    GET  {base}/tools/{tool}/calls/{id}            the call's current state
    POST {base}/tools/{tool}/calls/{id}/advance    a sampling or elicitation result
    POST {base}/tools/{tool}/calls/{id}/cancel     cancel it
    GET  {base}/tools/{tool}/calls                 the caller's calls of the tool
    GET  {base}/prompts                            prompts/list
    POST {base}/prompts/{name}                     prompts/get (the body: its arguments)
    GET  {base}/resources                          resources/list
    GET  {base}/resources/{uri}                    resources/read
    GET  {base}/resources-templates                resources/templates/list
    POST {base}/complete                           completion/complete
    GET  {base}/openapi.json                       the face's OpenAPI document

A path that is none of these is not ours (None: it goes to the app as it came). A path
that is one of these with another method is a 405 naming the allowed ones, and a
segment that cannot name anything (bad percent-encoding, control characters, too long)
a 400: the path's segments are split on the *raw* path, so a tool name or call id may
carry an encoded `/`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from urllib.parse import unquote

#: Longest tool or prompt name accepted in a path (MCP's tool names are at most 128).
MAX_NAME = 256
#: Longest call id (the SEP lets clients choose friendly ids: an email, a title...).
MAX_CALL_ID = 256
#: Longest resource URI accepted in a path.
MAX_URI = 4096


class Op(enum.StrEnum):
    """What a REST request asks for."""

    TOOLS = "tools/list"
    CALL_PUT = "call/put"
    CALL_GET = "call/get"
    CALL_ADVANCE = "call/advance"
    CALL_CANCEL = "call/cancel"
    CALLS = "calls/list"
    PROMPTS = "prompts/list"
    PROMPT = "prompts/get"
    RESOURCES = "resources/list"
    RESOURCE = "resources/read"
    TEMPLATES = "resources/templates/list"
    COMPLETE = "completion/complete"
    OPENAPI = "openapi"


#: Each operation's path template (under the MCP path: `http.route`) and the MCP method it
#: stands for (`mcp.method.name` of its span; the OpenAPI document's: its own name).
TEMPLATES: dict[Op, tuple[str, str]] = {
    Op.TOOLS: ("/tools", "tools/list"),
    Op.CALL_PUT: ("/tools/{tool}/calls/{id}", "tools/call"),
    Op.CALL_GET: ("/tools/{tool}/calls/{id}", "tasks/get"),
    Op.CALL_ADVANCE: ("/tools/{tool}/calls/{id}/advance", "tasks/update"),
    Op.CALL_CANCEL: ("/tools/{tool}/calls/{id}/cancel", "tasks/cancel"),
    Op.CALLS: ("/tools/{tool}/calls", "tasks/list"),
    Op.PROMPTS: ("/prompts", "prompts/list"),
    Op.PROMPT: ("/prompts/{name}", "prompts/get"),
    Op.RESOURCES: ("/resources", "resources/list"),
    Op.RESOURCE: ("/resources/{uri}", "resources/read"),
    Op.TEMPLATES: ("/resources-templates", "resources/templates/list"),
    Op.COMPLETE: ("/complete", "completion/complete"),
    Op.OPENAPI: ("/openapi.json", "openapi"),
}

#: Operations on one tool call (they carry `tool` and `call_id`).
CALL_OPS = frozenset({Op.CALL_PUT, Op.CALL_GET, Op.CALL_ADVANCE, Op.CALL_CANCEL})
#: Operations another module serves (`reads.py`, `openapi.py`), when it is there.
READ_OPS = frozenset({Op.PROMPTS, Op.PROMPT, Op.RESOURCES, Op.RESOURCE, Op.TEMPLATES, Op.COMPLETE})


@dataclass(frozen=True, slots=True)
class Route:
    """A matched REST request: the operation and the names its path carries (decoded)."""

    op: Op
    tool: str | None = None
    call_id: str | None = None
    name: str | None = None
    """A prompt's name, or a resource's URI."""


@dataclass(frozen=True, slots=True)
class BadRoute:
    """A path of the face that cannot be served as asked: 400 (bad segment) or 405 (method)."""

    status: int
    detail: str
    allow: tuple[str, ...] = ()


def match(base: str, method: str, raw_path: str) -> Route | BadRoute | None:
    """The route of `method raw_path` under the MCP path `base`, or None when it is not the face's."""
    base = base.rstrip("/")
    if not raw_path.startswith(base + "/"):
        return None
    rest = raw_path[len(base) + 1 :]
    if not rest:
        return None  # `{base}/` is the MCP endpoint itself
    segments = rest.split("/")
    if segments[-1] == "" and len(segments) > 1:
        segments.pop()  # a trailing slash is the same resource
    head = segments[0]
    if head == "tools":
        return _tools(method, segments[1:])
    if head == "prompts":
        if len(segments) == 1:
            return _only(method, "GET", Route(Op.PROMPTS))
        name = _segment("/".join(segments[1:]), MAX_NAME, "prompt name")
        return name if isinstance(name, BadRoute) else _only(method, "POST", Route(Op.PROMPT, name=name))
    if head == "resources":
        if len(segments) == 1:
            return _only(method, "GET", Route(Op.RESOURCES))
        uri = _segment("/".join(segments[1:]), MAX_URI, "resource URI")
        return uri if isinstance(uri, BadRoute) else _only(method, "GET", Route(Op.RESOURCE, name=uri))
    if len(segments) == 1 and head == "resources-templates":
        return _only(method, "GET", Route(Op.TEMPLATES))
    if len(segments) == 1 and head == "complete":
        return _only(method, "POST", Route(Op.COMPLETE))
    if len(segments) == 1 and head == "openapi.json":
        return _only(method, "GET", Route(Op.OPENAPI))
    return None


def _tools(method: str, segments: list[str]) -> Route | BadRoute | None:
    if not segments:
        return _only(method, "GET", Route(Op.TOOLS))
    if len(segments) < 2 or segments[1] != "calls" or len(segments) > 4:
        return None
    tool = _segment(segments[0], MAX_NAME, "tool name")
    if isinstance(tool, BadRoute):
        return tool
    if len(segments) == 2:
        return _only(method, "GET", Route(Op.CALLS, tool=tool))
    call_id = _segment(segments[2], MAX_CALL_ID, "call id")
    if isinstance(call_id, BadRoute):
        return call_id
    if len(segments) == 3:
        if method == "PUT":
            return Route(Op.CALL_PUT, tool=tool, call_id=call_id)
        if method in ("GET", "HEAD"):
            return Route(Op.CALL_GET, tool=tool, call_id=call_id)
        return BadRoute(405, f"{method} is not allowed on a tool call", ("GET", "PUT"))
    action = {"advance": Op.CALL_ADVANCE, "cancel": Op.CALL_CANCEL}.get(segments[3])
    if action is None:
        return None
    return _only(method, "POST", Route(action, tool=tool, call_id=call_id))


def _only(method: str, allowed: str, route: Route) -> Route | BadRoute:
    if method == allowed or (allowed == "GET" and method == "HEAD"):
        return route
    return BadRoute(405, f"{method} is not allowed here", (allowed,))


def _segment(raw: str, limit: int, what: str) -> str | BadRoute:
    """A path segment, percent-decoded, when it can name something."""
    try:
        value = unquote(raw, errors="strict")
    except UnicodeDecodeError:
        return BadRoute(400, f"the {what} is not valid UTF-8 once percent-decoded")
    if not value:
        return BadRoute(400, f"the {what} is empty")
    if len(value) > limit:
        return BadRoute(400, f"the {what} is longer than {limit} characters")
    if not value.isprintable():
        return BadRoute(400, f"the {what} contains control characters")
    return value
