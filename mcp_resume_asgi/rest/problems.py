"""Every failure of the REST face as an RFC 9457 problem (`application/problem+json`).

Sans-IO: a `Problem` is a status, a readable `detail` and optional extension members;
`body()` is its JSON and `headers()` what goes with it. Failures come from three places,
each with its own mapping here:

* the HTTP request itself (no `Idempotency-Key`, a body that is not a JSON object,
  stale `If-Match`...): `problem(status, detail)`;
* the app's JSON-RPC error for the MCP request the face made (`from_jsonrpc`):
  `-32601` (the app does not offer the method) and "unknown"/"not found" `-32602` or
  `-32002` are 404, other invalid requests 400, an internal error of the app 502 (the
  face is a gateway to the app: its failure is not the face's 500). The JSON-RPC error
  itself is kept in the problem's `error` member;
* the app's HTTP refusal (`from_http`): an authentication failure keeps the app's own
  status and challenge (`WWW-Authenticate`), a store outage its `Retry-After`.
"""

from __future__ import annotations

import http
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mcp_resume_asgi.rest.json_text import dumps
from mcp_resume_asgi.wire.headers import Headers

CONTENT_TYPE = b"application/problem+json"
#: Statuses and headers of the app's own refusals that are passed on as they are: the
#: caller's credentials, rate or `Host` (421), the size of its headers (431), the app's outage.
_PASSED_ON_STATUSES = frozenset({401, 403, 421, 429, 431, 503})
_PASSED_ON_HEADERS = frozenset({b"www-authenticate", b"retry-after"})
#: Longest `detail` taken from the app's words (a JSON-RPC message, an HTTP body).
MAX_DETAIL = 500

METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INVALID_REQUEST = -32600
PARSE_ERROR = -32700
INTERNAL_ERROR = -32603
#: MCP's "resource not found".
RESOURCE_NOT_FOUND = -32002
_NOT_FOUND_WORDS = ("unknown", "not found", "no such", "does not exist")


@dataclass(frozen=True, slots=True)
class Problem:
    """An HTTP error answered as `application/problem+json`."""

    status: int
    detail: str
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Extension members (RFC 9457 section 3.2): `errors`, `error`, ..."""
    extra_headers: tuple[tuple[bytes, bytes], ...] = ()

    @property
    def title(self) -> str:
        try:
            return http.HTTPStatus(self.status).phrase
        except ValueError:
            return "Error"

    def as_json(self) -> dict[str, Any]:
        return {
            "type": "about:blank",
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
        } | dict(self.extra)

    def body(self) -> bytes:
        return dumps(self.as_json())

    def headers(self) -> Headers:
        return [(b"content-type", CONTENT_TYPE), *self.extra_headers]


def problem(
    status: int,
    detail: str,
    *,
    headers: Iterable[tuple[bytes, bytes]] = (),
    **extra: Any,
) -> Problem:
    return Problem(status, detail, extra, tuple(headers))


def method_not_allowed(detail: str, allow: Iterable[str]) -> Problem:
    return problem(405, detail, headers=[(b"allow", ", ".join(allow).encode())])


def invalid_arguments(reasons: list[dict[str, str]]) -> Problem:
    """A 400 listing what is wrong with a tool call's arguments (`errors`: pointer and detail)."""
    count = len(reasons)
    detail = "the arguments do not match the tool's input schema"
    if count == 1:
        detail += f": {reasons[0].get('detail', '')}"
    return problem(400, detail[:MAX_DETAIL], errors=reasons)


def from_jsonrpc(error: Any, subject: str) -> Problem:
    """The problem for the app's JSON-RPC `error` about `subject` ("tool 'x'", "prompt 'y'")."""
    if not isinstance(error, dict):
        return problem(502, f"the app's answer about {subject} could not be read")
    code = error.get("code")
    message = error.get("message")
    text = message[:MAX_DETAIL] if isinstance(message, str) else ""
    kept = {"error": error}
    if code == METHOD_NOT_FOUND:
        return problem(404, f"the app does not serve {subject}" + (f": {text}" if text else ""), **kept)
    if code == RESOURCE_NOT_FOUND or (
        code == INVALID_PARAMS and any(word in text.lower() for word in _NOT_FOUND_WORDS)
    ):
        return problem(404, text or f"{subject} was not found", **kept)
    data = error.get("data")
    if isinstance(data, dict) and "maxTasks" in data:  # the Tasks layer's bound on a caller's tasks
        return problem(429, text or "the caller holds too many calls", **kept)
    if code == INTERNAL_ERROR:
        return problem(502, f"the app failed on {subject}" + (f": {text}" if text else ""), **kept)
    return problem(400, text or f"the app refused the request for {subject}", **kept)


def from_http(status: int, headers: Headers, body: bytes, subject: str) -> Problem:
    """The problem for the app's HTTP refusal of the MCP request the face made for `subject`.

    An authentication or rate-limit refusal and a store outage keep the app's status and
    the headers that tell a client what to do (its challenge, when to retry); anything
    else is a 502 - the face could not get an answer from the app.
    """
    passed = tuple((k.lower(), v) for k, v in headers if k.lower() in _PASSED_ON_HEADERS)
    detail = _text_of(body)
    if status in _PASSED_ON_STATUSES:
        return problem(status, detail or f"the app refused the request for {subject}", headers=passed)
    if status == 404:
        return problem(404, detail or f"{subject} was not found")
    if status == 413:  # the app takes no request that large: the client's to shorten
        return problem(413, detail or f"the request for {subject} is larger than the app takes")
    return problem(
        502,
        f"the app answered HTTP {status} for {subject}" + (f": {detail}" if detail else ""),
        headers=passed,
    )


def _text_of(body: bytes) -> str:
    """What an app's error body says: a JSON-RPC error's message, else its text (bounded)."""
    if not body:
        return ""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        value = None
    if isinstance(value, dict):
        error = value.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])[:MAX_DETAIL]
        for key in ("detail", "message", "error"):
            if isinstance(value.get(key), str):
                return str(value[key])[:MAX_DETAIL]
        return ""
    text = body[:MAX_DETAIL].decode("utf-8", "replace").strip()
    return text if text.isprintable() else ""
