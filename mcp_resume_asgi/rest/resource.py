"""The SEP-1597 tool-call resource, its ETag, and the conditional-request rules around it.

Sans-IO. A REST tool call is a Tasks-extension task seen through HTTP, so the resource
is built from what the Tasks layer says of the call - the `DetailedTask` that
`tasks/get` returns, or the plain JSON-RPC answer of a call that never became a task -
plus the call's request (the PUT body) and the latest `notifications/progress` the app
sent for it:

    {"toolname", "id", "etag", "status", "request",
     "samplingRequest" | "elicitationRequest", "progress", "result", "error"}

Statuses: `working` -> `running`; `input_required` -> `awaitingElicitationResult` or
`awaitingSamplingResult` (after the first outstanding input request's method);
`completed` -> `success`, except a result with `isError: true`, which is `failed`
with its `result` kept and an `error` saying so; `failed` -> `failed` with the JSON-RPC
error; `cancelled` -> `canceled`. A call whose PUT is still on its way to the app is
`submitted`.

The ETag is strong: a digest of the resource's canonical JSON (without the `etag`
member itself), so every node computes the same one for the same state and a client
can compare across nodes. The rules of the conditional requests are plain functions:
`If-None-Match` -> 304, `If-Match` absent -> 428 or stale -> 412, and a PUT's
`Idempotency-Key` against the one the call was created with.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

ELICITATION = "elicitation/create"
SAMPLING = "sampling/createMessage"
#: Hex digits of the digest kept in an ETag (80 bits: collisions are not a concern).
ETAG_HEX = 20
#: Longest text taken from an `isError` result's content for the `error` message.
MAX_ERROR_TEXT = 1000
#: Longest Idempotency-Key accepted (the same bound as the Streamable HTTP side).
MAX_IDEMPOTENCY_KEY = 255


class CallStatus(enum.StrEnum):
    SUBMITTED = "submitted"
    RUNNING = "running"
    AWAITING_SAMPLING = "awaitingSamplingResult"
    AWAITING_ELICITATION = "awaitingElicitationResult"
    SUCCESS = "success"
    FAILED = "failed"
    CANCELED = "canceled"


TERMINAL = frozenset({CallStatus.SUCCESS, CallStatus.FAILED, CallStatus.CANCELED})
AWAITING = frozenset({CallStatus.AWAITING_SAMPLING, CallStatus.AWAITING_ELICITATION})
#: Statuses a client polls in (the `Retry-After` hint goes with them).
IN_PROGRESS = frozenset({CallStatus.SUBMITTED, CallStatus.RUNNING})
_AWAITING_OF = {ELICITATION: CallStatus.AWAITING_ELICITATION, SAMPLING: CallStatus.AWAITING_SAMPLING}
_REQUEST_FIELD = {
    CallStatus.AWAITING_ELICITATION: "elicitationRequest",
    CallStatus.AWAITING_SAMPLING: "samplingRequest",
}


@dataclass(frozen=True, slots=True)
class InputRequest:
    """The input request a call waits for: what `advance` answers."""

    key: str
    """The task's key for it (`tasks/update` answers under it)."""
    method: str
    params: dict[str, Any]


def first_input(task: dict[str, Any]) -> InputRequest | None:
    """The first outstanding elicitation or sampling request of an `input_required` task.

    The SEP shows one request at a time; a task asking several at once shows them one
    after another, each `advance` answering the one shown (the ETag changes in between).
    """
    requests = task.get("inputRequests")
    if task.get("status") != "input_required" or not isinstance(requests, dict):
        return None
    for key, request in requests.items():
        if isinstance(request, dict) and request.get("method") in _AWAITING_OF:
            params = request.get("params")
            return InputRequest(str(key), str(request["method"]), params if isinstance(params, dict) else {})
    return None


def state_of_task(task: dict[str, Any]) -> dict[str, Any]:
    """The resource's `status` and outcome members for a `tasks/get` result."""
    status = task.get("status")
    if status == "completed":
        return _completed(task.get("result"))
    if status == "failed":
        error = task.get("error")
        return {
            "status": CallStatus.FAILED,
            "error": error if isinstance(error, dict) else {"message": "failed"},
        }
    if status == "cancelled":
        return {"status": CallStatus.CANCELED}
    pending = first_input(task)
    if pending is not None:
        awaiting = _AWAITING_OF[pending.method]
        return {"status": awaiting, _REQUEST_FIELD[awaiting]: pending.params}
    return {"status": CallStatus.RUNNING}


