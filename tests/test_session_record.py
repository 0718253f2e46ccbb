"""A session's record (`wire/session_record.py`): what its state requests leave, what a node
that takes the session over replays, and the seal that makes a record read back from the
store one this cluster wrote, for this session. No store, no event loop."""

from __future__ import annotations

import json

from mcp_resume_asgi.wire.session_record import (
    MAX_RECORD_BYTES,
    MAX_SUBSCRIPTIONS,
    SessionRecord,
    open_record,
    seal_record,
)
from mcp_resume_asgi.wire.tokens import TokenSigner

SIGNER = TokenSigner("a-secret-of-the-cluster-0123456789")
INIT = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}})


def record() -> SessionRecord:
    return SessionRecord("s-1", "2025-11-25", "alice", INIT)


def test_state_requests_fold_into_the_state_they_leave() -> None:
    r = record()
    r = r.applied({"method": "notifications/initialized"}) or r
    r = r.applied({"method": "logging/setLevel", "params": {"level": "debug"}}) or r
    r = r.applied({"method": "logging/setLevel", "params": {"level": "error"}}) or r
    for uri in ("file:///a", "file:///b", "file:///a"):
        r = r.applied({"method": "resources/subscribe", "params": {"uri": uri}}) or r
    r = r.applied({"method": "resources/unsubscribe", "params": {"uri": "file:///a"}}) or r
    assert (r.initialized, r.level, r.subscriptions) == (True, "error", ("file:///b",))
    assert [m["method"] for m in r.replay()] == [
        "notifications/initialized",
        "logging/setLevel",
        "resources/subscribe",
    ]
    assert r.replay()[1]["params"] == {"level": "error"}
    assert "id" not in r.replay()[0] and all("id" in m for m in r.replay()[1:])


def test_what_changes_nothing_or_is_malformed_or_past_a_bound_is_not_kept() -> None:
    r = record()
    assert r.applied({"method": "logging/setLevel", "params": {"level": 3}}) is None
    assert r.applied({"method": "resources/subscribe", "params": {}}) is None
    assert r.applied({"method": "resources/unsubscribe", "params": {"uri": "file:///never"}}) is None
    assert r.applied({"method": "tools/call", "params": {"uri": "x"}}) is None
    for n in range(MAX_SUBSCRIPTIONS):
        r = r.applied({"method": "resources/subscribe", "params": {"uri": f"u{n}"}}) or r
    assert r.applied({"method": "resources/subscribe", "params": {"uri": "one-more"}}) is None


def test_a_sealed_record_opens_only_with_the_secret_and_for_its_session() -> None:
    r = record().applied({"method": "notifications/initialized"})
    assert r is not None
    sealed = seal_record(SIGNER, r)
    assert sealed is not None
    assert open_record(SIGNER, "s-1", sealed) == r
    assert open_record(TokenSigner("another-secret-0123456789abcdef"), "s-1", sealed) is None
    assert open_record(SIGNER, "s-2", sealed) is None, "moved to another session's key"
    outer = json.loads(sealed)
    body = json.loads(outer["r"])
    body["p"] = "mallory"  # rebound to another principal, the seal kept
    assert open_record(SIGNER, "s-1", json.dumps({"r": json.dumps(body), "m": outer["m"]})) is None
    for junk in (None, "", "[]", "{}", '{"r": 1, "m": 2}', "x" * (MAX_RECORD_BYTES + 1)):
        assert open_record(SIGNER, "s-1", junk) is None


def test_a_record_past_its_bound_is_not_sealed() -> None:
    huge = SessionRecord("s-1", "2025-11-25", None, "x" * MAX_RECORD_BYTES)
    assert seal_record(SIGNER, huge) is None
