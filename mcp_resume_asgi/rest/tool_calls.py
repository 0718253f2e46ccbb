"""The tool-call operations of the REST face: PUT, GET, advance, cancel (SEP-1597).

Each is the Tasks layer's operation through the wire (`mcp_client.py`): a PUT is a
`tools/call` declaring the Tasks extension, made a task at once (the face's hook in
the middleware), a GET `tasks/get`, an advance `tasks/update`, a cancel `tasks/cancel`
- so stores, relays to the node running the call, dead-owner detection and the
principal check are the Tasks layer's, unchanged. This module adds what HTTP asks for:

* the call named by the client and scoped to the caller (`calls.py`): PUT without
  `Idempotency-Key` is 400, the same id and key again is 200 with the current state
  (the call never runs twice, even when the first PUT's connection was cut before its
  answer: its record was created first, atomically), another key 409;
* the PUT (and an advance) waits up to the route's `task_after_s` (the face's default
  when the route has none) for the task to settle - finished, or asking for input - so
  a fast tool answers `success` with its result and a slow one `running`. The wait
  wakes on the task's stream (`Store.wait`), it does not poll;
* `ETag` / `If-None-Match` (304), `If-Match` on advance (428 / 412; of several
  advances of one state exactly one is taken, the others are 412 - a state being its
  ETag and the input request it shows, since a question asked twice shows the same
  resource twice), `Retry-After` while the call runs.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import anyio
import anyio.abc
from starlette.types import Scope

from mcp_resume_asgi.engine.port import PROBE_TIMEOUT_S, AskApp, OwnerGone
from mcp_resume_asgi.policy import RouteTable
from mcp_resume_asgi.rest import resource as res
from mcp_resume_asgi.rest.calls import CallRecord, CallStore
from mcp_resume_asgi.rest.json_text import NotAcceptedJSON, parse_client
from mcp_resume_asgi.rest.mcp_client import LEGACY, MODERN, Wire
from mcp_resume_asgi.rest.problems import Problem, invalid_arguments, problem
from mcp_resume_asgi.rest.replies import Reply, json_reply, problem_reply, tagged_reply
from mcp_resume_asgi.rest.routes import Route
from mcp_resume_asgi.rest.store_mark import CALL_LOST, StoreMark
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import Store
from mcp_resume_asgi.wire.headers import Headers, header, header_count, param_headers
from mcp_resume_asgi.wire.principal import PrincipalOf

logger = logging.getLogger(__name__)

#: Validates a tool's arguments against its `inputSchema`: the reasons, as problem members.
Validator = Callable[[Any, Any], list[dict[str, str]]]
#: Most pages of a list the face follows (SEP-1597 lists are whole: no paging).
MAX_LIST_PAGES = 100
_CACHE = (b"cache-control", b"private, no-cache")
#: How long a failed PUT tries to record that it failed.
STORE_GRACE_S = 5.0


class ToolCallPort(Protocol):
    """What the tool-call routes use of the engine's port: its store, routes and node, who calls
    (as configured, and as the app's own auth says), and whether a call's node is gone."""

    @property
    def store(self) -> Store: ...
    @property
    def routes(self) -> RouteTable: ...
    @property
    def node_id(self) -> str: ...
    @property
    def principal(self) -> PrincipalOf: ...
    @property
    def ask_app(self) -> AskApp: ...
    @property
    def owner_gone(self) -> OwnerGone: ...


class ToolCalls:
    """The tool-call routes, on one wire and the engine's port (its store, routes, node)."""

    def __init__(
        self,
        wire: Wire,
        port: ToolCallPort,
        calls: CallStore,
        *,
        path: str,
        task_after_s: float,
        max_calls_per_tool: int,
        validator: Validator | None,
    ) -> None:
        self.wire = wire
        self.port = port
        self.calls = calls
        self.path = path
        self.task_after_s = task_after_s
        self.max_calls_per_tool = max_calls_per_tool
        self.validator = validator
        self.mark = StoreMark(port.store)

    # ------------------------------------------------------------------ who, and the app's tools
    async def principal(self, scope: Scope) -> str | Reply | None:
        """Whose calls: the principal as the app's own auth sees the caller (a `ping` with the
        caller's credentials, in the caller's session, when no outer layer said), or the app's
        refusal."""
        outer = self.port.principal(scope)
        if outer is not None:
            return outer
        ping = b'{"jsonrpc":"2.0","id":"mcp-resume-rest-who","method":"ping"}'
        reply = None
        with anyio.move_on_after(PROBE_TIMEOUT_S):
            for _ in range(2):
                session_id = await self.wire.session_for(scope)
                version = self.wire.era or LEGACY
                reply = await self.port.ask_app(scope, self.path, session_id, version, ping)
                if reply.status != 404 or session_id is None:
                    break
                self.wire.forget(scope, session_id)  # the app no longer knows it: open another
        if reply is None:
            failure = problem(503, "the app did not say who calls in time", headers=[(b"retry-after", b"1")])
            return problem_reply(failure)
        if reply.status in (401, 403):
            headers = [(k, v) for k, v in reply.headers if k.lower() == b"www-authenticate"]
            return problem_reply(
                problem(reply.status, "the app refused the caller's credentials", headers=headers)
            )
        return reply.principal

    async def tools(self, scope: Scope) -> list[dict[str, Any]] | Reply:
        """Every tool the app lists (its pages followed), or the failure as a reply."""
        tools: list[dict[str, Any]] = []
        cursor: Any = None
        for _ in range(MAX_LIST_PAGES):
            answer = await self.wire.call(scope, "tools/list", {} if cursor is None else {"cursor": cursor})
            failure = answer.problem("tools/list")
            if failure is not None or answer.result is None:
                return problem_reply(failure or problem(502, "tools/list gave no result"))
            listed = answer.result.get("tools")
            tools += [t for t in listed if isinstance(t, dict)] if isinstance(listed, list) else []
            cursor = answer.result.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                break
        return tools

    async def list_tools(self, scope: Scope) -> Reply:
        """`GET /mcp/tools`: the MCP list result, whole, with an ETag (304 when unchanged)."""
        tools = await self.tools(scope)
        if isinstance(tools, Reply):
            return tools
        value = {"tools": tools}
        return tagged_reply(value, res.etag_of(value), header(scope, b"if-none-match"), [_CACHE])

    # ------------------------------------------------------------------ PUT
    async def put(self, scope: Scope, route: Route, body: bytes, background: anyio.abc.TaskGroup) -> Reply:
        tool, call_id = _names(route)
        key_value = header(scope, b"idempotency-key")
        if header_count(scope, b"idempotency-key") != 1 or not res.valid_idempotency_key(key_value):
            return _problem(
                400, "the Idempotency-Key header is required once (1-255 printable ASCII characters)"
            )
        assert key_value is not None
        arguments = _json_object(body)
        if isinstance(arguments, Reply):
            return arguments
        who = await self.principal(scope)
        if isinstance(who, Reply):
            return who
        key = keys.rest_call(who, tool, call_id)
        existing = await self.calls.load(key)
        if existing is not None:
            return await self._again(scope, key, existing, key_value)
        listed = await self.tools(scope)
        if isinstance(listed, Reply):
            return listed
        found = next((t for t in listed if t.get("name") == tool), None)
        if found is None:
            return _problem(404, f"the app has no tool named {tool!r}")
        if self.validator is not None:
            reasons = self.validator(found.get("inputSchema"), arguments)
            if reasons:
                return problem_reply(invalid_arguments(reasons))
        _, policy = self.port.routes.choose(self.path, "tools/call", tool)
        wait_s = policy.task_after_s if policy.task_after_s is not None else self.task_after_s
        await self.mark.lost_at(time.time())  # (the store's mark read, or written, before a call exists)
        # Everything the request to the app needs, and whether the app can take it, before the
        # call exists: a call that cannot be sent must leave nothing behind.
        params = {"name": tool, "arguments": arguments, "_meta": {"progressToken": key[-32:]}}
        mirrored = param_headers(found.get("inputSchema"), arguments) if self.wire.era == MODERN else []
        too_large = self.wire.oversized("tools/call", params)
        if too_large is not None:
            return problem_reply(too_large)
        record = CallRecord(
            tool, call_id, key_value, time.time(), arguments, self.port.node_id, policy.task_ttl_s
        )
        if not await self.calls.indexed(who, record, self.max_calls_per_tool):
            return _problem(429, f"the caller holds {self.max_calls_per_tool} calls of {tool!r} already")
        try:
            existing = await self.calls.create(key, record)
        except BaseException:
            await self._unindexed(key, who, record)
            raise
        if existing is not None:
            return await self._again(scope, key, existing, key_value)
        try:
            return await self._run(scope, key, who, record, params, wait_s, background, mirrored)
        except BaseException:
            await self._interrupted(key)
            raise

    async def _unindexed(self, key: str, who: str | None, record: CallRecord) -> None:
        """A PUT whose record could not be made: out of the caller's index again, unless another
        PUT of the same call made it meanwhile (best effort: the store may be what failed)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(STORE_GRACE_S):
            try:
                if await self.calls.load(key) is None:
                    await self.calls.unindex(who, record)
            except Exception as exc:
                logger.warning("REST call %s: its index entry could not be taken back (%s)", key, exc)

    async def _interrupted(self, key: str) -> None:
        """A PUT that failed or was cancelled before the call got its task: never leave it
        `submitted` for good (best effort: the store may be what failed)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(STORE_GRACE_S):
            try:
                current = await self.calls.load(key)
                if current is not None and current.task_id is None and current.answer is None:
                    interrupted = {
                        "error": {"code": -32603, "message": "the call was interrupted on its way"}
                    }
                    await self.calls.save(key, dataclasses.replace(current, answer=interrupted), time.time())
            except Exception as exc:
                logger.warning("REST call %s: its interruption could not be recorded (%s)", key, exc)

    async def _run(
        self,
        scope: Scope,
        key: str,
        who: str | None,
        record: CallRecord,
        params: dict[str, Any],
        wait_s: float,
        background: anyio.abc.TaskGroup,
        headers: Headers,
    ) -> Reply:
        answer = await self.wire.call(scope, "tools/call", params, background=background, headers=headers)
        result = answer.result
        if (
            result is not None
            and result.get("resultType") == "task"
            and isinstance(result.get("taskId"), str)
        ):
            record = dataclasses.replace(record, task_id=result["taskId"])
            await self.calls.save(key, record, time.time())
            if await self.port.store.get_key(keys.rest_cancel(key)) is not None:
                await self.wire.call(scope, "tasks/cancel", {"taskId": record.task_id})
            return await self._reply(scope, record, 201, wait_s=wait_s)
        if result is not None:  # answered without becoming a task (the Tasks layer's bounds)
            record = dataclasses.replace(record, answer=answer.message)
            await self.calls.save(key, record, time.time())
            return await self._reply(scope, record, 201)
        await self.calls.forget(key, who, record)  # refused outright: it never ran
        return problem_reply(answer.problem(f"tool {record.tool!r}") or problem(502, "no answer"))

    async def _again(self, scope: Scope, key: str, record: CallRecord, key_value: str) -> Reply:
        """A PUT for a call that exists: its retry (the current state) or a conflict."""
        if record.idempotency_key != key_value:
            return _problem(409, "this call id is taken by a PUT with another Idempotency-Key")
        return await self._reply(scope, record, 200)

    # ------------------------------------------------------------------ GET, advance, cancel
    async def get(self, scope: Scope, route: Route) -> Reply:
        found = await self._find(scope, route)
        if isinstance(found, Reply):
            return await self._lost(scope, route, found) if found.status == 404 else found
        return await self._reply(scope, found[1], 200, if_none_match=header(scope, b"if-none-match"))

    async def _lost(self, scope: Scope, route: Route, missing: Reply) -> Reply:
        """A call the store does not hold: `failed`, saying the store lost it, while the store may
        have (`store_mark.py`: within a call TTL of its loss, for a tool the app has); else 404."""
        tool, call_id = _names(route)
        now = time.time()
        lost_at = await self.mark.lost_at(now)
        if lost_at is None:
            return missing
        _, policy = self.port.routes.choose(self.path, "tools/call", tool)
        if now > lost_at + policy.task_ttl_s:
            return missing
        listed = await self.tools(scope)
        if isinstance(listed, Reply):
            return listed
        if not any(t.get("name") == tool for t in listed):
            return missing
        failed = {"status": res.CallStatus.FAILED, "error": {"code": -32603, "message": CALL_LOST}}
        current = res.build(tool, call_id, None, failed)
        headers: Headers = [(b"etag", res.etag_header(current["etag"])), _CACHE]
        if res.not_modified(header(scope, b"if-none-match"), current["etag"]):
            return Reply(304, b"", headers)
        return json_reply(200, current, headers)

    async def advance(
        self, scope: Scope, route: Route, body: bytes, background: anyio.abc.TaskGroup
    ) -> Reply:
        found = await self._find(scope, route)
        if isinstance(found, Reply):
            if found.status == 404 and (await self._lost(scope, route, found)).status == 200:
                return _problem(409, "the call is failed (the store lost it): it waits for no result")
            return found
        key, record = found
        if_match = header(scope, b"if-match")
        if res.precondition_status(if_match, "") == 428:
            return _problem(428, "advance needs If-Match: the etag of the state it answers")
        answer_body = _json_object(body)
        if isinstance(answer_body, Reply):
            return answer_body
        state = await self._state(scope, record)
        if isinstance(state, Reply):
            return state
        current, task, _ = state
        status = res.precondition_status(if_match, current["etag"])
        if status is not None:
            return _stale(current["etag"])
        pending = res.first_input(task) if task is not None else None
        if pending is None or record.task_id is None:
            return _problem(409, f"the call is {current['status']}: it waits for no result")
        params = {"taskId": record.task_id, "inputResponses": {pending.key: answer_body}}
        too_large = self.wire.oversized("tasks/update", params)
        if too_large is not None:
            return problem_reply(too_large)
        claim = keys.rest_advance(key, current["etag"], pending.key)
        if await self.port.store.add_key(claim, "1", record.ttl_left_s(time.time())) is not None:
            return _stale(current["etag"])  # another advance of this state was taken
        try:
            answer = await self.wire.call(scope, "tasks/update", params, background=background)
        except BaseException:
            await self._released(claim)
            raise
        failure = answer.problem(f"call {record.call_id!r}")
        if failure is not None:
            await self._released(claim)
            return problem_reply(failure)
        _, policy = self.port.routes.choose(self.path, "tools/call", record.tool)
        wait_s = policy.task_after_s if policy.task_after_s is not None else self.task_after_s
        return await self._reply(scope, record, 200, wait_s=wait_s)

    async def _released(self, claim: str) -> None:
        """Give back an advance's claim on a state whose answer did not go through, so the
        next advance of that state is taken (best effort: the store may be what failed)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(STORE_GRACE_S):
            try:
                await self.port.store.delete_key(claim)
            except Exception as exc:
                logger.warning("REST advance: its claim %s could not be given back (%s)", claim, exc)

    async def cancel(self, scope: Scope, route: Route) -> Reply:
        found = await self._find(scope, route)
        if isinstance(found, Reply):  # (a lost call is over: its cancel answers it, as a finished one's)
            return await self._lost(scope, route, found) if found.status == 404 else found
        key, record = found
        if record.task_id is not None:
            answer = await self.wire.call(scope, "tasks/cancel", {"taskId": record.task_id})
            failure = answer.problem(f"call {record.call_id!r}")
            if failure is not None:
                return problem_reply(failure)
        elif record.answer is None:  # its PUT has not got the task yet: it cancels it once it has
            await self.port.store.set_key(keys.rest_cancel(key), "1", record.ttl_left_s(time.time()))
        return await self._reply(scope, record, 200)

    # ------------------------------------------------------------------ the resource
    async def _find(self, scope: Scope, route: Route) -> tuple[str, CallRecord] | Reply:
        tool, call_id = _names(route)
        who = await self.principal(scope)
        if isinstance(who, Reply):
            return who
        key = keys.rest_call(who, tool, call_id)
        record = await self.calls.load(key)
        if record is None or record.tool != tool or record.call_id != call_id:
            return _problem(404, f"no call {call_id!r} of tool {tool!r}")
        return key, record

    async def _state(
        self, scope: Scope, record: CallRecord, wait_s: float = 0.0
    ) -> tuple[dict[str, Any], dict[str, Any] | None, int] | Reply:
        """The call's resource, its task (if any) and poll interval; with `wait_s`, the first
        settled state (not running) within that long, woken by the task's stream."""
        if record.task_id is None:
            return self._untasked(record), None, 1000
        deadline = anyio.current_time() + wait_s
        while True:
            # Read before `tasks/get` when it may be waited on: a change after it wakes the wait.
            meta = await self.calls.current_stream(record.task_id) if wait_s > 0 else None
            answer = await self.wire.call(scope, "tasks/get", {"taskId": record.task_id})
            task = answer.result
            if task is None:
                failure = answer.problem(f"call {record.call_id!r}")
                return problem_reply(failure or problem(502, "tasks/get gave no result"))
            left = deadline - anyio.current_time()
            if task.get("status") != "working" or left <= 0 or meta is None:
                break
            await self.port.store.wait(meta.stream_id, meta.last_seq, left, version=meta.version)
        state = res.state_of_task(task)
        progress = None
        if state["status"] not in res.TERMINAL:  # (a finished call's progress is over: no read)
            meta = meta or await self.calls.current_stream(record.task_id)
            progress = res.progress_of(await self.calls.latest_progress(meta))
        built = res.build(record.tool, record.call_id, record.request, state, progress)
        poll = task.get("pollIntervalMs")
        return built, task, poll if isinstance(poll, int) else 1000

    def _untasked(self, record: CallRecord) -> dict[str, Any]:
        if record.answer is not None:
            return res.build(record.tool, record.call_id, record.request, res.state_of_answer(record.answer))
        state: dict[str, Any] = {"status": res.CallStatus.SUBMITTED}
        return res.build(record.tool, record.call_id, record.request, state)

    async def _reply(
        self,
        scope: Scope,
        record: CallRecord,
        status: int,
        *,
        wait_s: float = 0.0,
        if_none_match: str | None = None,
    ) -> Reply:
        state = await self._state(scope, record, wait_s)
        if isinstance(state, Reply):
            return state
        current, _, poll_ms = state
        if current["status"] == res.CallStatus.SUBMITTED and await self._owner_gone(record):
            lost = {
                "status": res.CallStatus.FAILED,
                "error": {"message": "the server handling the call stopped"},
            }
            current = res.build(record.tool, record.call_id, record.request, lost)
        headers: Headers = [(b"etag", res.etag_header(current["etag"])), _CACHE]
        if current["status"] in res.IN_PROGRESS:
            headers.append((b"retry-after", str(res.retry_after_s(poll_ms)).encode()))
        if res.not_modified(if_none_match, current["etag"]):
            return Reply(304, b"", headers)
        return json_reply(status, current, headers)

    async def _owner_gone(self, record: CallRecord) -> bool:
        return await self.port.owner_gone(record.owner)


def _names(route: Route) -> tuple[str, str]:
    assert route.tool is not None and route.call_id is not None
    return route.tool, route.call_id


def _problem(status: int, detail: str) -> Reply:
    return problem_reply(problem(status, detail))


def _stale(etag: str) -> Reply:
    failure = Problem(412, "the call changed since that etag: GET it for its current state", {"etag": etag})
    reply = problem_reply(failure)
    return Reply(reply.status, reply.body, [*reply.headers, (b"etag", res.etag_header(etag))])


def _json_object(body: bytes) -> dict[str, Any] | Reply:
    """The body as a JSON object, or the 400 saying why not (before anything is written)."""
    try:
        value = parse_client(body) if body.strip() else None
    except NotAcceptedJSON as refused:
        return _problem(400, refused.detail)
    if not isinstance(value, dict):
        return _problem(400, "the body must be a JSON object")
    return value
