"""Cancelling by `notifications/cancelled` (the resumable-streams opt-in), decided on plain data:
`cancel_notices.py` and `StreamCore.cancel_asked`, without an event loop."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcp_resume_asgi.core.cancel_notices import (
    MAX_REASON_CHARS,
    CancelNotice,
    Where,
    cancellable,
    named,
    notice_of,
    valid_key,
    where,
)
from mcp_resume_asgi.core.stream import Reason, StreamCore
from mcp_resume_asgi.policy import Policy
from mcp_resume_asgi.store.index_bounds import MAX_INDEX_NAME_BYTES
from mcp_resume_asgi.store.keys import CANCEL_BINDING_PREFIX as INDEX_PREFIX
from mcp_resume_asgi.store.keys import cancel_binding as binding
from mcp_resume_asgi.wire import jsonrpc as p

MODERN = "2026-07-28"
OPTED_IN = {p.CLIENT_CAPABILITIES_META: {"extensions": {p.RESUMABLE_STREAMS_EXTENSION: {}}}}


def message(params: dict[str, Any] | None = None, **changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": 7, "reason": "stop", "_meta": OPTED_IN, **(params or {})},
    }
    return {**base, **changes}


def test_an_opted_in_2026_notice_is_the_middlewares() -> None:
    assert notice_of(message(), MODERN, in_session=False) == CancelNotice(7, "stop")
    assert notice_of(message({"requestId": "a"}), "2027-01-01", in_session=False) == CancelNotice("a", "stop")


@pytest.mark.parametrize(
    ("body", "version", "in_session"),
    [
        (message(), "2025-11-25", False),  # a 2025 notice goes to the app, on its session
        (message(), None, False),
        (message(), "garbage", False),
        (message(), MODERN, True),
        (message({"_meta": {}}), MODERN, False),  # not opted in: the app's (the stock SDK drops it)
        (message(method="notifications/progress"), MODERN, False),
        (message(id=1), MODERN, False),  # a request, not a notification
        ([message()], MODERN, False),  # a batch
        ("text", MODERN, False),
        (None, MODERN, False),
    ],
)
def test_anything_else_is_left_to_the_app(body: Any, version: str | None, in_session: bool) -> None:
    assert notice_of(body, version, in_session=in_session) is None


@pytest.mark.parametrize(
    "params",
    [
        {"requestId": 1.5},
        {"requestId": True},
        {"requestId": None},
        {"requestId": [7]},
        {"requestId": "x" * 257},
    ],
)
def test_a_malformed_notice_is_the_middlewares_but_names_nothing(params: dict[str, Any]) -> None:
    assert notice_of(message(params), MODERN, in_session=False) == CancelNotice(None, "stop")
    no_id = message()
    del no_id["params"]["requestId"]
    assert notice_of(no_id, MODERN, in_session=False) == CancelNotice(None, "stop")
    assert notice_of(message(jsonrpc="1.0"), MODERN, in_session=False) == CancelNotice(None, "stop")


def test_a_reason_is_bounded_and_only_a_string() -> None:
    assert notice_of(message({"reason": "r" * 5000}), MODERN, in_session=False) == CancelNotice(
        7, "r" * MAX_REASON_CHARS
    )
    assert notice_of(message({"reason": {"no": 1}}), MODERN, in_session=False) == CancelNotice(7, None)


def test_only_opted_in_2026_requests_that_a_close_would_not_keep_alive_are_cancellable() -> None:
    base = {"is_request": True, "version": MODERN, "opted_in": True, "survives_close": False}
    assert cancellable(**base)
    assert not cancellable(**{**base, "is_request": False})  # the standalone GET stream
    assert not cancellable(**{**base, "version": "2025-11-25"})
    assert not cancellable(**{**base, "opted_in": False})  # its close is its cancel
    assert not cancellable(**{**base, "survives_close": True})  # SEP-975, a task's next round


def test_a_binding_separates_endpoints_principals_ids_and_keys() -> None:
    first = binding("/mcp", "alice", 7, None)
    assert first is not None and first.startswith(INDEX_PREFIX)
    assert len(first.encode()) <= MAX_INDEX_NAME_BYTES
    others = [
        binding("/other/mcp", "alice", 7, None),
        binding("/mcp", "bob", 7, None),
        binding("/mcp", "alice", "7", None),  # ids keep their JSON type
        binding("/mcp", "alice", 8, None),
        binding("/mcp", "alice", 7, "k1"),
        binding("/mcp", None, 7, "k1"),
    ]
    assert len({first, *others}) == 7
    assert binding("/mcp", "alice", 7, None) == first  # the same for the request and its notice
    long_id = binding("/mcp", json.dumps(["oauth", "c", "i", "s" * 300]), "x" * 256, "k" * 255)
    assert long_id is not None and len(long_id.encode()) <= MAX_INDEX_NAME_BYTES


def test_an_anonymous_request_is_named_only_with_its_key() -> None:
    assert binding("/mcp", None, 7, None) is None
    assert binding("/mcp", None, 7, "k") is not None


@pytest.mark.parametrize(
    ("values", "key"),
    [
        (["k1"], "k1"),
        (["a" * 255], "a" * 255),
        ([], None),
        (["k1", "k1"], None),
        ([""], None),
        (["a" * 256], None),
        (["é"], None),
        (["tab\tkey"], None),
    ],
)
def test_the_notices_key_is_one_a_request_could_carry(values: list[str], key: str | None) -> None:
    assert valid_key(values) == key


def test_a_binding_names_a_stream_only_when_it_holds_exactly_one() -> None:
    assert named([]) is None
    assert named([("s1", 10.0)]) == "s1"
    assert named([("s1", 10.0), ("s2", 11.0)]) is None


def test_where_the_cancel_runs() -> None:
    here = {"hosted_here": True, "running": False, "owner": None, "node_id": "n1", "relayed": False}
    assert where(**here, hosted_principal="alice", caller="alice") is Where.HERE
    assert where(**here, hosted_principal=None, caller=None) is Where.HERE
    assert where(**here, hosted_principal="alice", caller="bob") is Where.NOWHERE
    elsewhere = {"hosted_here": False, "hosted_principal": None, "caller": "alice", "node_id": "n1"}
    assert where(**elsewhere, running=True, owner="n2", relayed=False) is Where.OWNER
    assert where(**elsewhere, running=True, owner="n2", relayed=True) is Where.NOWHERE  # no ping-pong
    assert where(**elsewhere, running=False, owner="n2", relayed=False) is Where.NOWHERE  # finished
    assert where(**elsewhere, running=True, owner="n1", relayed=False) is Where.NOWHERE  # ours, not live
    assert where(**elsewhere, running=True, owner=None, relayed=False) is Where.NOWHERE  # gone


def core(*, opted_in: bool = True) -> StreamCore:
    return StreamCore(Policy(), version=MODERN, is_request=True, request_id=7, now=0.0, opted_in=opted_in)


def test_the_core_cancels_a_running_request_once() -> None:
    c = core()
    assert not c.close_cancels  # opted in: a close only detaches
    assert c.cancel_asked()
    assert c.cancelled and c.expiry_paused
    assert not c.cancel_asked()  # once
    assert not c.left(Reason.GONE)


def test_the_core_does_not_cancel_what_is_over_or_outlives_its_answer() -> None:
    answered = core()
    answered.record([(b"event: message\ndata: {}\n\n", b'{"jsonrpc":"2.0","id":7,"result":{}}')])
    assert answered.final_seq is not None and not answered.cancel_asked()
    finished = core()
    finished.app_finished()
    assert not finished.cancel_asked()
    assert not core().cancel_asked(survives_close=True)  # a task: `tasks/cancel` is its way
    standalone = StreamCore(Policy(), version=MODERN, is_request=False, now=0.0, opted_in=True)
    assert not standalone.cancel_asked()
