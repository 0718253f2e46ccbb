"""A drain lets go of the connections that attach while it runs, as soon as their head is out.

Seen under heavy load (`test_drain.py`, the stock client): requests that reached node A as its
drain began were served, but their connections were kept until the app's first event was
written. With uvicorn's 0.5 s graceful timeout, three of them were still open and were
cancelled by the server ("Exception in ASGI application"). A connection attached during a
drain - a request's first, a resume's - is now closed once its priming event is out, after
`retry:` (its client resumes elsewhere with `Last-Event-ID`), whether or not the app has sent
anything yet.

Forced here in one process with the real engine and a real `MemoryStore`: a call runs (the
drain waits for it), and its app holds every answer (`GatedApp`) until the test is done, so
the only thing that can end these connections is the drain.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from mcp_resume_asgi import Policy, resumable
from mcp_resume_asgi.store import MemoryStore
from tests.apps.gated_app import GatedApp
from tests.support.raw import Event, RawSession
from tests.support.server import serve_in_loop
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # (`serve_in_loop` runs uvicorn in the test's own loop)


async def _read_to_end(session: RawSession, method: str, body: Any, headers: dict[str, str]) -> list[Event]:
    """The events of an answer the server ends (TimeoutError if it does not end: held open)."""
    events: list[Event] = []
    with anyio.fail_after(scaled(10)):
        async with session.open(method, "/mcp", body, headers) as (response, reader):
            assert response.status_code == 200
            async for event in reader:
                events.append(event)
    return events


async def test_connections_attached_during_a_drain_are_let_go_once_their_priming_event_is_out() -> None:
    app = GatedApp()
    # No keep-alive: it is not what ends a connection here.
    wrapped: Any = resumable(
        app, store=MemoryStore(), secret="drain-arrivals-secret", policy=Policy(retry_ms=50, keepalive_s=None)
    )
    drained: list[Any] = []
    async with (
        serve_in_loop(wrapped) as info,
        httpx.AsyncClient(base_url=info.base_url, timeout=scaled(30)) as client,
    ):
        session = RawSession(client)
        running = session.tool_call("slow")
        async with anyio.create_task_group() as tg:

            async def drain() -> None:
                drained.append(await wrapped.drain())

            # A call runs: its connection is closed at the drain's start, its app goes on.
            before: list[Event] = []
            with anyio.fail_after(scaled(10)):
                async with session.open("POST", "/mcp", running) as (response, reader):
                    assert response.status_code == 200
                    async for event in reader:
                        before.append(event)
                        if event.data and len(before) == 2:  # (its priming event, its progress)
                            tg.start_soon(drain)
            assert before[-1].retry is not None, before
            assert not app.answered.is_set(), "the drain waits for the running call"

            # A request arriving now, whose app sends nothing yet: its answer ends at once.
            arriving = session.tool_call("quiet", {"quiet": True})
            first = await _read_to_end(session, "POST", arriving, session.headers())
            assert first and first[0].id is not None and not first[0].data, first  # the priming event
            assert first[-1].retry is not None, "closed after a retry: field"
            assert not any(e.data for e in first), "nothing of the app's went with it"

            # A resume of the running call, attached during the drain: let go the same way.
            last_id = next(e.id for e in reversed(before) if e.id)
            resumed = await _read_to_end(session, "GET", None, session.headers(last_event_id=last_id))
            assert resumed and resumed[-1].retry is not None, resumed
            assert not any(e.data for e in resumed), resumed

            app.go.set()  # both calls answer; the drain is over once they have
        assert drained and drained[0].finished == 1 and drained[0].stopped == 0, drained  # (it counts those at its start)
        # Their answers were recorded: each is resumable after the drain (here, the same node).
        for call, opened in ((running, before), (arriving, first)):
            after = next(e.id for e in reversed(opened) if e.id)
            reply = await session.exchange("GET", "/mcp", headers=session.headers(last_event_id=after))
            answers = [m for m in reply.messages() if m.get("id") == call["id"]]
            assert len(answers) == 1 and "result" in answers[0], reply.raw
