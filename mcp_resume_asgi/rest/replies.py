"""What a REST operation answers, as a plain value: status, headers, body.

The operations of the face (`calls.py`, `reads.py`) return a `Reply` and never touch
ASGI; the middleware sends it (without its body for `HEAD`, with `Content-Length`). The
read routes answer a `Representation` (a body, its type and its ETag). Bodies are written
by `json_text.dumps`: standard JSON, whatever the value holds. Sans-IO, so each
operation's answer is checked as data.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from starlette.types import Send

from mcp_resume_asgi.rest.json_text import dumps
from mcp_resume_asgi.rest.problems import Problem
from mcp_resume_asgi.rest.resource import ETAG_HEX, etag_header, not_modified
from mcp_resume_asgi.wire.headers import Headers


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes = b""
    headers: Headers = field(default_factory=list)

    async def send(self, send: Send, *, head: bool = False) -> None:
        headers = list(self.headers)
        if self.status not in (204, 304):
            headers.append((b"content-length", str(len(self.body)).encode()))
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        body = b"" if head or self.status in (204, 304) else self.body
        await send({"type": "http.response.body", "body": body})


def json_reply(status: int, value: Any, headers: Headers | None = None) -> Reply:
    return Reply(status, dumps(value), [(b"content-type", b"application/json"), *(headers or [])])


def problem_reply(problem: Problem) -> Reply:
    return Reply(problem.status, problem.body(), problem.headers())


def tagged_reply(value: Any, etag: str, if_none_match: str | None, headers: Headers | None = None) -> Reply:
    """A 200 with `ETag`, or a 304 when the client's `If-None-Match` names that tag already."""
    tagged = [(b"etag", etag_header(etag)), *(headers or [])]
    if not_modified(if_none_match, etag):
        return Reply(304, b"", tagged)
    return json_reply(200, value, tagged)


@dataclass(frozen=True, slots=True)
class Representation:
    """A `200` body and its type, with the strong ETag they make together (computed once:
    a `304` for a large document costs no digest of it)."""

    body: bytes
    content_type: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ()
    etag: str = field(init=False)

    def __post_init__(self) -> None:
        digest = hashlib.sha256(self.content_type + b"\n" + self.body)
        object.__setattr__(self, "etag", digest.hexdigest()[:ETAG_HEX])


def json_representation(value: Any) -> Representation:
    """JSON, canonical (sorted keys), so every node gives the same bytes and ETag."""
    return Representation(dumps(value, sort_keys=True), b"application/json")
