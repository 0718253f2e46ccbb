"""The bound on how many task records one principal holds (`Policy.max_tasks_per_principal`).

Task records are bounded: without a bound, a single caller could fill the store with tasks (each keeps its work, its stream and its record
for `task_ttl_s`). Each task record is a member of its principal's index in the
store, `tasks:<digest of the principal>` (`Store.index_add`), expiring with the
record, so the count is what the store holds now, over every node, and a task
frees its place when its record goes (finished tasks count until then: their
records are kept). The add is atomic: concurrent calls never pass the bound.

A call that would pass it is not made a task. SEP-2663 lets a server answer any
call plainly ("at its own discretion and on a per-request basis"; a declaring
client "MUST be prepared to handle either"), so:

* Over the bound already when the call arrives (its principal known from the
  scope): it is served as a plain request; its client gets the plain result when
  it comes, as if the Tasks layer were not there.
* Found over it only when the call was to become a task (the principal is known
  once the app read the request - auth inside the app - or it lost the race for
  the last place): the answer is due now. A client that can come back to its
  stream (2025-11-25, primed, resumable) has the stream closed as an at-will
  close does (`retry:`): it resumes and gets the plain result when it comes. Any
  other (2026-07-28: a close is a cancel and nobody resumes) is answered with a
  JSON-RPC error (`TOO_MANY_TASKS`, `data.maxTasks`) and the call is cancelled,
  for nobody would be there for its result.

Callers with no principal (no auth) share one index, `tasks:anonymous`: together
they hold at most the bound (per-caller identity without auth would be forgeable).
Each refusal is logged once with its cause: a warning the first time in a minute
for a principal, then at debug (a caller at its bound cannot flood the log).
"""

from __future__ import annotations

import logging
from typing import Any

from cachetools import TTLCache

from mcp_resume_asgi.engine.port import HostedStreams
from mcp_resume_asgi.policy import Policy
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import Store
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.sse import encode_payload, retry_frame

logger = logging.getLogger(__name__)

ANONYMOUS_INDEX = keys.ANONYMOUS_TASK_INDEX
#: The JSON-RPC error of a call refused a task where it cannot wait for its plain result
#: (implementation-defined server error range).
TOO_MANY_TASKS = -32000
#: How often, at most, a principal's refusals are logged as a warning.
WARN_EVERY_S = 60.0

_warned: TTLCache[str, bool] = TTLCache(maxsize=1024, ttl=WARN_EVERY_S)


#: The store index of a principal's tasks (`store/keys.py`; the name stays for callers).
index_of = keys.task_index


async def has_room(store: Store, principal: str | None, cap: int) -> bool:
    """Whether the principal holds fewer than `cap` task records (a check, not a claim)."""
    return await store.index_count(keys.task_index(principal)) < cap


async def claim(store: Store, principal: str | None, stream_id: str, expires_at: float, cap: int) -> bool:
    """Take a place for the task of `stream_id` until `expires_at`; False at the bound."""
    return await store.index_add(keys.task_index(principal), stream_id, expires_at, cap=cap)


def log_refusal(principal: str | None, cap: int, stream_id: str, outcome: str) -> None:
    index = keys.task_index(principal)
    level = logging.DEBUG if index in _warned else logging.WARNING
    _warned[index] = True
    logger.log(
        level,
        "stream %s is not made a task: its caller (%s) holds %d task records, "
        "Policy.max_tasks_per_principal; %s",
        stream_id,
        index,
        cap,
        outcome,
    )


def refused_answer(
    port: HostedStreams, stream_id: str, request_id: Any, policy: Policy, principal: str | None
) -> bytes:
    """The first connection's answer when its call, due to become a task, may not (see the
    module docstring): a close its client resumes from, or an error and the call cancelled."""
    cap = policy.max_tasks_per_principal
    assert cap is not None
    if port.resumable(stream_id):
        log_refusal(
            principal, cap, stream_id, "it goes on as a plain request; its client resumes for the result"
        )
        return b"" if policy.retry_ms is None else retry_frame(policy.retry_ms)
    log_refusal(principal, cap, stream_id, "answered with an error, the call cancelled")
    port.stop(stream_id, "too many tasks for this caller")
    message = p.error_message(
        request_id,
        TOO_MANY_TASKS,
        f"Too many tasks: this caller already holds {cap} tasks, the most this server keeps "
        "for one caller; retry once one of them has expired",
        {"maxTasks": cap},
    )
    return encode_payload(p.dumps(message))
