"""`HeldSessions`: which sessions a node may serve without reading their owner from the store
(plain objects, a clock passed in)."""

from __future__ import annotations

from mcp_resume_asgi.engine.held_sessions import HeldSessions


def _beating(timeout_s: float = 3.0) -> HeldSessions:
    held = HeldSessions(timeout_s)
    held.beat(100.0, 100.1)
    return held


def test_nothing_is_held_before_a_heartbeat() -> None:
    held = HeldSessions(3.0)
    held.keep("s", held.epoch)
    assert not held.holds("s", 0.0)


def test_a_session_the_store_named_is_held_while_the_heartbeat_holds() -> None:
    held = _beating()
    held.keep("s", held.epoch)
    assert held.holds("s", 102.9)
    assert not held.holds("other", 102.9)
    assert not held.holds("s", 103.0)  # the key's TTL counted from the write's start: ran out


def test_heartbeats_without_a_gap_keep_what_is_held() -> None:
    held = _beating()
    held.keep("s", held.epoch)
    held.beat(101.0, 101.2)
    held.beat(102.0, 102.9)  # acknowledged before the last guarantee (104.0) ran out
    assert held.holds("s", 104.5)


def test_a_heartbeat_after_a_gap_forgets_everything() -> None:
    held = _beating()
    held.keep("s", held.epoch)
    held.beat(102.9, 103.0)  # acknowledged once the key may have lapsed: another node may have adopted
    assert not held.holds("s", 103.5)


def test_a_read_across_a_gap_is_not_kept() -> None:
    held = _beating()
    seen = held.epoch  # the owner read began
    held.beat(103.5, 103.6)  # a gap meanwhile
    held.keep("s", seen)
    assert not held.holds("s", 104.0)


def test_lapsed_and_forget() -> None:
    held = _beating()
    held.keep("s", held.epoch)
    held.keep("t", held.epoch)
    held.forget("s")
    assert not held.holds("s", 101.0)
    assert held.holds("t", 101.0)
    held.lapsed()
    assert not held.holds("t", 101.0)


def test_bounded_oldest_first() -> None:
    held = HeldSessions(3.0, max_held=2)
    held.beat(100.0, 100.1)
    for name in ("a", "b", "c"):
        held.keep(name, held.epoch)
    assert [held.holds(name, 101.0) for name in ("a", "b", "c")] == [False, True, True]
