"""A store outage is logged once, with its cause, not once a second (issue 11).

The node's link to the cluster is retried every second while Redis is down. Each
retry used to log "cluster link lost (unhandled errors in a TaskGroup (1
sub-exception)); retrying" at ERROR, which hid the cause, and the heartbeat logged a
traceback every few seconds.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
from starlette.applications import Starlette
from starlette.types import Message, Receive, Scope, Send

from mcp_resume_asgi import MemoryStore, ResumeMiddleware
from mcp_resume_asgi.engine.cluster import Node
from mcp_resume_asgi.store.health import OutageLog, describe_error
from tests.support.server import HOST, bind_socket
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

SECRET = "outage-logging-test-secret-0123"
LIBRARY = "mcp_resume_asgi"


def dead_port() -> int:
    """A loopback port where nothing listens (bound, then closed)."""
    sock = bind_socket(HOST, 0)
    port: int = sock.getsockname()[1]
    sock.close()
    return port


@asynccontextmanager
async def lifespan_running(app: ResumeMiddleware) -> AsyncIterator[None]:
    """Run `app`'s ASGI lifespan (startup ... shutdown), as a server would."""
    shutdown = anyio.Event()
    started = anyio.Event()
    sent: list[Message] = []
    startup_sent = False

    async def receive() -> Message:
        nonlocal startup_sent
        if not startup_sent:
            startup_sent = True
            return {"type": "lifespan.startup"}
        await shutdown.wait()
        return {"type": "lifespan.shutdown"}

    async def send(message: Message) -> None:
        sent.append(message)
        if message["type"] == "lifespan.startup.complete":
            started.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(app, {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)
        with anyio.fail_after(scaled(10)):
            await started.wait()
        try:
            yield
        finally:
            shutdown.set()
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]


def records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith(LIBRARY) and r.levelno == level]


def test_the_cause_is_the_leaf_of_the_exception_groups() -> None:
    inner = ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")
    wrapped = BaseExceptionGroup("unhandled errors in a TaskGroup", [ExceptionGroup("again", [inner])])
    assert (
        describe_error(wrapped) == "ConnectionError: Error 111 connecting to 127.0.0.1:1. Connection refused."
    )
    both = ExceptionGroup("two", [inner, TimeoutError(), inner])
    assert describe_error(both) == f"ConnectionError: {inner}; TimeoutError"


def test_an_outage_log_reminds_at_most_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LIBRARY)
    outage = OutageLog("thing", level=logging.ERROR, remind_s=0.2)
    for _ in range(5):
        outage.failed(ConnectionError("refused"))
    assert len(records(caplog, logging.ERROR)) == 1 and not records(caplog, logging.WARNING)
    anyio.run(anyio.sleep, 0.25)
    outage.failed(ConnectionError("refused"))
    [reminder] = records(caplog, logging.WARNING)
    assert "still failing" in reminder.getMessage() and "6 attempts" in reminder.getMessage()
    outage.recovered()
    outage.recovered()
    [back] = records(caplog, logging.INFO)
    assert "thing is back" in back.getMessage()
    outage.failed(ConnectionError("again"))  # a new outage: logged at its level again
    assert len(records(caplog, logging.ERROR)) == 2


def test_a_link_that_flaps_for_one_cause_is_logged_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Back and failing again for the same cause, seven times: one line at its level, one "is
    back"; past the interval, the next outage is logged again, with how many came between."""
    caplog.set_level(logging.DEBUG, logger=LIBRARY)
    outage = OutageLog("link", level=logging.ERROR, remind_s=0.5)
    for _ in range(7):
        outage.failed(RecursionError("maximum recursion depth exceeded"))
        outage.recovered()
    assert len(records(caplog, logging.ERROR)) == 1
    assert len(records(caplog, logging.INFO)) == 1
    outage.failed(ConnectionError("refused"))  # another cause: its own line
    outage.recovered()
    assert len(records(caplog, logging.ERROR)) == 2
    anyio.run(anyio.sleep, 0.55)
    outage.failed(ConnectionError("refused"))
    [*_, again] = records(caplog, logging.ERROR)
    assert "1 more times" not in again.getMessage()
    outage.recovered()
    outage.failed(RecursionError("maximum recursion depth exceeded"))
    [*_, again] = records(caplog, logging.ERROR)
    assert "6 more times since last logged" in again.getMessage(), again.getMessage()


