"""Tasks (SEP-2663) on the client side: from a `CreateTaskResult` to the call's final result.

Why the helper drives tasks itself: a server behind mcp-resume-asgi answers a long
`tools/call` with a task handle (`resultType: "task"`) once the client declares
`io.modelcontextprotocol/tasks`, and the work then outlives every connection. The
application asked for a tool's result, not for a task: as the extension's
backwards-compatibility note puts it, a client "can transparently drive the
polling flow internally and surface only the final, completed result".

The flow, the same under `ResumableSession` and under the stock `mcp` client
(`sdk_tasks.py`), which only supply how a request is sent and how an input request
is answered:

* poll `tasks/get` every `pollIntervalMs` (the server's latest value, clamped) -
  the protocol's own polling, nothing faster;
* `completed`: the task's `result` is the call's result (an `isError` one too);
  `failed`: the JSON-RPC error it carries is raised as the call's error;
  `cancelled`: :class:`TaskCancelled`;
* `input_required`: each entry of `inputRequests` not answered before (keys are
  unique over a task's life, and a poll repeats what is still outstanding) goes to
  the application's handler for server-to-client requests - the elicitation and
  sampling callbacks it already has - and the answers go back, keyed the same, in
  one `tasks/update`;
* leaving before a terminal status - the caller cancelled, a handler failed, the
  server stayed unreachable - sends `tasks/cancel` (shielded, bounded): nobody will
  read the result, so the work should stop;
* a poll whose exchange broke (`transient`) is retried after the poll interval, a
  bounded number of times in a row: `tasks/get`, `tasks/update` and `tasks/cancel`
  are all safe to repeat.

:class:`TaskState` holds the decisions and does no I/O; :func:`drive_task` is the loop.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import anyio

from mcp_resume_asgi.wire.headers import encode_header_value

from .errors import McpError, SessionError, TaskCancelled

logger = logging.getLogger(__name__)

TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"
TASK_RESULT_TYPE: Final = "task"
#: The requests a task may stand in for (the extension's "supported methods").
TASK_AUGMENTED_METHODS: Final = frozenset({"tools/call"})
INTERNAL_ERROR: Final = -32603
_MAX_TASK_ID: Final = 1024

JSONObject = dict[str, Any]
#: `(method, params) -> result`; raises :class:`McpError` for an error answer.
Send = Callable[[str, JSONObject], Awaitable[JSONObject]]
#: `(key, method, params) -> result` for one entry of `inputRequests`.
AnswerInput = Callable[[str, str, JSONObject], Awaitable[JSONObject]]
#: Whether an exception raised by `Send` means "the exchange broke, try again".
Transient = Callable[[Exception], bool]


@dataclass(frozen=True, kw_only=True)
class TaskPolling:
    """How a task is polled.

    Args:
        default_poll_ms: the interval when the server suggests none.
        min_poll_ms / max_poll_ms: bounds on any interval, whatever the server says.
        max_failed_polls: consecutive broken exchanges tolerated before giving up.
        cancel_timeout_s: how long the `tasks/cancel` sent on the way out may take.
    """

    default_poll_ms: int = 1000
    min_poll_ms: int = 10
    max_poll_ms: int = 30_000
    max_failed_polls: int = 5
    cancel_timeout_s: float = 5.0

    def __post_init__(self) -> None:
        if not 0 <= self.min_poll_ms <= self.default_poll_ms <= self.max_poll_ms:
            raise ValueError("need 0 <= min_poll_ms <= default_poll_ms <= max_poll_ms")
        if self.max_failed_polls < 1:
            raise ValueError("max_failed_polls must be at least 1")
        if self.cancel_timeout_s <= 0:
            raise ValueError("cancel_timeout_s must be positive")


def is_create_task_result(result: Mapping[str, Any]) -> bool:
    """Whether a result is a task handle (the `resultType` discriminator says `task`)."""
    return result.get("resultType") == TASK_RESULT_TYPE


def declare(capabilities: Mapping[str, Any]) -> JSONObject:
    """A copy of client capabilities with the extension under `extensions` (nothing else changed)."""
    out = dict(capabilities)
    extensions = out.get("extensions")
    out["extensions"] = {**(extensions if isinstance(extensions, dict) else {}), TASKS_EXTENSION: {}}
    return out


def routing_headers(method: str, task_id: str) -> dict[str, str]:
    """`Mcp-Method` and `Mcp-Name` (= the task id, as Streamable HTTP requires for `tasks/*`).

    A value that is not plain visible ASCII is sent in the transport's Base64 form.
    """
    return {"mcp-method": method, "mcp-name": encode_header_value(task_id)}


@dataclass(frozen=True)
class Done:
    result: JSONObject


@dataclass(frozen=True)
class Wait:
    seconds: float


@dataclass(frozen=True)
class Answer:
    """Input requests to answer now: key -> (method, params)."""

    requests: dict[str, tuple[str, JSONObject]]


@dataclass(frozen=True)
class FetchNow:
    """The seed said the task is over but carried no outcome: `tasks/get` at once."""


Step = Done | Wait | Answer | FetchNow


class TaskState:
    """What the client knows of one task and what it does next; no I/O, no clock."""

    def __init__(self, created: Mapping[str, Any], polling: TaskPolling | None = None) -> None:
        task_id = created.get("taskId")
        if not isinstance(task_id, str) or not 0 < len(task_id) <= _MAX_TASK_ID:
            raise SessionError("the server answered with a task that has no valid taskId")
        self.task_id = task_id
        self.polling = polling or TaskPolling()
        self.status: str | None = None
        self.answered: set[str] = set()
        self._poll_ms = self.polling.default_poll_ms

    def observe(self, task: Mapping[str, Any], *, seed: bool = False) -> Step:
        """The next step after seeing `task` (the `CreateTaskResult` seed, or a `tasks/get` answer).

        Raises :class:`McpError` for `failed`, :class:`TaskCancelled` for `cancelled`,
        :class:`SessionError` for an answer about another task or one that breaks the protocol.
        """
        if not seed and task.get("taskId") != self.task_id:
            raise SessionError(f"tasks/get for {self.task_id!r} answered about another task")
        interval = task.get("pollIntervalMs")
        if isinstance(interval, int | float) and not isinstance(interval, bool):
            self._poll_ms = int(min(max(interval, self.polling.min_poll_ms), self.polling.max_poll_ms))
        status = task.get("status")
        self.status = status if isinstance(status, str) else None
        if status == "completed":
            result = task.get("result")
            if isinstance(result, dict):
                return Done(result)
            if seed:
                return FetchNow()
            raise SessionError(f"task {self.task_id} completed without a result object")
        if status == "failed":
            error = task.get("error")
            if not isinstance(error, dict) and seed:
                return FetchNow()
            raise _task_error(error, task.get("statusMessage"), self.task_id)
        if status == "cancelled":
            message = task.get("statusMessage")
            raise TaskCancelled(self.task_id, message if isinstance(message, str) else None)
        if status == "input_required" and not seed:
            fresh = self._outstanding(task.get("inputRequests"))
            if fresh:
                return Answer(fresh)
        return Wait(self.delay_s)

    def note_answered(self, keys: set[str]) -> None:
        self.answered |= keys

    @property
    def delay_s(self) -> float:
        return self._poll_ms / 1000

    @property
    def terminal(self) -> bool:
        return self.status in ("completed", "failed", "cancelled")

    def _outstanding(self, requests: Any) -> dict[str, tuple[str, JSONObject]]:
        if not isinstance(requests, dict):
            raise SessionError(f"task {self.task_id} is input_required without an inputRequests object")
        fresh: dict[str, tuple[str, JSONObject]] = {}
        for key, request in requests.items():
            if key in self.answered:
                continue
            method = request.get("method") if isinstance(request, dict) else None
            params = request.get("params", {}) if isinstance(request, dict) else None
            if not isinstance(method, str) or not isinstance(params, dict):
                raise SessionError(f"input request {key!r} of task {self.task_id} is not a request")
            fresh[key] = (method, params)
        return fresh


def _task_error(error: Any, status_message: Any, task_id: str) -> McpError:
    if isinstance(error, dict):
        code = error.get("code")
        return McpError(
            code if isinstance(code, int) and not isinstance(code, bool) else INTERNAL_ERROR,
            str(error.get("message", "error without a message")),
            error.get("data"),
        )
    why = status_message if isinstance(status_message, str) else "no error was given"
    return McpError(INTERNAL_ERROR, f"task {task_id} failed: {why}")


async def drive_task(
    created: Mapping[str, Any],
    *,
    send: Send,
    answer_input: AnswerInput | None,
    transient: Transient,
    polling: TaskPolling | None = None,
) -> JSONObject:
    """Follow a task from its `CreateTaskResult` to the result of the call it stands for.

    `send` carries `tasks/get` / `tasks/update` / `tasks/cancel` (with the routing
    headers, see :func:`routing_headers`); `answer_input` answers one input request
    (None: the client takes none, and a task asking for input is cancelled with an error).
    """
    state = TaskState(created, polling)
    task_id = state.task_id

    async def call(method: str, params: JSONObject) -> JSONObject:
        failures = 0
        while True:
            try:
                return await send(method, {"taskId": task_id, **params})
            except Exception as exc:
                if not transient(exc):
                    raise
                failures += 1
                if failures >= state.polling.max_failed_polls:
                    raise
                logger.info("%s of task %s broke (%r); again in %.3f s", method, task_id, exc, state.delay_s)
                await anyio.sleep(state.delay_s)

    step = state.observe(created, seed=True)
    try:
        while True:
            if isinstance(step, Done):
                return step.result
            if isinstance(step, Answer):
                if answer_input is None:
                    raise McpError(INTERNAL_ERROR, f"task {task_id} asks for input this client cannot give")
                responses = {key: await answer_input(key, m, p) for key, (m, p) in step.requests.items()}
                await call("tasks/update", {"inputResponses": responses})
                state.note_answered(set(responses))
                step = Wait(state.delay_s)
            if isinstance(step, Wait):
                await anyio.sleep(step.seconds)
            step = state.observe(await call("tasks/get", {}))
    finally:
        if not state.terminal:
            await _cancel(call, task_id, state.polling.cancel_timeout_s)


async def _cancel(
    call: Callable[[str, JSONObject], Awaitable[JSONObject]], task_id: str, within_s: float
) -> None:
    """`tasks/cancel` on the way out, even while the caller is being cancelled; never raises."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(within_s):
        try:
            await call("tasks/cancel", {})
            logger.info("task %s: tasks/cancel sent", task_id)
        except Exception as exc:
            logger.warning("task %s: tasks/cancel failed: %r", task_id, exc)
