"""Policies: the knobs that decide how each stream behaves, as plain validated data.

Different calls want different treatment - a 10-minute report tool should be cut
loose from its connection early and kept resumable long; a quick `tools/list`
should not be touched - so a policy is chosen per request by `Route`s (path,
JSON-RPC method, tool name; first match wins, the middleware's `policy` is the
default). A policy is immutable and checked when it is built, so a typo fails at
start-up, not on the first request.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


def _check_positive(
    name: str, value: float | None, *, allow_none: bool = True, allow_zero: bool = False
) -> None:
    if value is None:
        if not allow_none:
            raise ValueError(f"{name} is required")
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be a {'non-negative' if allow_zero else 'positive'} finite number")


@dataclass(frozen=True, slots=True)
class Policy:
    """How one stream is recorded, disconnected and kept.

    Times are in seconds unless the name says otherwise. `None` switches a feature off.
    """

    retry_ms: int | None = 1000
    """Sent as the SSE `retry:` field in priming events and before every at-will close."""
    max_connection_s: float | None = None
    """Close a client connection this long after it attached (the client resumes)."""
    idle_disconnect_s: float | None = None
    """Close a client connection after this long without an event."""
    disconnect_on_input_request: bool = True
    """Close right after a server-to-client request (SEP-1335: the server waits for input
    by disconnecting). Clients following the `Link` URL rely on it."""
    max_wait_s: float = 60.0
    """Resume window: how long a stream with no client attached lives before the app's
    work is cancelled and everything is freed."""
    max_events_per_stream: int = 10_000
    max_bytes_per_stream: int = 8 * 1024 * 1024
    """Per-stream retention caps; older events are dropped beyond them and a client
    resuming from before the gap is told so."""
    upgrade_json_after_s: float | None = None
    """Turn a JSON response that has not started after this long into a resumable SSE
    stream (only when the client accepts `text/event-stream`)."""
    keepalive_s: float | None = 15.0
    """Send an SSE comment to an attached client after this long without events."""
    retain_completed_s: float = 60.0
    """How long a finished stream stays replayable for a client that missed its end."""
    max_event_bytes: int = 16 * 1024 * 1024
    """Largest single event accepted from the app."""
    soft_deadline_s: float | None = None
    """Resume-token layer: answer a request still running after this long with an interim
    result carrying `_meta.nextResumeToken` (only for clients that opted in)."""
    task_after_s: float | None = None
    """Tasks layer (SEP-2663): answer a `tools/call` of a client that declared the
    `io.modelcontextprotocol/tasks` extension with a `CreateTaskResult` - None never,
    0 at once (as soon as the app has read the request), > 0 only when the call is still
    running after this long (a fast call keeps its plain result). Counted from the request's
    arrival (when the middleware takes it on, its body read), however long the app takes to
    start its answer."""
    task_required: bool = False
    """Tasks layer: the route's calls are only served as tasks; a client that did not
    declare the extension is answered -32021 (missing required client capability)."""
    task_ttl_s: float = 3600.0
    """Tasks layer: how long a task lives from its creation (`ttlMs`): its work is kept
    running and its record and result readable that long, then both are freed."""
    task_poll_interval_ms: int = 1000
    """Tasks layer: the `pollIntervalMs` suggested to the client."""
    max_tasks_per_principal: int | None = 1000
    """Tasks layer: the most task records one principal holds at a time (None: no bound).
    A record counts from its task's creation to the end of its `task_ttl_s`, finished or
    not, as it is kept that long; callers without a principal share one bound; each route's
    calls are held to its own value. A call that would pass it is not made a task: it runs
    as a plain request and its client gets its plain result - or, found over the bound only
    when it was to become a task (the principal known once the app read the request, or a
    race for the last place) by a client that cannot come back for a plain result
    (2026-07-28), a JSON-RPC error (-32000) and the call is cancelled
    (`tasks/limits.py`)."""
    rerun_on_loss: bool = False
    """The route's calls are safe to run again (idempotent tools): when the node running one
    dies (SIGKILL, a lost heartbeat) before its answer, another node runs the stored request
    again under the same stream or task id, and its client sees the call complete.
    The request (its body and headers, up to `engine.rerun.MAX_REQUEST_BYTES`) and its caller
    (principal, user, credentials) are kept in the store while the call runs, and deleted once
    it is answered. A shared store only; needs an app that serves the request on any node (a
    stateless app, or a 2026-07-28 request: a 2025 session lives in the memory of one node)."""

    def __post_init__(self) -> None:
        if self.retry_ms is not None and (
            isinstance(self.retry_ms, bool) or not isinstance(self.retry_ms, int) or self.retry_ms < 0
        ):
            raise ValueError("retry_ms must be a non-negative int or None")
        _check_positive("max_connection_s", self.max_connection_s)
        _check_positive("idle_disconnect_s", self.idle_disconnect_s)
        _check_positive("max_wait_s", self.max_wait_s, allow_none=False)
        _check_positive("upgrade_json_after_s", self.upgrade_json_after_s, allow_zero=True)
        _check_positive("keepalive_s", self.keepalive_s)
        _check_positive("soft_deadline_s", self.soft_deadline_s)
        _check_positive("retain_completed_s", self.retain_completed_s, allow_none=False, allow_zero=True)
        _check_positive("task_after_s", self.task_after_s, allow_zero=True)
        _check_positive("task_ttl_s", self.task_ttl_s, allow_none=False)
        if not isinstance(self.task_required, bool):
            raise TypeError("task_required must be a bool")
        if self.task_required and self.task_after_s is None:
            raise ValueError("task_required needs task_after_s (when the call becomes a task)")
        if (
            isinstance(self.task_poll_interval_ms, bool)
            or not isinstance(self.task_poll_interval_ms, int)
            or self.task_poll_interval_ms <= 0
        ):
            raise ValueError("task_poll_interval_ms must be a positive int")
        if self.max_tasks_per_principal is not None and (
            isinstance(self.max_tasks_per_principal, bool)
            or not isinstance(self.max_tasks_per_principal, int)
            or self.max_tasks_per_principal <= 0
        ):
            raise ValueError("max_tasks_per_principal must be a positive int or None")
        if not isinstance(self.rerun_on_loss, bool):
            raise TypeError("rerun_on_loss must be a bool")
        if not isinstance(self.disconnect_on_input_request, bool):
            raise TypeError("disconnect_on_input_request must be a bool")
        for name in ("max_events_per_stream", "max_bytes_per_stream", "max_event_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int")

    named: frozenset[str] = field(default=frozenset(), init=False, repr=False, compare=False)
    """The fields its caller gave (a copy made by `replace` names them all). A route's policy
    overrides only these of the default's and inherits the rest (`RouteTable`)."""

    def replace(self, **changes: Any) -> Policy:
        return dataclasses.replace(self, **changes)

    def over(self, default: Policy) -> Policy:
        """`default` with the fields this policy names taken from it."""
        if self.named >= _POLICY_FIELDS:
            return self
        return dataclasses.replace(default, **{name: getattr(self, name) for name in self.named})