@pytest.mark.slow
async def test_a_store_that_is_down_is_logged_once_with_its_cause(caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("redis", reason="the redis client is not installed (mcp-resume-asgi[redis])")
    from mcp_resume_asgi.store import RedisStore

    caplog.set_level(logging.DEBUG, logger=LIBRARY)
    store = RedisStore(f"redis://{HOST}:{dead_port()}/0", prefix="outage-test:")
    app = ResumeMiddleware(Starlette(), store=store, secret=SECRET, node_timeout_s=1.0)
    retried = anyio.Event()

    class SecondRetry(logging.Handler):
        """Sets `retried` at the second "still failing" (the link retries about every second)."""

        def emit(self, record: logging.LogRecord) -> None:
            if "still failing" in record.getMessage():
                self.seen = getattr(self, "seen", 0) + 1
                if self.seen >= 2:
                    retried.set()

    handler = SecondRetry(logging.DEBUG)
    logging.getLogger(LIBRARY).addHandler(handler)
    try:
        async with lifespan_running(app):
            with anyio.fail_after(scaled(30)):  # (three attempts to join, however loaded the machine)
                await retried.wait()
    finally:
        logging.getLogger(LIBRARY).removeHandler(handler)
        await store.aclose()
    errors = records(caplog, logging.ERROR)
    assert len(errors) == 1, [r.getMessage() for r in errors]
    message = errors[0].getMessage()
    assert "cluster link failed" in message and "ConnectionError" in message and "TaskGroup" not in message
    assert errors[0].exc_info is None, "no traceback at ERROR: the cause is in the message"
    retries = [r for r in records(caplog, logging.DEBUG) if "still failing" in r.getMessage()]
    assert len(retries) >= 2, "every later attempt is logged at DEBUG"


@pytest.mark.slow
async def test_redis_killed_then_restarted_logs_one_error_then_back(caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("redis", reason="the redis client is not installed (mcp-resume-asgi[redis])")
    from mcp_resume_asgi.store import RedisStore
    from tests.support.redis_server import own_redis

    caplog.set_level(logging.DEBUG, logger=LIBRARY)
    with own_redis() as redis_server:
        store = RedisStore(redis_server.url, prefix="outage-test:")
        app = ResumeMiddleware(Starlette(), store=store, secret=SECRET, node_timeout_s=0.9)
        assert app.node is not None
        try:
            async with lifespan_running(app):
                with anyio.fail_after(scaled(10)):
                    while not app.node.running:
                        await anyio.sleep(0.02)
                await anyio.sleep(0.5)
                assert not records(caplog, logging.ERROR) and not records(caplog, logging.WARNING)
                await anyio.to_thread.run_sync(redis_server.kill)
                await anyio.sleep(4.0)
                errors = records(caplog, logging.ERROR)
                assert len(errors) == 1, [r.getMessage() for r in errors]
                assert "ConnectionError" in errors[0].getMessage()
                warnings = records(caplog, logging.WARNING)
                assert len(warnings) <= 1, [r.getMessage() for r in warnings]  # the heartbeat, once
                assert all(r.exc_info is None for r in errors + warnings), "no tracebacks above DEBUG"
                await anyio.to_thread.run_sync(redis_server.start)
                with anyio.fail_after(scaled(10)):
                    while not app.node.running:
                        await anyio.sleep(0.05)
                await anyio.sleep(0.5)
        finally:
            await store.aclose()
    back = [r.getMessage() for r in records(caplog, logging.INFO) if "is back" in r.getMessage()]
    assert any("cluster link is back" in m for m in back), back
    assert len(records(caplog, logging.ERROR)) == 1


class FlakyStore(MemoryStore):
    """A memory store whose writes of keys fail while `down` (its pub/sub keeps working)."""

    down = False

    async def set_key(self, key: str, value: str, ttl_s: float) -> None:
        if self.down:
            raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
        await super().set_key(key, value, ttl_s)


@pytest.mark.slow
async def test_failing_heartbeats_warn_once_without_a_traceback(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LIBRARY)
    store = FlakyStore()
    node = Node(store, timeout_s=0.3)  # a heartbeat every 0.1 s

    async def handler(scope: Scope, receive: Receive, send: Send) -> None:
        raise AssertionError("nothing is relayed here")

    async with anyio.create_task_group() as tg:
        tg.start_soon(node.run_forever, handler)
        with anyio.fail_after(scaled(5)):
            while not node.running:
                await anyio.sleep(0.01)
        store.down = True
        await anyio.sleep(1.5)
        warnings = records(caplog, logging.WARNING)
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        assert "heartbeat failed (ConnectionError: Error 111" in warnings[0].getMessage()
        assert warnings[0].exc_info is None
        failures = [r for r in records(caplog, logging.DEBUG) if "heartbeat still failing" in r.getMessage()]
        assert len(failures) >= 5
        store.down = False
        await anyio.sleep(0.3)
        tg.cancel_scope.cancel()
    back = [r.getMessage() for r in records(caplog, logging.INFO)]
    assert any("heartbeat is back" in m for m in back), back
    assert not records(caplog, logging.ERROR), "the link itself never failed"