def state_of_answer(answer: dict[str, Any]) -> dict[str, Any]:
    """The same for the plain JSON-RPC answer of a call that did not become a task."""
    if "error" in answer:
        error = answer["error"]
        return {
            "status": CallStatus.FAILED,
            "error": error if isinstance(error, dict) else {"message": "failed"},
        }
    return _completed(answer.get("result"))


def _completed(result: Any) -> dict[str, Any]:
    if not isinstance(result, dict):
        return {"status": CallStatus.FAILED, "error": {"message": "the tool's result could not be read"}}
    kept = {k: v for k, v in result.items() if k != "resultType"}
    if result.get("isError") is True:
        return {"status": CallStatus.FAILED, "result": kept, "error": {"message": _error_text(kept)}}
    return {"status": CallStatus.SUCCESS, "result": kept}


def _error_text(result: dict[str, Any]) -> str:
    content = result.get("content")
    if isinstance(content, list):
        texts = [c["text"] for c in content if isinstance(c, dict) and isinstance(c.get("text"), str)]
        if texts:
            return " ".join(texts)[:MAX_ERROR_TEXT]
    return "the tool reported an error"


def progress_of(notification: Any) -> dict[str, Any] | None:
    """A `notifications/progress` message's params as the resource shows them (no token)."""
    if not isinstance(notification, dict) or notification.get("method") != "notifications/progress":
        return None
    params = notification.get("params")
    if not isinstance(params, dict):
        return None
    return {k: v for k, v in params.items() if k not in ("progressToken", "_meta")}


def build(
    tool: str,
    call_id: str,
    request: Any,
    state: dict[str, Any],
    progress: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The tool-call resource, with its ETag; `state` from `state_of_task` / `state_of_answer`
    (`{"status": "submitted"}` before the app has the call)."""
    fields: dict[str, Any] = {"toolname": tool, "id": call_id, "status": str(state["status"])}
    fields["request"] = request
    for name in ("samplingRequest", "elicitationRequest"):
        if name in state:
            fields[name] = state[name]
    if progress is not None and state["status"] not in TERMINAL:
        fields["progress"] = progress
    for name in ("result", "error"):
        if name in state:
            fields[name] = state[name]
    return {"toolname": tool, "id": call_id, "etag": etag_of(fields), **fields}


def etag_of(fields: dict[str, Any]) -> str:
    """The digest of the resource's canonical JSON (the same on every node for the same state)."""
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()[:ETAG_HEX]


def etag_header(etag: str) -> bytes:
    return f'"{etag}"'.encode()


def _tags(value: str) -> list[tuple[bool, str]] | None:
    """The entity tags of an `If-Match` / `If-None-Match` value as (weak, opaque tag); None for `*`."""
    if value.strip() == "*":
        return None
    tags = []
    for part in value.split(","):
        part = part.strip()
        weak = part.startswith("W/")
        if weak:
            part = part[2:]
        if len(part) >= 2 and part[0] == part[-1] == '"':
            part = part[1:-1]
        if part:
            tags.append((weak, part))
    return tags


def not_modified(if_none_match: str | None, etag: str) -> bool:
    """Whether a GET with this `If-None-Match` gets 304 (weak comparison, RFC 9110 13.1.2)."""
    if if_none_match is None:
        return False
    tags = _tags(if_none_match)
    return tags is None or any(tag == etag for _, tag in tags)


def precondition_status(if_match: str | None, etag: str) -> int | None:
    """428 without `If-Match`, 412 when it names another state (strong comparison), else None."""
    if if_match is None or not if_match.strip():
        return 428
    tags = _tags(if_match)
    if tags is None or any(not weak and tag == etag for weak, tag in tags):
        return None
    return 412


def valid_idempotency_key(value: str | None) -> bool:
    return (
        value is not None
        and 0 < len(value) <= MAX_IDEMPOTENCY_KEY
        and value.isascii()
        and value.isprintable()
    )


def retry_after_s(poll_interval_ms: Any) -> int:
    """The `Retry-After` hint (whole seconds, at least 1) for a task's `pollIntervalMs`."""
    number = isinstance(poll_interval_ms, int | float) and not isinstance(poll_interval_ms, bool)
    if number and math.isfinite(poll_interval_ms) and poll_interval_ms > 0:
        return max(1, math.ceil(float(poll_interval_ms) / 1000))
    return 1
