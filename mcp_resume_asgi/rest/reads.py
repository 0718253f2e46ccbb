"""The REST face's read routes: prompts, resources, resource templates, completion, OpenAPI.

    GET  {base}/prompts               prompts/list, every page       {"prompts": [...]}
    POST {base}/prompts/{name}        prompts/get (body: arguments)  GetPromptResult
    GET  {base}/resources             resources/list, every page     {"resources": [...]}
    GET  {base}/resources/{name}      resources/read                 the content itself
    GET  {base}/resources-templates   resources/templates/list       {"resourceTemplates": [...]}
    POST {base}/complete              completion/complete (body: its params)
    GET  {base}/openapi.json          the face's OpenAPI document (openapi_documents.py)

Each is one or a few MCP requests sent through the wrapped stack by the face's `Wire`,
with the REST request's own credentials: the app judges who may read what, as it does
for its MCP clients.

Lists are every page concatenated, as SEP-1597 asks (a list torn across nodes
is worse than a long one), bounded by `max_pages` and `max_items`: an app whose list is
longer, or whose cursors go round in a loop, gets a 502 rather than a silently cut list.
Every `GET` answer carries a strong `ETag` (a digest of the exact body and its type, the
same on every node for the same content), and `If-None-Match` with it is a 304.

A resource is found by its `name` in the resources list; a name that is no resource's is
taken as the resource's URI (percent-encoded in the path). One content is served as
itself, as SEP-1597 wants: a `blob` as its raw bytes (not base64), a `text` as text,
each with its `mimeType` (`X-Content-Type-Options: nosniff` and a sandboxing CSP go with
it, so an HTML resource opened in a browser cannot script the face's origin). Several
contents, or none, are the `resources/read` result as JSON.

Failures are `application/problem+json` (problems.py): the app's "unknown prompt /
resource" is a 404, a malformed body a 400 (JSON as `json_text.parse_client` takes it:
no `NaN`, no lone surrogate), a body over `max_body_bytes` a 413.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
from typing import Any

from starlette.types import Receive, Scope, Send

from mcp_resume_asgi.http.bodies import BodyTooLarge, ClientGone, read_body
from mcp_resume_asgi.rest.json_text import NotAcceptedJSON, parse_client
from mcp_resume_asgi.rest.mcp_client import Wire
from mcp_resume_asgi.rest.openapi_documents import OpenApiDocuments
from mcp_resume_asgi.rest.problems import Problem, problem
from mcp_resume_asgi.rest.replies import Representation, json_representation
from mcp_resume_asgi.rest.resource import etag_header, not_modified
from mcp_resume_asgi.rest.routes import READ_OPS, Op, Route
from mcp_resume_asgi.rest.validation import pointer_of
from mcp_resume_asgi.wire.headers import Headers, header, media_types

logger = logging.getLogger(__name__)

#: The operations this module serves.
SERVED = READ_OPS | {Op.OPENAPI}
#: Most pages of one list fetched from the app.
MAX_PAGES = 100
#: Most items of one list.
MAX_ITEMS = 10_000
#: Largest body of a POST read route (prompt arguments, completion params).
MAX_BODY_BYTES = 1024 * 1024
_TEXT_DEFAULT = "text/plain; charset=utf-8"
_BLOB_DEFAULT = "application/octet-stream"
_TOKEN = r"[A-Za-z0-9!#$&^_.+-]+"
_MEDIA_TYPE = re.compile(rf'{_TOKEN}/{_TOKEN}(\s*;\s*{_TOKEN}=({_TOKEN}|"[^"\\\x00-\x1f\x7f]*"))*')
#: What the app shows depends on the caller's credentials: no shared cache may keep it.
_PRIVATE = (b"cache-control", b"private, no-cache")
_SAFE_CONTENT = ((b"x-content-type-options", b"nosniff"), (b"content-security-policy", b"sandbox"))
_LISTS: dict[Op, tuple[str, str, str]] = {
    Op.PROMPTS: ("prompts/list", "prompts", "the prompts list"),
    Op.RESOURCES: ("resources/list", "resources", "the resources list"),
    Op.TEMPLATES: ("resources/templates/list", "resourceTemplates", "the resource templates list"),
}
#: A failed listing that is the caller's answer, not a reason to try the name as a URI.
_FINAL_STATUSES = frozenset({401, 403, 407, 429, 503})


def contents_representation(result: dict[str, Any]) -> Representation | Problem:
    """A `resources/read` result as served: one content as itself, else the result as JSON."""
    contents = result.get("contents")
    if not isinstance(contents, list):
        return problem(502, "the app's resources/read answer has no contents list")
    if len(contents) != 1 or not isinstance(contents[0], dict):
        return json_representation(_without_result_type(result))
    content = contents[0]
    mime = content.get("mimeType")
    if isinstance(content.get("blob"), str):
        try:
            data = base64.b64decode(content["blob"], validate=True)
        except (binascii.Error, ValueError):
            return problem(502, "the app's resource blob is not valid base64")
        return Representation(data, media_type(mime, _BLOB_DEFAULT).encode(), _SAFE_CONTENT)
    if isinstance(content.get("text"), str):
        data = content["text"].encode("utf-8", "replace")
        kind = media_type(mime, _TEXT_DEFAULT)
        if kind.lower().startswith("text/") and "charset" not in kind.lower():
            kind += "; charset=utf-8"
        return Representation(data, kind.encode(), _SAFE_CONTENT)
    return json_representation(_without_result_type(result))


def media_type(value: Any, default: str) -> str:
    """The app's `mimeType` when it is a well-formed media type (it becomes a header), else `default`."""
    if isinstance(value, str) and len(value) <= 255 and _MEDIA_TYPE.fullmatch(value.strip()):
        return value.strip()
    return default


