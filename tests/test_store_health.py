"""The store's health (`store/health.py`), without an event loop: when requests skip the store,
when it is tried again, which errors are an outage, and what is logged meanwhile."""

from __future__ import annotations

import logging

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from mcp_resume_asgi.store import RedisStore
from mcp_resume_asgi.store import health as health_module
from mcp_resume_asgi.store.health import STORE_RETRY_S, StoreHealth


class Clock:
    """`time` as `store/health.py` reads it, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(health_module, "time", fake)
    return fake


def a_health() -> StoreHealth:
    # Nothing listens on port 1; the store is never used, only asked what its errors mean.
    return StoreHealth(RedisStore("redis://127.0.0.1:1/0", prefix="health-test:"))


def test_an_outage_is_the_stores_unavailable_error_or_a_group_of_only_such() -> None:
    health = a_health()
    refused = RedisConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")
    assert health.is_outage(refused) and health.is_outage(OSError("unreachable"))
    assert not health.is_outage(ValueError("a bug, not an outage"))
    assert health.is_outage(ExceptionGroup("tg", [refused, ExceptionGroup("inner", [OSError()])]))
    assert not health.is_outage(ExceptionGroup("tg", [refused, ValueError("bug")]))


def test_the_store_is_skipped_for_its_retry_time_and_logged_once(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="mcp_resume_asgi")
    health = a_health()
    assert not health.skipping
    health.maybe_recovered()  # never failed: nothing to say
    refused = RedisConnectionError("refused")
    health.failed(refused)
    assert health.skipping
    clock.now += STORE_RETRY_S / 2
    health.failed(refused)  # another request met it: the wait starts again, no new ERROR line
    clock.now += STORE_RETRY_S - 0.5  # (exact in binary, as every step here)
    assert health.skipping
    health.maybe_recovered()  # still skipped: not back yet
    assert health.log.down
    clock.now += 0.5
    assert not health.skipping
    health.maybe_recovered()  # a request went through the store: it is back
    assert not health.log.down
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "mcp_resume_asgi.store.health"]
    errors = [text for level, text in lines if level >= logging.ERROR]
    assert len(errors) == 1 and "ConnectionError: refused" in errors[0], lines
    assert [text for level, text in lines if level == logging.INFO] == [
        "the store (serving without resumability meanwhile) is back after 3.0 s (2 failed attempts)"
    ]
