"""Until the answer is final: the ways a server says "not yet", followed for `ResumableSession`.

Why apart from the session: a request's first answer may not be the result the
caller asked for, and each way of saying so has its own wire and its own
module - an interim result with a resume token (`interim.py`), an
`InputRequiredResult` on 2026-07-28 (`mrtr.py`), a task handle for a call the
server runs as a task (`tasks.py`). This one knows the order they come in -
a resumed request may end in input rounds, and the answered rounds may end in a
task - and the session only supplies how one request is sent and how the
application answers the server's questions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from .errors import SessionError
from .interim import follow_resume_tokens
from .mrtr import INPUT_METHODS, AnswerInput, follow_input_required, is_input_required
from .tasks import TASK_AUGMENTED_METHODS, TaskPolling, drive_task, is_create_task_result, routing_headers

JSONObject = dict[str, Any]
#: ``(method, params, extra headers) -> result``: one request, answered once.
SendOnce = Callable[[str, JSONObject | None, dict[str, str] | None], Awaitable[JSONObject]]


@dataclass(frozen=True, slots=True)
class FollowUps:
    """How far a session follows a "not yet": the settings of `ResumableSession` that say so."""

    resume_tokens: bool
    resume_poll_s: float | None
    max_resume_polls: int
    max_input_rounds: int
    tasks: TaskPolling | None  # None: the session declared no tasks, so none come

    async def final_result(
        self,
        method: str,
        params: JSONObject | None,
        *,
        send: SendOnce,
        answer_input: AnswerInput,
        input_rounds: bool,
    ) -> JSONObject:
        """Send ``method`` and follow its answer to the final result (``input_rounds``: 2026-07-28 only)."""
        result = await self._resuming(method, params, send)
        if input_rounds and method in INPUT_METHODS and is_input_required(result):

            async def reissue(again: JSONObject) -> JSONObject:
                return await self._resuming(method, again, send)

            result = await follow_input_required(
                result,
                method=method,
                params=params,
                reissue=reissue,
                answer_input=answer_input,
                max_rounds=self.max_input_rounds,
            )
        if self.tasks is not None and method in TASK_AUGMENTED_METHODS and is_create_task_result(result):

            async def task_request(task_method: str, task_params: JSONObject) -> JSONObject:
                return await send(
                    task_method, task_params, routing_headers(task_method, task_params["taskId"])
                )

            return await drive_task(
                result, send=task_request, answer_input=answer_input, transient=transient, polling=self.tasks
            )
        return result

    async def _resuming(self, method: str, params: JSONObject | None, send: SendOnce) -> JSONObject:
        result = await send(method, params, None)
        if not self.resume_tokens:
            return result

        async def reissue(again: JSONObject) -> JSONObject:
            return await send(method, again, None)

        return await follow_resume_tokens(
            result, reissue, params, what=method, poll_s=self.resume_poll_s, max_polls=self.max_resume_polls
        )


def transient(exc: Exception) -> bool:
    """A task request whose exchange broke (not one the server answered): worth sending again."""
    if not isinstance(exc, SessionError):
        return False
    return isinstance(exc.__cause__, httpx.TransportError) or exc.status_code in (502, 503, 504)
