"""Multi round-trip requests (2026-07-28, SEP-2322) on the client side: answer, then ask again.

Why the helper does it for the application: on 2026-07-28 a server no longer sends
its own requests (elicitation, sampling, roots) on a stream; it answers the
client's `tools/call`, `prompts/get` or `resources/read` with an
`InputRequiredResult` (`resultType: "input_required"`) carrying `inputRequests`
and an opaque `requestState`, and expects the same request again - a new JSON-RPC
id - with `inputResponses` and that `requestState`. The application asked for a
tool's result, and already has a callback for exactly these requests (the
session's `on_request`), so it sees neither the rounds nor the new era.

The rules, from the MRTR page:

* each round answers every entry of `inputRequests` (keys are the server's), and
  the retry carries those answers under the same keys;
* `requestState` is echoed byte for byte, and never sent when the last answer had
  none; the answers and state of one round go only to that round's retry;
* an `InputRequiredResult` with neither field breaks the protocol; one with only
  `requestState` is retried without answers, after a short growing pause (the
  server is waiting for something outside the exchange);
* rounds are bounded (`max_rounds`): a server may ask again, not forever.

:class:`InputRounds` holds the decisions and does no I/O; :func:`follow_input_required`
is the loop.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import anyio

from .errors import SessionError

logger = logging.getLogger(__name__)

INPUT_REQUIRED: Final = "input_required"
#: The requests a server may answer with an `InputRequiredResult` (MRTR, "Supported Requests").
INPUT_METHODS: Final = frozenset({"tools/call", "prompts/get", "resources/read"})
DEFAULT_MAX_ROUNDS: Final = 10
#: Bounds on one `InputRequiredResult`: how many requests, how long a key.
MAX_INPUT_REQUESTS: Final = 64
_MAX_KEY: Final = 1024
#: Pauses before retrying a round that carried only `requestState`: 50 ms doubling to 250 ms.
_STATE_ONLY_FIRST_S: Final = 0.05
_STATE_ONLY_MAX_S: Final = 0.25

JSONObject = dict[str, Any]
#: `(key, method, params) -> result` for one entry of `inputRequests`.
AnswerInput = Callable[[str, str, JSONObject], Awaitable[JSONObject]]
#: `params -> result`: the original request sent again (a new JSON-RPC id).
Reissue = Callable[[JSONObject], Awaitable[JSONObject]]


def is_input_required(result: Mapping[str, Any]) -> bool:
    return result.get("resultType") == INPUT_REQUIRED


@dataclass(frozen=True)
class Done:
    result: JSONObject


@dataclass(frozen=True)
class Ask:
    """Answer these (key -> (method, params)), then `InputRounds.retry` with the answers."""

    requests: dict[str, tuple[str, JSONObject]]


@dataclass(frozen=True)
class Retry:
    """Send the request again with these params, after `delay_s`."""

    params: JSONObject
    delay_s: float


class InputRounds:
    """One request's multi round-trip exchange: what comes next; no I/O, no clock."""

    def __init__(
        self, method: str, params: Mapping[str, Any] | None, max_rounds: int = DEFAULT_MAX_ROUNDS
    ) -> None:
        if max_rounds < 1:
            raise ValueError("max_rounds must be at least 1")
        self.method = method
        self.original = dict(params or {})
        self.max_rounds = max_rounds
        self.rounds = 0
        self._state: str | None = None
        self._state_only_s = _STATE_ONLY_FIRST_S

    def observe(self, result: Mapping[str, Any]) -> Done | Ask | Retry:
        """The next step after `result` (the first answer, or a retry's).

        Raises :class:`SessionError` for an `InputRequiredResult` that breaks the
        protocol, or one more than `max_rounds` allow.
        """
        if not is_input_required(result):
            return Done(dict(result))
        self.rounds += 1
        if self.rounds > self.max_rounds:
            raise SessionError(f"{self.method!r} still asks for input after {self.max_rounds} rounds")
        state = result.get("requestState")
        if state is not None and not isinstance(state, str):
            raise SessionError(f"{self.method!r}: requestState is not a string")
        self._state = state
        requests = self._requests(result.get("inputRequests"))
        if requests:
            self._state_only_s = _STATE_ONLY_FIRST_S
            return Ask(requests)
        if state is None:
            raise SessionError(
                f"{self.method!r} answered input_required with neither inputRequests nor requestState"
            )
        delay, self._state_only_s = self._state_only_s, min(self._state_only_s * 2, _STATE_ONLY_MAX_S)
        return Retry(self._again(None), delay)

    def retry(self, responses: Mapping[str, JSONObject]) -> Retry:
        """The retry that carries this round's answers (at once)."""
        return Retry(self._again(dict(responses)), 0.0)

    def _again(self, responses: JSONObject | None) -> JSONObject:
        params = {k: v for k, v in self.original.items() if k not in ("inputResponses", "requestState")}
        if responses is not None:
            params["inputResponses"] = responses
        if self._state is not None:
            params["requestState"] = self._state
        return params

    def _requests(self, requests: Any) -> dict[str, tuple[str, JSONObject]]:
        if requests is None:
            return {}
        if not isinstance(requests, dict):
            raise SessionError(f"{self.method!r}: inputRequests is not an object")
        if len(requests) > MAX_INPUT_REQUESTS:
            raise SessionError(f"{self.method!r}: more than {MAX_INPUT_REQUESTS} input requests at once")
        out: dict[str, tuple[str, JSONObject]] = {}
        for key, request in requests.items():
            method = request.get("method") if isinstance(request, dict) else None
            params = request.get("params", {}) if isinstance(request, dict) else None
            if len(key) > _MAX_KEY or not isinstance(method, str) or not isinstance(params, dict):
                raise SessionError(f"{self.method!r}: input request {key[:64]!r} is not a request")
            out[key] = (method, params)
        return out


async def follow_input_required(
    first: JSONObject,
    *,
    method: str,
    params: Mapping[str, Any] | None,
    reissue: Reissue,
    answer_input: AnswerInput,
    max_rounds: int = DEFAULT_MAX_ROUNDS,
) -> JSONObject:
    """From a request's first answer to its result: every `InputRequiredResult` answered
    (`answer_input` per entry, in order) and the request sent again (`reissue`)."""
    rounds = InputRounds(method, params, max_rounds)
    step = rounds.observe(first)
    while not isinstance(step, Done):
        if isinstance(step, Ask):
            responses = {key: await answer_input(key, m, p) for key, (m, p) in step.requests.items()}
            logger.debug("%s: round %d answered %d input request(s)", method, rounds.rounds, len(responses))
            step = rounds.retry(responses)
        await anyio.sleep(step.delay_s)
        step = rounds.observe(await reissue(step.params))
    return step.result
