"""Resumable requests (SEP-975) on the client side: the tokens a server hands out, and what they are for.

Why apart from the stream that receives them: a server that saw
``capabilities.resumableRequests`` at ``initialize`` (``declarations.py``) may
send ``notifications/requests/resumePolicy`` with a ``resumeToken`` for a
request. The token outlives that request's stream: the stream resumes with
``requests/resume`` instead of a GET (the server may then drop what
``Last-Event-ID`` confirms), and :meth:`ResumableTransport.request_status` asks
``requests/getStatus`` about the request without draining it. What a token
message means, what the two requests look like and how the status answer is
read are plain data, here; :class:`TokenBook` is the bounded memory of tokens.
"""

from __future__ import annotations

import json
import uuid
from collections import OrderedDict
from typing import Any, Final

import httpx

from .messages import IdKey, id_key, loads

RESUME_POLICY: Final = "notifications/requests/resumePolicy"
MAX_REMEMBERED_TOKENS: Final = 1024
#: Longer tokens are ignored: they are stored and sent back.
MAX_TOKEN_LENGTH: Final = 4096

Headers = list[tuple[bytes, bytes]]


def policy_token(message: dict[str, Any], request_key: IdKey | None) -> str | None:
    """The ``resumeToken`` a resume-policy notification gives the request ``request_key``; None otherwise."""
    params = message.get("params")
    if message.get("method") != RESUME_POLICY or not isinstance(params, dict):
        return None
    token = params.get("resumeToken")
    if (
        id_key(params.get("requestId")) == request_key
        and isinstance(token, str)
        and len(token) <= MAX_TOKEN_LENGTH
    ):
        return token
    return None


def is_resume_policy(message: dict[str, Any]) -> bool:
    """A resume-policy notification (for any request): nothing for the application's parser to wait on."""
    return message.get("method") == RESUME_POLICY and isinstance(message.get("params"), dict)


def resume_body(request_id: str | int, token: str) -> bytes:
    """``requests/resume`` of the request ``request_id``: sent under that request's own id."""
    body = {"jsonrpc": "2.0", "id": request_id, "method": "requests/resume", "params": {"resumeToken": token}}
    return json.dumps(body).encode()


class TokenBook:
    """The latest token per (endpoint, session, request id); the oldest forgotten beyond ``capacity``.

    With each token, the headers of the request it belongs to (session id, protocol
    version, authorization), which a status request must carry to be admitted.
    """

    def __init__(self, capacity: int = MAX_REMEMBERED_TOKENS) -> None:
        self.capacity = capacity
        self._tokens: OrderedDict[tuple[str, str | None, IdKey | None], tuple[str, Headers]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._tokens)

    def remember(
        self, url: httpx.URL, session_id: str | None, request_id: str | int, token: str, headers: Headers
    ) -> None:
        key = (str(url), session_id, id_key(request_id))
        self._tokens[key] = (token, headers)
        self._tokens.move_to_end(key)
        while len(self._tokens) > self.capacity:
            self._tokens.popitem(last=False)

    def status_request(
        self, url: str | httpx.URL, request_id: str | int, session_id: str | None
    ) -> httpx.Request:
        """The ``requests/getStatus`` POST for a remembered request; LookupError without a token."""
        entry = self._tokens.get((str(httpx.URL(url)), session_id, id_key(request_id)))
        if entry is None:
            raise LookupError(f"no resume token is known for request {request_id!r}")
        token, headers = entry
        body = {
            "jsonrpc": "2.0",
            "id": f"status-{uuid.uuid4().hex[:12]}",
            "method": "requests/getStatus",
            "params": {"requestId": request_id, "resumeToken": token},
        }
        return httpx.Request(
            "POST",
            url,
            headers=[
                *headers,
                (b"content-type", b"application/json"),
                (b"accept", b"application/json, text/event-stream"),
            ],
            content=json.dumps(body).encode(),
        )


def status_result(status_code: int, raw: bytes) -> dict[str, Any]:
    """The result of a ``requests/getStatus`` answer; RuntimeError with the server's message otherwise."""
    try:
        answer = loads(raw)
    except ValueError as exc:
        raise RuntimeError(f"requests/getStatus: HTTP {status_code}, not JSON") from exc
    if isinstance(answer, dict) and isinstance(answer.get("result"), dict):
        result: dict[str, Any] = answer["result"]
        return result
    error = answer.get("error") if isinstance(answer, dict) else None
    message = error.get("message") if isinstance(error, dict) else f"HTTP {status_code}"
    raise RuntimeError(f"requests/getStatus refused: {message}")
