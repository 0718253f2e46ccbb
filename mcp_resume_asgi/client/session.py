"""`ResumableSession`: a small MCP client that needs nothing but httpx.

Why it exists next to the SDK adapter: the `mcp` SDK is a large, optional
dependency; scripts, tests, health checks and other languages' reference ports
want a client whose whole behaviour fits in a few small files. It is deliberately
minimal: JSON-RPC requests over Streamable HTTP, answers to server-to-client
requests, notifications and progress. Resuming is not its business: it sends
everything through a :class:`~mcp_resume_asgi.client.transport.ResumableTransport`,
so a dropped connection, a server closing a stream at will, or a multi-turn
exchange (SEP-1335) is invisible here - the answer to a server request is
POSTed to the MCP URL like any client would, and the transport decides whether
it belongs in a stream's answer buffer.

Eras (`protocol_version`): 2025 revisions (the default) `initialize` a session;
2026-07-28 sends `server/discover` instead, has no session, dresses every request
with its own `_meta` and headers (`modern.py`), and answers a server's
`InputRequiredResult` through `on_request` and a retry (`mrtr.py`); `"auto"` is
2026-07-28 when the server answers `server/discover`, else 2025-11-25. Tasks
(`tasks.py`) are followed alike in both; `follow_ups.py` chains every way a
server answers "not yet" (resume tokens, input rounds, tasks) to the final result.

Not covered: the standalone GET stream for server messages unrelated to a
request, `subscriptions/listen`, batching, and cancellation of server requests.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Mapping
from functools import partial
from types import TracebackType
from typing import Any, Final, Self

import anyio
import anyio.abc
import httpx

from . import modern
from .errors import McpError, SessionError
from .follow_ups import FollowUps
from .incoming import Incoming, NotificationHandler, ProgressHandler, RequestHandler
from .interim import RESUME_TOKENS_CAPABILITY
from .mrtr import DEFAULT_MAX_ROUNDS
from .reading import read_answer, result_of
from .sse_reader import DEFAULT_MAX_EVENT_BYTES
from .tasks import TaskPolling, declare
from .tool_schemas import MAX_PAGES, ToolSchemas
from .transport import ResumableTransport

logger = logging.getLogger(__name__)

DEFAULT_PROTOCOL_VERSION: Final = "2025-11-25"
#: The stock SDK's timeouts: 30 s for connect/write/pool, 5 min between bytes of a stream.
DEFAULT_TIMEOUT: Final = httpx.Timeout(30.0, read=300.0)
DEFAULT_MAX_JSON_BYTES: Final = 16 * 1024 * 1024

JSONObject = dict[str, Any]


class ResumableSession:
    """An MCP client over Streamable HTTP, connected (``initialize`` or ``server/discover``) by ``async with``.

    Args:
        url: the MCP endpoint.
        http_client: an ``httpx.AsyncClient``, best with a ``ResumableTransport``; by
            default one is created with the SDK's timeouts (and closed with the session).
        protocol_version: the revision to speak: a 2025 one (asked for in ``initialize``),
            ``"2026-07-28"`` (``server/discover``, per-request ``_meta``; a server that does
            not speak it is an error), or ``"auto"`` (``server/discover`` at 2026-07-28, and
            ``initialize`` at 2025-11-25 if the server is evidently of the 2025 era).
        on_request: ``(method, params) -> result`` (sync or async) for what the server asks
            the client: server-to-client requests (2025), input requests of a task or of an
            ``InputRequiredResult`` (2026-07-28); raise :class:`McpError` to refuse. Without
            it every such request but ``ping`` is refused "method not found".
        on_notification: ``(method, params)`` (sync or async) for notifications.
        capabilities: client capabilities to announce (default: elicitation and
            sampling when ``on_request`` is given, none otherwise).
        client_info: ``{"name": ..., "version": ...}``.
        max_event_bytes / max_json_bytes: bounds on one SSE event / one JSON body.
        tasks: declare the Tasks extension (SEP-2663, added to ``capabilities``) and follow a
            ``tools/call`` answered with a task to its result; a :class:`TaskPolling` sets how,
            ``False`` declares nothing (the server then never answers with a task).
        max_input_rounds: on 2026-07-28, how many ``InputRequiredResult`` rounds one request
            may take before it fails with :class:`SessionError`.
    """

    def __init__(
        self,
        url: str,
        *,
        http_client: httpx.AsyncClient | None = None,
        protocol_version: str = DEFAULT_PROTOCOL_VERSION,
        on_request: RequestHandler | None = None,
        on_notification: NotificationHandler | None = None,
        capabilities: JSONObject | None = None,
        client_info: JSONObject | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
        resume_tokens: bool = True,
        resume_poll_s: float | None = None,
        max_resume_polls: int = 10_000,
        tasks: TaskPolling | bool = True,
        max_input_rounds: int = DEFAULT_MAX_ROUNDS,
    ) -> None:
        if max_input_rounds < 1:
            raise ValueError("max_input_rounds must be at least 1")
        self.url = url
        self._owns_client = http_client is None
        self._client = http_client or httpx.AsyncClient(
            transport=ResumableTransport(), timeout=DEFAULT_TIMEOUT
        )
        self._mode = modern.mode_of(protocol_version)
        self._requested_version = modern.FALLBACK_VERSION if self._mode == "auto" else protocol_version
        if capabilities is None:
            capabilities = {"elicitation": {}, "sampling": {}} if on_request is not None else {}
            if resume_tokens:
                capabilities["experimental"] = {RESUME_TOKENS_CAPABILITY: {}}
        polling = (TaskPolling() if tasks is True else tasks) or None
        if polling is not None:
            capabilities = declare(capabilities)
        self._follow_ups = FollowUps(
            resume_tokens, resume_poll_s, max_resume_polls, max_input_rounds, polling
        )
        self._capabilities = capabilities
        self._client_info = client_info or {"name": "mcp-resume-asgi", "version": "0.1.0"}
        self._max_event_bytes = max_event_bytes
        self._max_json_bytes = max_json_bytes
        self._ids = itertools.count(1)
        self._tokens = itertools.count(1)
        self._incoming = Incoming(on_request, on_notification, self._post_no_answer)
        self._wire: modern.ModernWire | None = None
        self._tools = ToolSchemas()
        self._closed = False
        self.in_flight: dict[int, str] = {}
        """Requests waiting for their answer: id -> method (see `request_status`)."""
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        """The revision spoken, once connected (2026-07-28 or later: no session)."""
        self.initialize_result: JSONObject = {}
        self.discover_result: JSONObject = {}
        """The `server/discover` result on 2026-07-28 (`initialize_result` stays empty then)."""

    @property
    def server_info(self) -> JSONObject:
        if self.discover_result:
            return modern.server_info_of(self.discover_result)
        info = self.initialize_result.get("serverInfo")
        return info if isinstance(info, dict) else {}

    @property
    def server_capabilities(self) -> JSONObject:
        caps = (self.discover_result or self.initialize_result).get("capabilities")
        return caps if isinstance(caps, dict) else {}

    async def __aenter__(self) -> Self:
        self._incoming.task_group = anyio.create_task_group()
        await self._incoming.task_group.__aenter__()
        try:
            await self.connect()
        except BaseException as exc:
            await self.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await self.aclose()
        finally:
            tg, self._incoming.task_group = self._incoming.task_group, None
            if tg is not None:
                # Our tasks never raise; the body's exception is not the task group's business
                # (handing it over would come back wrapped in an ExceptionGroup).
                tg.cancel_scope.cancel()
                await tg.__aexit__(None, None, None)

    async def connect(self) -> JSONObject:
        """Start speaking the revision `protocol_version` names; done by ``async with``.

        Returns the `initialize` result (2025 revisions, and auto mode's fallback) or
        the `server/discover` result (2026-07-28).
        """
        if self._mode == "legacy":
            return await self.initialize()
        version = modern.MODERN_VERSION if self._mode == "auto" else self._requested_version
        resumes = isinstance(self._client._transport, ResumableTransport)
        self._wire = modern.ModernWire(version, self._client_info, self._capabilities, resumes)
        try:
            verdict = await modern.discover(
                partial(self._request_once, "server/discover"), version, self._mode
            )
        except BaseException:
            self._wire = None
            raise
        if isinstance(verdict, modern.FallBack):
            self._wire = None
            logger.info("%s: %s; initialize at %s instead", self.url, verdict.why, self._requested_version)
            return await self.initialize()
        self.discover_result = verdict.result
        self.protocol_version = version
        self._incoming.answers_requests = False
        logger.info("MCP server at %s speaks %s (no session)", self.url, version)
        return verdict.result

    async def initialize(self) -> JSONObject:
        """``initialize`` + ``notifications/initialized`` (2025 revisions); done by ``async with``."""
        params = {
            "protocolVersion": self._requested_version,
            "capabilities": self._capabilities,
            "clientInfo": self._client_info,
        }
        result = await self.request("initialize", params)
        version = result.get("protocolVersion")
        if not isinstance(version, str) or not version:
            raise SessionError("initialize result has no protocolVersion")
        self.protocol_version = version
        self.initialize_result = result
        await self.notify("notifications/initialized")
        logger.info("MCP session %s initialised, protocol %s", self.session_id or "(stateless)", version)
        return result

    async def aclose(self) -> None:
        """End the session on the server (DELETE) and release the HTTP client if we made it."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.session_id is not None:
                with anyio.CancelScope(shield=True):
                    try:
                        response = await self._client.delete(self.url, headers=self._headers(json_body=False))
                        if response.status_code not in (200, 202, 204, 404, 405):
                            logger.warning("session termination answered HTTP %d", response.status_code)
                    except httpx.HTTPError as exc:
                        logger.warning("session termination failed: %r", exc)
        finally:
            if self._owns_client:
                with anyio.CancelScope(shield=True):
                    await self._client.aclose()

    # -- outgoing ---------------------------------------------------------------------------------

    def _headers(self, *, json_body: bool = True) -> dict[str, str]:
        headers = {"accept": "application/json, text/event-stream"}
        if json_body:
            headers["content-type"] = "application/json"
        if self.session_id is not None:
            headers["mcp-session-id"] = self.session_id
        if self.protocol_version is not None:
            headers["mcp-protocol-version"] = self.protocol_version
        return headers

    async def notify(self, method: str, params: JSONObject | None = None) -> None:
        message: JSONObject = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self._post_no_answer(message)

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        on_progress: ProgressHandler | None = None,
    ) -> JSONObject:
        """``tools/call``; ``on_progress(progress, total, message)`` gets its progress notifications.

        A call the server makes a task (SEP-2663) is followed to its end (``tasks/get``);
        ``on_progress`` then gets the progress sent before it became a task, and none after:
        the extension carries no progress for a task (``notifications/progress`` "are not
        supported on tasks in general")."""
        params: JSONObject = {"name": name, "arguments": dict(arguments or {})}
        if on_progress is None:
            return await self.request("tools/call", params)
        token = f"mcp-resume-asgi-{next(self._tokens)}"
        params["_meta"] = {"progressToken": token}
        self._incoming.progress[token] = on_progress
        try:
            return await self.request("tools/call", params)
        finally:
            self._incoming.progress.pop(token, None)

    async def request_status(self, request_id: int) -> JSONObject:
        """SEP-975 `requests/getStatus` of one of this session's requests, without draining it.

        `{"status": "processing" | "completed" | "failed", "hasPendingMessage": bool,
        "hasInputRequest": bool}`. Needs a server that sent a resume policy for the
        request (the transport advertises `resumableRequests` at `initialize`).
        """
        transport = self._client._transport
        if not isinstance(transport, ResumableTransport):
            raise SessionError("request_status needs the client's transport to be a ResumableTransport")
        try:
            return await transport.request_status(self.url, request_id, session_id=self.session_id)
        except (LookupError, RuntimeError) as exc:
            raise SessionError(str(exc)) from exc

    async def request(self, method: str, params: JSONObject | None = None) -> JSONObject:
        """Send a request and return its result; raise :class:`McpError` for an error answer.

        An interim result (the server's resume-token layer: `_meta.nextResumeToken`
        marked interim) is not returned: the request is re-issued with
        `_meta.resumeToken` after the server's `resumeAfterMs` hint (or
        `resume_poll_s`) until the final result comes. A `nextResumeToken` the app
        itself returns (pagination, say) is left for the caller.

        On 2026-07-28 an `InputRequiredResult` is not returned either: its input
        requests go to `on_request` and the request is sent again with the answers
        (`mrtr.py`), for at most `max_input_rounds` rounds.

        A task handle answering a ``tools/call`` (SEP-2663, when the session declared
        tasks) is not returned either: the task is polled to its end (`tasks.py`) and
        its result returned, its JSON-RPC error raised as :class:`McpError`.
        """
        return await self._follow_ups.final_result(
            method,
            params,
            send=self._request_once,
            answer_input=self._incoming.answer_input,
            input_rounds=self._wire is not None,
        )

    async def _request_once(
        self, method: str, params: JSONObject | None = None, headers: dict[str, str] | None = None
    ) -> JSONObject:
        if self._closed:
            raise SessionError("the session is closed")
        if self._wire is not None:
            # 2026-07-28: what a session said once, every request says itself.
            if method == "tools/call" and params is not None:
                headers = {**(await self._param_headers(params)), **(headers or {})}
            params = self._wire.params(params)
            headers = {**self._wire.headers(method, params), **(headers or {})}
        request_id = next(self._ids)
        message: JSONObject = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        body = json.dumps(message, separators=(",", ":")).encode()
        self.in_flight[request_id] = method
        try:
            answer = await self._exchange(method, request_id, body, headers or {})
        except httpx.HTTPError as exc:
            raise SessionError(f"{method!r} failed: {exc!r}") from exc
        finally:
            self.in_flight.pop(request_id, None)
        if answer is None:
            raise SessionError(f"the answer to {method!r} ended without a response")
        result = result_of(answer)
        if method == "tools/list":
            self._tools.note(result)
        return result

    async def _param_headers(self, params: JSONObject) -> dict[str, str]:
        """The `Mcp-Param-*` headers of a 2026-07-28 `tools/call` (`tool_schemas.py`): the tools
        are listed first, once, when the session has not seen this one's schema."""
        name = params.get("name")
        if not isinstance(name, str):
            return {}
        if self._tools.needs_listing(name):
            self._tools.listed = True
            cursor: str | None = None
            try:
                for _ in range(MAX_PAGES):
                    page = await self._request_once("tools/list", {"cursor": cursor} if cursor else None)
                    if (cursor := self._tools.note(page)) is None or not self._tools.needs_listing(name):
                        break
            except McpError as exc:  # the call goes without them; the server judges it
                logger.info("tools/list refused (%s): tools/call without Mcp-Param-* headers", exc)
        return self._tools.headers(name, params.get("arguments"))

    async def _exchange(
        self, method: str, request_id: int, body: bytes, headers: dict[str, str]
    ) -> JSONObject | None:
        headers = {**self._headers(), **headers}
        async with self._client.stream("POST", self.url, content=body, headers=headers) as response:
            if method == "initialize":
                self.session_id = response.headers.get("mcp-session-id") or None
            return await read_answer(
                response,
                method,
                request_id,
                self._incoming.dispatch,
                max_json_bytes=self._max_json_bytes,
                max_event_bytes=self._max_event_bytes,
                in_session=self.session_id is not None,
            )

    async def _post_no_answer(self, message: JSONObject) -> None:
        body = json.dumps(message, separators=(",", ":")).encode()
        headers = self._headers()
        method = message.get("method")
        if self._wire is not None and isinstance(method, str):
            headers.update(self._wire.headers(method, None))
        try:
            response = await self._client.post(self.url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            raise SessionError(f"sending {message.get('method', 'an answer')!r} failed: {exc!r}") from exc
        if response.status_code >= 400:
            raise SessionError(
                f"server refused a message with HTTP {response.status_code}", response.status_code
            )
