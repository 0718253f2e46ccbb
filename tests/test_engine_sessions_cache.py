"""Each node keeps what a session negotiated (`engine.sessions.Sessions.info`), bounded and for
a while, instead of reading the store on every request; and forgets a session it ended.

First the cache itself against a store that counts its reads (a clock of the test's own, no
sleeping), then end to end: a session's requests read the store once, and after its DELETE a
request naming it is the app's to refuse, framed by its header's revision again.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from mcp_resume_asgi import MemoryStore, Policy
from mcp_resume_asgi.engine.sessions import Sessions
from mcp_resume_asgi.http.middleware import ResumeMiddleware
from mcp_resume_asgi.store.base import SessionInfo

pytestmark = pytest.mark.anyio


class CountingStore(MemoryStore):
    """A memory store that counts `get_session` calls, by session id."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.reads: dict[str, int] = {}

    async def get_session(self, session_id: str) -> SessionInfo | None:
        self.reads[session_id] = self.reads.get(session_id, 0) + 1
        return await super().get_session(session_id)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _never_down(exc: BaseException) -> bool:
    return False


def _sessions(store: CountingStore, clock: Clock, **options: Any) -> Sessions:
    return Sessions(store, ttl_s=600, owner=None, store_outage=_never_down, clock=clock, **options)


def _info(session_id: str, version: str = "2025-11-25") -> SessionInfo:
    return SessionInfo(session_id=session_id, protocol_version=version, capabilities={"sampling": {}})


async def test_a_session_is_read_from_the_store_once_while_its_copy_lasts() -> None:
    store, clock = CountingStore(), Clock()
    sessions = _sessions(store, clock, cache_ttl_s=30)
    await store.put_session(_info("s1"), 600)
    for _ in range(5):
        info = await sessions.info("s1")
        assert info is not None and info.protocol_version == "2025-11-25"
    assert store.reads == {"s1": 1}
    clock.now += 29.9
    await sessions.info("s1")
    assert store.reads == {"s1": 1}
    clock.now += 0.2  # past its time: read again, and kept again from now
    await sessions.info("s1")
    await sessions.info("s1")
    assert store.reads == {"s1": 2}


async def test_a_session_ended_elsewhere_is_seen_gone_once_its_copy_expires() -> None:
    store, clock = CountingStore(), Clock()
    sessions = _sessions(store, clock, cache_ttl_s=30)
    await store.put_session(_info("s1"), 600)
    assert await sessions.info("s1") is not None
    await store.delete_session("s1")  # (another node's DELETE, or the store's TTL)
    clock.now += 31
    assert await sessions.info("s1") is None


async def test_a_session_ended_here_is_forgotten_at_once() -> None:
    store, clock = CountingStore(), Clock()
    sessions = _sessions(store, clock)
    await store.put_session(_info("s1"), 600)
    assert await sessions.info("s1") is not None
    await store.delete_session("s1")
    sessions.forget("s1")
    assert await sessions.info("s1") is None
    assert store.reads == {"s1": 2}


async def test_a_session_the_store_does_not_know_is_not_kept() -> None:
    store, clock = CountingStore(), Clock()
    sessions = _sessions(store, clock)
    assert await sessions.info("later") is None
    await store.put_session(_info("later"), 600)  # recorded a moment later (another node's initialize)
    info = await sessions.info("later")
    assert info is not None and info.capabilities == {"sampling": {}}
    assert store.reads == {"later": 2}


async def test_the_copies_are_bounded_the_oldest_going_first() -> None:
    store, clock = CountingStore(), Clock()
    sessions = _sessions(store, clock, cache_max=3)
    for n in range(5):
        await store.put_session(_info(f"s{n}"), 600)
        await sessions.info(f"s{n}")
    assert len(sessions._cache) == 3
    for n in (2, 3, 4):
        await sessions.info(f"s{n}")
    assert store.reads == {f"s{n}": 1 for n in range(5)}
    await sessions.info("s0")  # evicted: read again
    assert store.reads["s0"] == 2 and len(sessions._cache) == 3


async def test_a_session_s_requests_read_the_store_once_and_its_delete_forgets_it() -> None:
    from tests.apps.probe_app import create_app
    from tests.support.raw import RawSession
    from tests.support.server import serve_in_loop

    store = CountingStore()
    app = ResumeMiddleware(create_app(), policy=Policy(retry_ms=20), store=store)
    # The app's DELETE answer (its Content-Length all sent) may reach the client before the
    # engine has ended the session: the test waits for that end, not for the answer.
    ended = anyio.Event()
    end_session = app.engine.end_session

    async def end_and_tell(session_id: str) -> None:
        await end_session(session_id)
        ended.set()

    app.engine.end_session = end_and_tell  # type: ignore[method-assign]
    async with serve_in_loop(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=10) as client:
        # Its initialize answer was recorded here: the session's requests never read the store.
        s = RawSession(client)
        await s.initialize()
        assert s.session_id
        for _ in range(3):
            reply = await s.exchange("POST", "/mcp", s.tool_call("progress", {"steps": 1, "seconds": 0.0}))
            assert reply.status == 200 and reply.messages()[-1]["result"]
        assert store.reads.get(s.session_id, 0) == 0
        # Another node's session: read once, then kept.
        other = RawSession(client)
        await other.initialize()
        assert other.session_id
        sessions = app.engine.services.sessions
        sessions.forget(other.session_id)
        for _ in range(2):
            reply = await other.exchange(
                "POST", "/mcp", other.tool_call("progress", {"steps": 1, "seconds": 0.0})
            )
            assert reply.status == 200
        assert store.reads[other.session_id] == 1
        # Ended here: forgotten, and what the session names is the app's to refuse.
        deleted = await client.delete("/mcp", headers=s.headers())
        assert deleted.status_code < 300, deleted.text
        with anyio.fail_after(10):
            await ended.wait()
        assert s.session_id not in sessions._cache
        after = await s.exchange("POST", "/mcp", s.tool_call("progress", {"steps": 1, "seconds": 0.0}))
        assert after.status == 404
        assert store.reads.get(s.session_id, 0) >= 1
