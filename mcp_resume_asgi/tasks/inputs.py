"""A task's input requests and the client's answers to them, as plain data (no I/O, no clock).

An app asks its client during a task in one of two ways, and the task shows both the
same way (`status: "input_required"`, `inputRequests` under keys of the task's own):

* **a server-to-client request on its stream** (2025 revisions: elicitation, sampling,
  roots). The engine records it as a pending input of the request's stream; the
  client's answer in `tasks/update` goes to the app as the JSON-RPC response to that
  request id, as if the client had POSTed it (`http/client_answers.py`).
* **an `InputRequiredResult`** (2026-07-28 multi round-trip requests: `resultType:
  "input_required"`, `inputRequests`, `requestState`) as the answer of the task's
  current round. Once every request of the round is answered, the call is issued to
  the app again with `inputResponses` (the app's own keys) and `requestState`, and
  the task continues on that new request (the next round).

Keys are unique over the task's life (the extension requires it): the round and the
app's key (`"1/name"`), or the round and the request's event number (`"0#3"`). A
response for a key that is not outstanding (never issued, already answered, of an
earlier round) is ignored, as the extension says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

INPUT_REQUIRED = "input_required"
#: Largest number of input requests shown for one task (an app asking more is cut off here).
MAX_INPUTS = 64


def mrtr_of(result: Any) -> tuple[dict[str, Any], str | None] | None:
    """The `inputRequests` and `requestState` of an `InputRequiredResult`; None for any other result."""
    if not isinstance(result, dict) or result.get("resultType") != INPUT_REQUIRED:
        return None
    requests = result.get("inputRequests")
    state = result.get("requestState")
    requests = (
        {k: v for k, v in requests.items() if isinstance(v, dict)} if isinstance(requests, dict) else {}
    )
    return requests, state if isinstance(state, str) else None


def round_key(round_no: int, app_key: str) -> str:
    """The task's key for the app's `inputRequests` key `app_key` in round `round_no`."""
    return f"{round_no}/{app_key}"


def stream_key(round_no: int, seq: int) -> str:
    """The task's key for the server-to-client request recorded as event `seq` of round `round_no`."""
    return f"{round_no}#{seq}"


@dataclass(frozen=True, slots=True)
class Pending:
    """One outstanding input request of a task."""

    request: dict[str, Any]
    """What the client is shown: `{"method", "params"}`."""
    message_id: Any = None
    """A server-to-client request's JSON-RPC id (the app waits for the response to it)."""
    app_key: str | None = None
    """An `InputRequiredResult`'s own key (the re-issued call answers it under that key)."""


def as_request(message: Any) -> dict[str, Any] | None:
    """`{"method", "params"}` of a JSON-RPC request, None for anything else."""
    if not isinstance(message, dict) or not isinstance(message.get("method"), str):
        return None
    request: dict[str, Any] = {"method": message["method"]}
    if isinstance(message.get("params"), dict):
        request["params"] = message["params"]
    return request


def outstanding(
    round_no: int,
    *,
    result: Any = None,
    asked: Sequence[tuple[Any, int, Any]] = (),
    answered: frozenset[str] = frozenset(),
) -> dict[str, Pending]:
    """The round's input requests not answered yet, by task key.

    `result`: the round's answer if the app gave one (an `InputRequiredResult` asks);
    `asked`: `(message id, seq, message)` of the server-to-client requests its stream
    still waits for; `answered`: task keys the client has answered already.
    """
    out: dict[str, Pending] = {}
    mrtr = mrtr_of(result)
    if mrtr is not None:
        for app_key, request in mrtr[0].items():
            shown = as_request(request)
            key = round_key(round_no, app_key)
            if shown is not None and key not in answered:
                out[key] = Pending(shown, app_key=app_key)
    for message_id, seq, message in asked:
        shown = as_request(message)
        key = stream_key(round_no, seq)
        if shown is not None and key not in answered:
            out[key] = Pending(shown, message_id=message_id)
    return dict(list(out.items())[:MAX_INPUTS])


@dataclass(slots=True)
class Update:
    """What a `tasks/update` does: answers to deliver and to keep, or why it is refused."""

    to_app: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """`(key, JSON-RPC response)` to send to the app (its server-to-client requests)."""
    kept: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """`(key, response)` for the round's `InputRequiredResult` (kept until the round is answered)."""
    ignored: list[str] = field(default_factory=list)
    error: str | None = None


def plan_update(pending: dict[str, Pending], responses: Any) -> Update:
    """Match `inputResponses` with what is outstanding: unknown or answered keys are ignored."""
    update = Update()
    if not isinstance(responses, dict):
        update.error = "params.inputResponses must be an object"
        return update
    for key, response in responses.items():
        entry = pending.get(key)
        if entry is None:
            update.ignored.append(key)
        elif not isinstance(response, dict):
            update.error = f"inputResponses[{key!r}] must be an object (the client's result)"
            return update
        elif entry.app_key is not None:
            update.kept.append((key, response))
        else:
            update.to_app.append((key, {"jsonrpc": "2.0", "id": entry.message_id, "result": response}))
    return update


def next_round(
    call: dict[str, Any], round_no: int, result: Any, answers: dict[str, Any], request_id: Any
) -> dict[str, Any] | None:
    """The call issued again once every request of the round's `InputRequiredResult` is
    answered (`answers`: task key -> response), with the app's keys and its `requestState`;
    None while some are still outstanding (the task stays `input_required`)."""
    mrtr = mrtr_of(result)
    if mrtr is None:
        return None
    requests, state = mrtr
    responses: dict[str, Any] = {}
    for app_key in requests:
        key = round_key(round_no, app_key)
        if key not in answers:
            return None
        responses[app_key] = answers[key]
    params = {k: v for k, v in call.get("params", {}).items() if k not in ("inputResponses", "requestState")}
    params["inputResponses"] = responses
    if state is not None:
        params["requestState"] = state
    return {"jsonrpc": "2.0", "id": request_id, "method": call["method"], "params": params}
