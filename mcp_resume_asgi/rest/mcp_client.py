"""The REST face's MCP client: JSON-RPC requests sent through the wrapped stack, in process.

Every REST request becomes one (or a few) MCP requests, sent as internal ASGI calls to
the stack the face wraps (Tasks layer -> stream engine -> app), with the REST request's
own scope and credentials: the app's auth, the principal a task is bound to, the
relays between nodes are exactly what an MCP client would get. The app changes not a
line and is reached the way it speaks:

* **2026-07-28** (single exchange) when it answers `server/discover` at that revision:
  every request stands alone, with the revision and the client's capabilities in its
  `_meta` and the `Mcp-Method` / `Mcp-Name` routing headers;
* else a **2025-11-25 session** the face opens (`initialize`, `notifications/initialized`)
  and keeps per caller (principal and credentials) in a bounded cache, opened again when
  the app no longer knows it (404). Everything the face sends the app for that caller goes
  in it - its probes of who calls too (`session_for`): a stateful app such as mcp 1.x
  opens a session for every request that names none, and keeps it.

The face declares the Tasks extension (so a `tools/call` may become a task), elicitation
and sampling (a REST client answers those with `advance`). Which era the app speaks is
learnt once per `Wire`; a refusal of the discovery itself (401, 403, ...) is not an answer
about the era and is returned to the caller instead.

API, for the modules of the face (`calls.py`, `reads.py`):

    answer = await wire.call(scope, "tools/list", {})
    answer.result / answer.error / answer.problem("tool 'x'")

`call` returns when the answer has arrived. The ASGI call that carries it may go on (a
`tools/call` that became a task runs its tool in it; a `tasks/update` its next round):
pass `background=` a task group that outlives the answer, else `call` waits for the end.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
from cachetools import TTLCache
from starlette.types import ASGIApp, Message, Scope

from mcp_resume_asgi.rest.json_text import parse_app
from mcp_resume_asgi.rest.problems import Problem, from_http, from_jsonrpc
from mcp_resume_asgi.tasks.capability import CLIENT_CAPABILITIES_META
from mcp_resume_asgi.tasks.record import EXTENSION
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.headers import Headers, encode_header_value, header
from mcp_resume_asgi.wire.scope_keys import REST_SCOPE_KEY
from mcp_resume_asgi.wire.sse import SSEError, SSEParser

logger = logging.getLogger(__name__)

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
#: What the face tells the app it can do.
CLIENT_CAPABILITIES: dict[str, Any] = {"elicitation": {}, "sampling": {}, "extensions": {EXTENSION: {}}}
CLIENT_INFO = {"name": "mcp-resume-asgi-rest", "version": "1"}
#: Largest answer read from the app (a tool result, a resource's contents).
MAX_ANSWER_BYTES = 16 * 1024 * 1024
#: Largest request sent to the app, unless told (what a stock SDK server and the stream engine take).
MAX_REQUEST_BYTES = 4 * 1024 * 1024
#: Where a 2026-07-28 result names the server.
SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"
#: Headers of the REST request that describe it, not the MCP request made for it (with
#: every `Mcp-*` header: the face sets `Mcp-Name`, `Mcp-Param-*`... from the request itself,
#: and a client's own would contradict them).
_NOT_FORWARDED = {
    b"content-length",
    b"content-type",
    b"accept",
    b"transfer-encoding",
    b"expect",
    b"idempotency-key",
    b"if-match",
    b"if-none-match",
    b"last-event-id",
    b"mcp-session-id",
    b"mcp-protocol-version",
    b"mcp-method",
    b"mcp-name",
}
#: Where each method carries the name the `Mcp-Name` header repeats (2026-07-28).
_NAME_PARAM = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}
#: Statuses of a refused discovery that say nothing about the era (the caller's problem).
_NOT_AN_ANSWER = frozenset({401, 403, 407, 429, 503})


@dataclass(frozen=True, slots=True)
class Answer:
    """What the app answered one MCP request: the HTTP reply and the JSON-RPC response in it."""

    status: int
    headers: Headers
    message: dict[str, Any] | None
    """The JSON-RPC response to the request (or a JSON-RPC error the app answered instead)."""
    body: bytes = b""
    """The reply's body when it held no JSON-RPC message (bounded), for the problem's detail."""
    raw: bytes = b""
    """The JSON-RPC response as the app wrote it."""
    request_id: Any = None

    def digest(self) -> str:
        """A digest of the response as the app wrote it, less the request's id (a fresh one
        each time): the same answer again has the same digest, without reading it."""
        token = str(self.request_id).encode() if isinstance(self.request_id, str) else b""
        raw = self.raw.replace(token, b"") if token else self.raw
        return hashlib.sha256(raw).hexdigest()

    @property
    def result(self) -> dict[str, Any] | None:
        """The result, when the request succeeded."""
        if self.message is None or "error" in self.message:
            return None
        result = self.message.get("result")
        return result if isinstance(result, dict) else None

    @property
    def error(self) -> dict[str, Any] | None:
        error = self.message.get("error") if self.message is not None else None
        return error if isinstance(error, dict) else None

    def problem(self, subject: str) -> Problem | None:
        """None when the request succeeded; else how the face answers the failure."""
        if self.result is not None:
            return None
        if self.error is not None and (self.status < 300 or self.status == 400):
            return from_jsonrpc(self.error, subject)  # (2026-07-28 answers some errors with a 400)
        body = self.body or (p.dumps(self.message) if self.message is not None else b"")
        return from_http(self.status, self.headers, body, subject)


class Wire:
    """Sends MCP requests to `app` (the wrapped stack) on behalf of REST requests."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        path: str,
        principal: Callable[[Scope], str | None] | None = None,
        max_sessions: int = 1024,
        session_ttl_s: float = 3600.0,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
        max_request_bytes: int = MAX_REQUEST_BYTES,
    ) -> None:
        self.app = app
        self.path = path
        self.principal = principal
        self.max_answer_bytes = max_answer_bytes
        self.max_request_bytes = max_request_bytes
        self.era: str | None = None
        """`MODERN` or `LEGACY` once learnt."""
        self.server_info: dict[str, Any] | None = None
        """The app's `serverInfo` (name, version...) once it said it."""
        self._sessions: TTLCache[str, str] = TTLCache(maxsize=max_sessions, ttl=session_ttl_s)
        self._opening: dict[str, anyio.Lock] = {}
        """Per caller while its session is being opened: its concurrent first requests share one."""
        self._learning = anyio.Lock()

    # ------------------------------------------------------------------ the one entry point
    async def call(
        self,
        scope: Scope,
        method: str,
        params: dict[str, Any],
        *,
        background: anyio.abc.TaskGroup | None = None,
        headers: Iterable[tuple[bytes, bytes]] = (),
    ) -> Answer:
        """Send `method(params)` as the REST request of `scope` would, and return the answer."""
        if self.era is None:
            refused = await self._learn_era(scope)
            if refused is not None:
                return refused
        if self.era == MODERN:
            return await self._modern(scope, method, params, background, list(headers))
        return await self._in_session(scope, method, params, background, list(headers))

    def oversized(self, method: str, params: dict[str, Any]) -> Problem | None:
        """The 413 for a request larger than the app takes (None: it fits), said before the
        face writes anything for it (`call` refuses it too, unsent)."""
        message = _request(method, params) if self.era == LEGACY else _modern_request(method, params)
        body = _encoded(message)
        if body is None or len(body) <= self.max_request_bytes:
            return None
        return from_http(413, [], self._too_large_text(len(body)).encode(), method)

    def _too_large_text(self, size: int) -> str:
        return f"the MCP request would be {size} bytes; the app takes at most {self.max_request_bytes}"

    # ------------------------------------------------------------------ eras
    async def _learn_era(self, scope: Scope) -> Answer | None:
        async with self._learning:
            if self.era is not None:
                return None
            answer = await self._modern(scope, "server/discover", {}, None, [])
            if answer.result is not None:
                self.server_info = server_info_of(answer.result)
                versions = answer.result.get("supportedVersions")
                modern = not isinstance(versions, list) or MODERN in versions
                self.era = MODERN if modern else LEGACY
            elif answer.status in _NOT_AN_ANSWER:
                return answer
            else:
                self.era = LEGACY
            logger.info("REST face: the app speaks %s", self.era)
            return None

    async def _modern(
        self,
        scope: Scope,
        method: str,
        params: dict[str, Any],
        background: anyio.abc.TaskGroup | None,
        headers: Headers,
    ) -> Answer:
        message = _modern_request(method, params)
        extra = [(b"mcp-protocol-version", MODERN.encode()), (b"mcp-method", method.encode())]
        name = params.get(_NAME_PARAM.get(method, ""))
        if isinstance(name, str):
            extra.append((b"mcp-name", encode_header_value(name).encode()))
        return await self._exchange(scope, message, extra + headers, background)

    async def _in_session(
        self,
        scope: Scope,
        method: str,
        params: dict[str, Any],
        background: anyio.abc.TaskGroup | None,
        headers: Headers,
    ) -> Answer:
        for attempt in range(2):
            session_id = await self._session(scope)
            if isinstance(session_id, Answer):
                return session_id
            extra = [(b"mcp-protocol-version", LEGACY.encode()), (b"mcp-session-id", session_id.encode())]
            answer = await self._exchange(scope, _request(method, params), extra + headers, background)
            if answer.status != 404 or attempt:
                return answer
            self.forget(scope, session_id)
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ the caller's session
    async def session_for(self, scope: Scope) -> str | None:
        """The caller's 2025-11-25 session (opened if need be), for what the face sends the app
        itself (its probe of who calls); None when the app speaks 2026-07-28 (no sessions) or
        does not open one for this caller (then the request without it gets the app's refusal)."""
        if self.era is None and await self._learn_era(scope) is not None:
            return None
        if self.era != LEGACY:
            return None
        session_id = await self._session(scope)
        return None if isinstance(session_id, Answer) else session_id

    def forget(self, scope: Scope, session_id: str) -> None:
        """The app no longer knows `session_id` (it answered 404): the caller's next request opens another."""
        key = self.caller_key(scope)
        if self._sessions.get(key) == session_id:
            logger.debug("REST face: the app forgot session %s; opening another", session_id)
            del self._sessions[key]

    async def _session(self, scope: Scope) -> str | Answer:
        """The caller's session, opened once however many of its requests arrive meanwhile."""
        key = self.caller_key(scope)
        session_id = self._sessions.get(key)
        if session_id is not None:
            return session_id
        lock = self._opening.setdefault(key, anyio.Lock())
        try:
            async with lock:
                session_id = self._sessions.get(key)
                if session_id is not None:
                    return session_id
                opened = await self._open_session(scope)
                if not isinstance(opened, Answer):
                    self._sessions[key] = opened
                return opened
        finally:
            if not lock.locked() and not lock.statistics().tasks_waiting:
                self._opening.pop(key, None)

    async def _open_session(self, scope: Scope) -> str | Answer:
        params = {"protocolVersion": LEGACY, "capabilities": CLIENT_CAPABILITIES, "clientInfo": CLIENT_INFO}
        answer = await self._exchange(scope, _request("initialize", params), [], None)
        if answer.result is not None:
            self.server_info = server_info_of(answer.result) or self.server_info
        session_id = _header_of(answer.headers, b"mcp-session-id")
        if answer.result is None or session_id is None or not 0 < len(session_id) <= 256:
            return answer
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        extra = [(b"mcp-protocol-version", LEGACY.encode()), (b"mcp-session-id", session_id.encode())]
        done = await self._exchange(scope, initialized, extra, None)
        if done.status >= 300:
            return done
        return session_id

    def caller_key(self, scope: Scope) -> str:
        """Whose session: the principal and the credentials the app will judge."""
        who = self.principal(scope) if self.principal is not None else None
        parts = [who, header(scope, b"authorization"), header(scope, b"cookie")]
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()

    # ------------------------------------------------------------------ one ASGI exchange
    async def _exchange(
        self,
        scope: Scope,
        message: dict[str, Any],
        headers: Headers,
        background: anyio.abc.TaskGroup | None,
    ) -> Answer:
        body = _encoded(message)
        if body is None:
            logger.warning("REST face: a %s request could not be encoded", message.get("method"))
            text = "the request holds text or a number JSON cannot carry"
            return Answer(400, [], p.error_message(message.get("id"), p.INVALID_PARAMS, text))
        if len(body) > self.max_request_bytes:
            return Answer(413, [], None, self._too_large_text(len(body)).encode())
        reader = AnswerReader(message.get("id"), self.max_answer_bytes)
        answered = anyio.Event()
        sent = False

        async def receive() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await answered.wait()  # then the face, as a client, is gone
            return {"type": "http.disconnect"}

        async def send(out: Message) -> None:
            if reader.feed(out):
                answered.set()

        async def run() -> None:
            try:
                await self.app(self._scope(scope, body, headers), receive, send)
            except Exception:
                logger.exception("REST face: the app failed on %s", message.get("method"))
                reader.failed()
            finally:
                answered.set()

        if background is None:
            await run()
        else:
            background.start_soon(run)
            await answered.wait()
        return reader.answer()

    def _scope(self, template: Scope, body: bytes, headers: Headers) -> Scope:
        forwarded = [
            (k, v) for k, v in template["headers"] if k not in _NOT_FORWARDED and not k.startswith(b"mcp-")
        ]
        forwarded += [
            (b"content-type", b"application/json"),
            (b"accept", b"application/json, text/event-stream"),
            (b"content-length", str(len(body)).encode()),
            *headers,
        ]
        root = template.get("root_path", "") or ""
        path = root + self.path
        scope = dict(template)
        scope.update(method="POST", path=path, raw_path=path.encode(), query_string=b"", headers=forwarded)
        scope[REST_SCOPE_KEY] = True
        return scope