def _not_found(failed: Problem, detail: str) -> Problem:
    """A 404 for a name the app's list does not hold, with the app's own error kept."""
    kept = {k: v for k, v in failed.extra.items() if k == "error"}
    return problem(404, detail, **kept)


def _without_result_type(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k != "resultType"}


class ReadRoutes:
    """Serves the read routes of the face through `wire` (see the module docstring)."""

    def __init__(
        self,
        wire: Wire,
        *,
        base_path: str,
        max_pages: int = MAX_PAGES,
        max_items: int = MAX_ITEMS,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        if max_pages < 1 or max_items < 1 or max_body_bytes < 1:
            raise ValueError("the read routes' bounds must be positive")
        self.wire = wire
        self.base_path = base_path
        self.max_pages = max_pages
        self.max_items = max_items
        self.max_body_bytes = max_body_bytes
        self.documents = OpenApiDocuments(wire, self.list_all, base_path=base_path)

    async def serve(self, route: Route, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer `route` (one of `SERVED`) completely."""
        try:
            answer = await self._answer(route, scope, receive)
        except ClientGone:
            return
        if isinstance(answer, Problem):
            await _send(send, answer.status, answer.body(), answer.headers())
        else:
            await self._send_representation(scope, send, answer)

    async def list_all(
        self, scope: Scope, method: str, key: str, subject: str, digests: list[str] | None = None
    ) -> list[Any] | Problem:
        """Every item of an MCP list (`method`'s `key`), all pages, bounded; each page's
        `Answer.digest()` appended to `digests` when given."""
        items: list[Any] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(self.max_pages):
            answer = await self.wire.call(scope, method, {} if cursor is None else {"cursor": cursor})
            failed = answer.problem(subject)
            if failed is not None:
                return failed
            if digests is not None:
                digests.append(answer.digest())
            result = answer.result or {}
            page = result.get(key)
            if not isinstance(page, list):
                return problem(502, f"the app's {method} answer has no {key} list")
            items.extend(page)
            if len(items) > self.max_items:
                return problem(502, f"{subject} is longer than {self.max_items} items")
            cursor = result.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                return items
            if cursor in seen:
                return problem(502, f"the app's cursors for {subject} go round in a loop")
            seen.add(cursor)
        return problem(502, f"{subject} is longer than {self.max_pages} pages")

    # ------------------------------------------------------------------ the routes
    async def _answer(self, route: Route, scope: Scope, receive: Receive) -> Representation | Problem:
        if route.op in _LISTS:
            method, key, subject = _LISTS[route.op]
            items = await self.list_all(scope, method, key, subject)
            return items if isinstance(items, Problem) else json_representation({key: items})
        if route.op == Op.RESOURCE:
            return await self._read_resource(scope, route.name or "")
        if route.op == Op.PROMPT:
            return await self._get_prompt(scope, receive, route.name or "")
        if route.op == Op.COMPLETE:
            return await self._complete(scope, receive)
        if route.op == Op.OPENAPI:
            return await self._openapi(scope)
        return problem(404, "no such read route")

    async def _read_resource(self, scope: Scope, name: str) -> Representation | Problem:
        listed = await self.list_all(scope, "resources/list", "resources", "the resources list")
        if isinstance(listed, Problem) and listed.status in _FINAL_STATUSES:
            return listed
        uri, known = name, False  # not a listed resource's name: the path carries its URI
        for item in listed if isinstance(listed, list) else ():
            if isinstance(item, dict) and isinstance(item.get("uri"), str) and name == item.get("name"):
                uri, known = item["uri"], True
                break
        else:
            known = isinstance(listed, list) and any(
                isinstance(i, dict) and i.get("uri") == name for i in listed
            )
        answer = await self.wire.call(scope, "resources/read", {"uri": uri})
        failed = answer.problem(f"resource {name!r}")
        if failed is None:
            return contents_representation(answer.result or {})
        if not known and isinstance(listed, list) and failed.status not in _FINAL_STATUSES:
            # Not listed, and the app would not read it as a URI (a template's or not).
            return _not_found(failed, f"no resource is named {name!r} or has that URI")
        return failed

    async def _get_prompt(self, scope: Scope, receive: Receive, name: str) -> Representation | Problem:
        arguments = await self._json_body(scope, receive, empty={})
        if isinstance(arguments, Problem):
            return arguments
        if not isinstance(arguments, dict):
            return problem(400, "the body must be a JSON object: the prompt's arguments")
        wrong = [
            {"pointer": "#" + pointer_of([k]), "detail": "must be a string"}
            for k, v in arguments.items()
            if not isinstance(v, str)
        ]
        if wrong:
            return problem(400, "a prompt's arguments are strings", errors=wrong[:16])
        answer = await self.wire.call(scope, "prompts/get", {"name": name, "arguments": arguments})
        failed = answer.problem(f"prompt {name!r}")
        if failed is None:
            return json_representation(_without_result_type(answer.result or {}))
        if failed.status in _FINAL_STATUSES or failed.status == 404:
            return failed
        # Some apps word an unknown prompt, or a missing argument, as an internal error:
        # their list tells which it was.
        listed = await self.list_all(scope, "prompts/list", "prompts", "the prompts list")
        if not isinstance(listed, list):
            return failed
        prompt = next((p for p in listed if isinstance(p, dict) and p.get("name") == name), None)
        if prompt is None:
            return _not_found(failed, f"the app has no prompt named {name!r}")
        declared = prompt.get("arguments")
        missing = [
            {"pointer": "#" + pointer_of([a["name"]]), "detail": "is required"}
            for a in (declared if isinstance(declared, list) else [])
            if isinstance(a, dict) and a.get("required") is True and isinstance(a.get("name"), str)
            if a["name"] not in arguments
        ]
        if missing:
            return problem(400, f"prompt {name!r} needs more arguments", errors=missing[:16], **failed.extra)
        return failed

    async def _complete(self, scope: Scope, receive: Receive) -> Representation | Problem:
        params = await self._json_body(scope, receive, empty=None)
        if isinstance(params, Problem):
            return params
        if not isinstance(params, dict):
            return problem(400, "the body must be a JSON object: the completion/complete params")
        wrong = [
            {"pointer": f"#/{key}", "detail": "must be an object"}
            for key in ("ref", "argument")
            if not isinstance(params.get(key), dict)
        ]
        if wrong:
            return problem(400, "a completion needs `ref` and `argument` objects", errors=wrong)
        answer = await self.wire.call(scope, "completion/complete", params)
        failed = answer.problem("the completion")
        return (
            failed if failed is not None else json_representation(_without_result_type(answer.result or {}))
        )

    async def _openapi(self, scope: Scope) -> Representation | Problem:
        return await self.documents.document(scope)

    # ------------------------------------------------------------------ I/O helpers
    async def _json_body(self, scope: Scope, receive: Receive, *, empty: Any) -> Any:
        """The request's JSON body (`empty` for none), or the problem with it."""
        content_type = header(scope, b"content-type")
        if content_type is not None and "application/json" not in media_types(content_type):
            return problem(415, "the body must be application/json")
        try:
            raw = await read_body(receive, self.max_body_bytes)
        except BodyTooLarge:
            return problem(413, f"the body is larger than {self.max_body_bytes} bytes")
        if not raw.strip():
            return empty if empty is not None else problem(400, "the body is empty")
        try:
            return parse_client(raw)
        except NotAcceptedJSON as refused:
            return problem(400, refused.detail)

    async def _send_representation(self, scope: Scope, send: Send, answer: Representation) -> None:
        etag = answer.etag
        headers: Headers = [(b"etag", etag_header(etag)), _PRIVATE, *answer.headers]
        reading = scope.get("method") in ("GET", "HEAD")
        if reading and not_modified(header(scope, b"if-none-match"), etag):
            await _send(send, 304, b"", headers)
            return
        headers.append((b"content-type", answer.content_type))
        await _send(send, 200, answer.body, headers, head=scope.get("method") == "HEAD")


async def _send(send: Send, status: int, body: bytes, headers: Headers, *, head: bool = False) -> None:
    out = list(headers)
    if status != 304:
        out.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": out})
    await send({"type": "http.response.body", "body": b"" if head or status == 304 else body})
