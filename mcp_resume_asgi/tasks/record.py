"""A task as plain data: its durable record, its status, and its shapes on the wire.

A task (SEP-2663) is a durable view of a request the engine already hosts and
records: the request's stream holds its events and final answer, so the task's
own record only says what the stream cannot - which stream, whose, when it was
created, how long it lives, how often to poll, whether it was cancelled. Its
status is *derived* from the stream as the store holds it (`StreamView`), so any
node can answer `tasks/get`, and nothing has to be written when the work ends.

No I/O and no clock here (times are passed in): the rules of the extension -
a tool's `isError` result is `completed`, a JSON-RPC error is `failed`, an
expired or cancelled request is `cancelled`, `resultType` on every answer - are
tested without an event loop.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from mcp_resume_asgi.wire.sse import SSEError, SSEParser

#: The extension's identifier (capabilities, reserved method prefix `tasks/`).
EXTENSION = "io.modelcontextprotocol/tasks"
#: Requests that may be answered with a `CreateTaskResult` ("Supported Methods").
SUPPORTED_METHODS = frozenset({"tools/call"})
#: Largest record accepted back from the store (~300 bytes, plus the call it re-issues).
MAX_RECORD_BYTES = 8 * 1024 * 1024
#: Largest final event read back to inline a result (the policy's `max_event_bytes` bounds it too).
MAX_FINAL_BYTES = 16 * 1024 * 1024


class Status(enum.StrEnum):
    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"


TERMINAL = frozenset({Status.COMPLETED, Status.CANCELLED, Status.FAILED})


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """What the store keeps of a task, besides its request's stream."""

    stream_id: str
    principal: str | None
    """Who created it: only that principal may see it (anyone else gets "unknown")."""
    created_at: float
    """Unix time."""
    ttl_ms: int
    poll_interval_ms: int
    path: str
    """The app's MCP endpoint (the admission check asks the app there)."""
    version: str
    """The protocol revision of the request that became the task."""
    ended_at: float | None = None
    """When its work ended (the app returned), if it did."""
    cancelled_at: float | None = None
    """When a client asked to cancel it (`tasks/cancel`), if one did."""
    current: str | None = None
    """The stream of its current round (None: `stream_id`); a round ends with an
    `InputRequiredResult`, and the call issued again with the answers is the next one."""
    round: int = 0
    call: dict[str, Any] | None = None
    """The `tools/call` as the app saw it, to issue again with the client's `inputResponses`."""

    @property
    def current_stream(self) -> str:
        return self.current or self.stream_id

    def next_round(self, stream_id: str) -> TaskRecord:
        return dataclasses.replace(self, current=stream_id, round=self.round + 1, ended_at=None)

    def ttl_left_s(self, now: float) -> float:
        """How long the record must still be kept (at least a second: it is being written now)."""
        return max(1.0, self.created_at + self.ttl_ms / 1000 - now)

    def ended(self, now: float) -> TaskRecord:
        return dataclasses.replace(self, ended_at=now)

    def cancelled(self, now: float) -> TaskRecord:
        return self if self.cancelled_at is not None else dataclasses.replace(self, cancelled_at=now)

    def encode(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"))

    @classmethod
    def decode(cls, raw: str | None) -> TaskRecord | None:
        """The record stored as `raw`, or None for anything that is not one."""
        if raw is None or len(raw) > MAX_RECORD_BYTES:
            return None
        try:
            data = json.loads(raw)
            record = cls(**data) if isinstance(data, dict) else None
        except (ValueError, TypeError):
            return None
        if record is None or not _well_formed(record):
            return None
        return record


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _well_formed(r: TaskRecord) -> bool:
    return (
        isinstance(r.stream_id, str)
        and (r.principal is None or isinstance(r.principal, str))
        and _number(r.created_at)
        and isinstance(r.ttl_ms, int)
        and isinstance(r.poll_interval_ms, int)
        and isinstance(r.path, str)
        and isinstance(r.version, str)
        and (r.ended_at is None or _number(r.ended_at))
        and (r.cancelled_at is None or _number(r.cancelled_at))
        and (r.current is None or isinstance(r.current, str))
        and isinstance(r.round, int)
        and (r.call is None or isinstance(r.call, dict))
    )


@dataclass(frozen=True, slots=True)
class StreamView:
    """What the store holds of a task's request stream, as `tasks/get` found it."""

    exists: bool
    """False once the stream is gone (expired, deleted with its session, freed after a cancel)."""
    expired: bool = False
    """Nobody came back within its resume window: the app's work was cancelled."""
    final: bytes | None = None
    """The SSE frame of its final event (the request's answer), once recorded and still readable."""
    final_lost: bool = False
    """The answer was recorded but is no longer readable (evicted to stay within the store's budget)."""
    input_round: dict[str, Any] | None = None
    """The round's answer when it is an `InputRequiredResult` (the task goes on after it)."""
    inputs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The round's outstanding input requests by task key (`inputs.outstanding`)."""
    owner_gone: bool = False
    """The node running the request stopped (its heartbeat lapsed) before the answer."""

    @property
    def ended(self) -> bool:
        """The task has reached its last status (an input round's answer is not one)."""
        return (self.final is not None and self.input_round is None) or self.owner_gone


def iso(ts: float) -> str:
    """ISO 8601 in UTC, to the millisecond (`2025-11-25T10:30:00.000Z`)."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def message_of(frame: bytes) -> dict[str, Any] | None:
    """The JSON-RPC message an SSE frame carries, or None."""
    try:
        events = SSEParser(MAX_FINAL_BYTES).feed(frame if frame.endswith(b"\n\n") else frame + b"\n\n")
    except SSEError:
        return None
    for event in events:
        if not event.data:
            continue
        try:
            message = json.loads(event.data)
        except (ValueError, RecursionError):
            return None
        return message if isinstance(message, dict) else None
    return None


def answer_of(frame: bytes) -> dict[str, Any] | None:
    """The JSON-RPC response an SSE frame carries, or None."""
    message = message_of(frame)
    if message is not None and ("result" in message or "error" in message):
        return message
    return None


def outcome(frame: bytes) -> tuple[Status, dict[str, Any]]:
    """`completed` and the result (a tool's `isError` result too), or `failed` and the error."""
    message = answer_of(frame)
    if message is not None and isinstance(message.get("result"), dict) and "error" not in message:
        return Status.COMPLETED, message["result"]
    error = message.get("error") if message is not None else None
    if (
        isinstance(error, dict)
        and isinstance(error.get("code"), int)
        and isinstance(error.get("message"), str)
    ):
        return Status.FAILED, error
    return Status.FAILED, {"code": -32603, "message": "the task's result could not be read"}


def task_fields(
    task_id: str,
    record: TaskRecord,
    status: Status,
    *,
    status_message: str | None = None,
    updated_at: float | None = None,
) -> dict[str, Any]:
    """The `Task` object (without result, error or input requests)."""
    fields: dict[str, Any] = {"taskId": task_id, "status": str(status)}
    if status_message is not None:
        fields["statusMessage"] = status_message
    fields["createdAt"] = iso(record.created_at)
    fields["lastUpdatedAt"] = iso(updated_at if updated_at is not None else record.created_at)
    fields["ttlMs"] = record.ttl_ms
    fields["pollIntervalMs"] = record.poll_interval_ms
    return fields


def create_task_result(task_id: str, record: TaskRecord) -> dict[str, Any]:
    """The `CreateTaskResult` that answers the request instead of its own result."""
    return {"resultType": "task", **task_fields(task_id, record, Status.WORKING)}


def detailed_task(task_id: str, record: TaskRecord, view: StreamView) -> dict[str, Any]:
    """The `DetailedTask` for the task's state as the store holds it (the body of `tasks/get`)."""
    ended = record.ended_at
    # An `InputRequiredResult` ends a round, not the task (`inputs.py`).
    final = view.final if view.final is not None and view.input_round is None else None
    if final is not None:
        status, payload = outcome(final)
        if status is Status.COMPLETED:
            return {**task_fields(task_id, record, status, updated_at=ended), "result": payload}
        message = payload.get("message") if isinstance(payload.get("message"), str) else None
        return {
            **task_fields(task_id, record, status, status_message=message, updated_at=ended),
            "error": payload,
        }
    if view.final_lost:
        text = "the task's result is no longer available"
        return {
            **task_fields(task_id, record, Status.FAILED, status_message=text, updated_at=ended),
            "error": {"code": -32603, "message": text},
        }
    if record.cancelled_at is not None:
        return task_fields(
            task_id,
            record,
            Status.CANCELLED,
            status_message="The task was cancelled at the client's request.",
            updated_at=record.cancelled_at,
        )
    if view.owner_gone:
        text = "the server running the task stopped before it finished"
        return {
            **task_fields(task_id, record, Status.FAILED, status_message=text, updated_at=ended),
            "error": {"code": -32603, "message": text},
        }
    if not view.exists or view.expired:
        return task_fields(
            task_id,
            record,
            Status.CANCELLED,
            status_message="The task's work was stopped before it produced a result.",
            updated_at=ended,
        )
    if view.inputs:
        return {
            **task_fields(task_id, record, Status.INPUT_REQUIRED, updated_at=ended),
            "inputRequests": view.inputs,
        }
    return task_fields(task_id, record, Status.WORKING)


#: Why a task whose record the store lost before its TTL is `failed`.
STORE_LOST = "the store lost the task before its TTL (it restarted without persistence, or evicted it)"


def lost_task(task_id: str, record: TaskRecord) -> dict[str, Any]:
    """The `DetailedTask` of a task whose record the store lost (`record`: what its id says)."""
    return {
        **task_fields(task_id, record, Status.FAILED, status_message=STORE_LOST),
        "error": {"code": -32603, "message": STORE_LOST},
    }


def get_task_result(task_id: str, record: TaskRecord, view: StreamView) -> dict[str, Any]:
    """`GetTaskResult`: the detailed task, marked as the standard result of `tasks/get`."""
    return {"resultType": "complete", **detailed_task(task_id, record, view)}


#: `tasks/update` and `tasks/cancel` answer an empty acknowledgement.
EMPTY_ACK: dict[str, Any] = {"resultType": "complete"}