def _request(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": f"rest-{secrets.token_hex(6)}", "method": method, "params": params}


def _modern_request(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """A 2026-07-28 request: the revision and the face's capabilities in its `_meta`."""
    meta = params.get("_meta")
    meta = dict(meta) if isinstance(meta, dict) else {}
    meta["io.modelcontextprotocol/protocolVersion"] = MODERN
    meta[CLIENT_CAPABILITIES_META] = CLIENT_CAPABILITIES
    return _request(method, {**params, "_meta": meta})


def _encoded(message: dict[str, Any]) -> bytes | None:
    """The request as sent, or None when it cannot be (text with no UTF-8 form, a non-finite
    number, nesting the encoder cannot follow): the face's input rules keep such values out,
    and this keeps a slip from being a 500."""
    try:
        return json.dumps(message, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    except (ValueError, UnicodeEncodeError, RecursionError):
        return None


def server_info_of(result: dict[str, Any]) -> dict[str, Any] | None:
    """The app's `serverInfo` in an `initialize` result, or in any 2026-07-28 result's `_meta`."""
    info = result.get("serverInfo")
    if not isinstance(info, dict):
        meta = result.get("_meta")
        info = meta.get(SERVER_INFO_META) if isinstance(meta, dict) else None
    return info if isinstance(info, dict) else None


def _header_of(headers: Headers, name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


class AnswerReader:
    """Finds the response to one request in what the app sends (JSON, or SSE), bounded.

    Sans-IO: `feed` each ASGI message; True once the answer is in (or the reply ended).
    """

    def __init__(self, request_id: Any, limit: int) -> None:
        self.request_id = request_id
        self.limit = limit
        self.status = 502
        self.headers: Headers = []
        self.message: dict[str, Any] | None = None
        self._sse: SSEParser | None = None
        self._chunks: list[bytes] = []
        self._size = 0
        self._done = False
        self._too_large = False
        self._raw = b""

    def feed(self, message: Message) -> bool:
        if self._done:
            return True
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
            self.headers = list(message.get("headers", []))
            content_type = (_header_of(self.headers, b"content-type") or "").lower()
            if content_type.startswith("text/event-stream"):
                self._sse = SSEParser(self.limit)
            return False
        if message["type"] != "http.response.body":
            return False
        chunk: bytes = message.get("body", b"")
        if self._sse is not None:
            try:
                events = self._sse.feed(chunk)
            except SSEError:
                self._too_large = self._done = True
                return True
            for event in events:
                if event.data and self._take(event.data):
                    self._done = True
                    return True
        elif not self._too_large:
            self._size += len(chunk)
            if self._size > self.limit:
                self._too_large = True
                self._chunks.clear()
            else:
                self._chunks.append(chunk)
        if not message.get("more_body", False):
            if self._sse is None and not self._too_large:
                self._take(b"".join(self._chunks), any_id=True)
            self._done = True
        return self._done

    def _take(self, data: bytes, *, any_id: bool = False) -> bool:
        try:
            value = parse_app(data)
        except (ValueError, RecursionError):
            return False
        if not isinstance(value, dict) or not ("result" in value or "error" in value):
            return False
        if value.get("id") == self.request_id or (any_id and "error" in value):
            self.message = value
            self._raw = data
            return True
        return False

    def failed(self) -> None:
        self._done = True
        self.status = 502

    def answer(self) -> Answer:
        if self._too_large:
            text = f"the app's answer is larger than {self.limit} bytes"
            return Answer(502, [], None, text.encode())
        if self.message is None and self.status < 300 and self.request_id is not None:
            return Answer(502, self.headers, None, b"the app's answer held no response to the request")
        body = b"" if self.message is not None else b"".join(self._chunks)[:4096]
        return Answer(self.status, self.headers, self.message, body, self._raw, self.request_id)