_POLICY_FIELDS = frozenset(f.name for f in dataclasses.fields(Policy) if f.init)
_POSITIONAL = tuple(f.name for f in dataclasses.fields(Policy) if f.init)
_dataclass_init = Policy.__init__


def _init_naming_fields(self: Policy, *args: Any, **given: Any) -> None:
    """The dataclass's own `__init__`, then `named` set to the fields the caller gave."""
    _dataclass_init(self, *args, **given)
    object.__setattr__(self, "named", frozenset((*_POSITIONAL[: len(args)], *given)))


Policy.__init__ = _init_naming_fields  # type: ignore[method-assign]


def running_ttl(policy: Policy) -> float:
    """The store TTL of what a running stream writes (its record, its cancel binding).

    Expiry is driven by the owner (`max_wait_s`); the TTL only reclaims the streams of a
    dead owner.
    """
    return policy.max_wait_s * 2 + 3600


@dataclass(frozen=True, slots=True)
class Route:
    """Chooses `policy` for requests matching every given pattern (shell-style globs).

    `path` matches the HTTP path, `method` the JSON-RPC method, `tool` the name in a
    `tools/call`. A route naming `tool` matches only `tools/call` requests.
    """

    policy: Policy
    path: str | None = None
    method: str | None = None
    tool: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.policy, Policy):
            raise TypeError("Route.policy must be a Policy")
        if self.path is None and self.method is None and self.tool is None:
            raise ValueError("a Route needs at least one of path, method, tool")

    def matches(self, path: str, method: str | None, tool: str | None) -> bool:
        if self.path is not None and not fnmatch.fnmatchcase(path, self.path):
            return False
        if self.method is not None and (method is None or not fnmatch.fnmatchcase(method, self.method)):
            return False
        return not (self.tool is not None and (tool is None or not fnmatch.fnmatchcase(tool, self.tool)))


RoutesSpec = Sequence[Route] | Mapping[str, Policy]


def _bad_route_key(key: str) -> str:
    """The error for a routes key without a known prefix, with the likeliest intended one."""
    message = f"route key {key!r} must look like 'tool:<glob>', 'method:<glob>' or 'path:<glob>'"
    if ":" not in key and key:
        kind = "path" if key.startswith("/") else "method" if "/" in key else "tool"
        message += f"; did you mean '{kind}:{key}'?"
    return message


class RouteTable:
    """First matching route wins; `default` answers everything else.

    A route's policy overrides only the fields it names (`Policy.named`) and inherits the
    others from `default`: `Route(tool="report", policy=Policy(max_connection_s=20))` keeps
    the default's `retry_ms`.

    A mapping is accepted as shorthand: keys `"tool:<glob>"`, `"method:<glob>"`,
    `"path:<glob>"`, in insertion order. A key without one of these prefixes is
    refused: a bare `"slow"` read as a method glob matched nothing, silently.
    """

    def __init__(self, default: Policy, routes: RoutesSpec | None = None) -> None:
        if not isinstance(default, Policy):
            raise TypeError("policy must be a Policy")
        self.default = default
        self.routes: tuple[Route, ...] = tuple(
            dataclasses.replace(route, policy=route.policy.over(default))
            for route in self._normalise(routes or ())
        )

    @staticmethod
    def _normalise(routes: RoutesSpec) -> tuple[Route, ...]:
        if isinstance(routes, Mapping):
            out = []
            for key, policy in routes.items():
                if not isinstance(key, str):
                    raise TypeError("route keys must be strings")
                kind, _, pattern = key.partition(":")
                if kind not in ("tool", "method", "path") or not pattern:
                    raise ValueError(_bad_route_key(key))
                out.append(Route(policy=policy, **{kind: pattern}))
            return tuple(out)
        result = tuple(routes)
        for route in result:
            if not isinstance(route, Route):
                raise TypeError("routes must be Route objects or a mapping of patterns to Policy")
        return result

    def choose(self, path: str, method: str | None = None, tool: str | None = None) -> tuple[int, Policy]:
        """The index of the first matching route (-1 for the default) and its policy."""
        for index, route in enumerate(self.routes):
            if route.matches(path, method, tool):
                return index, route.policy
        return -1, self.default

    def by_index(self, index: int) -> Policy:
        return self.routes[index].policy if 0 <= index < len(self.routes) else self.default
