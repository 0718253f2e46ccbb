"""Where another node can serve its clients, a drain lets go of the connections that attach
while it runs, as soon as their head is out; where none can, it keeps them all attached.

Seen under heavy load (`test_drain.py`, the stock client): requests that reached node A as its
drain began were served, but their connections were kept until the app's first event was
written. With uvicorn's 0.5 s graceful timeout, three of them were still open and were
cancelled by the server ("Exception in ASGI application"). A connection attached during a
drain - a request's first, a resume's - is now closed once its priming event is out, after
`retry:` (its client resumes elsewhere with `Last-Event-ID`), whether or not the app has sent
anything yet.

Forced here in one process with the real engine and a real `MemoryStore` that stands for a
shared one (Redis), with a second engine on it as the live peer that can serve a resume: a
call runs (the drain waits for it), and its app holds every answer (`GatedApp`) until the test
is done, so the only thing that can end these connections is the drain. Each of the three kinds
of attaching is checked on its own: a request's first connection, a resume of a stream this
node runs, and a resume this node serves from the store (a stream of the other node).

Where no other node can serve a resume - the memory store, or a shared store with no live
peer - closing a connection loses its answer (the server stops accepting as it drains): the
connections stay attached, the running call and one arriving during the drain are answered on
their own.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
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


class SharedMemoryStore(MemoryStore):
    """A memory store standing for one that nodes in several processes reach (Redis): each
    engine on it is a node of one cluster (heartbeat, roll call), in this process."""

    shared = True


SECRET = "drain-arrivals-secret"
POLICY = Policy(retry_ms=50, keepalive_s=None)
"""(No keep-alive: it is not what ends a connection here.)"""


async def _read_to_end(session: RawSession, method: str, body: Any, headers: dict[str, str]) -> list[Event]:
    """The events of an answer the server ends (TimeoutError if it does not end: held open)."""
    events: list[Event] = []
    with anyio.fail_after(scaled(10)):
        async with session.open(method, "/mcp", body, headers) as (response, reader):
            assert response.status_code == 200
            async for event in reader:
                events.append(event)
    return events


def _let_go_after_priming(events: list[Event]) -> None:
    """An answer that is a priming event (an id, no data) and `retry:`, nothing of the app's."""
    assert events and events[0].id is not None and not events[0].data, events
    assert events[-1].retry is not None, f"closed after a retry: field: {events}"
    assert not any(e.data for e in events), f"nothing of the app's went with it: {events}"


@dataclass
class Node:
    app: GatedApp
    wrapped: Any
    session: RawSession


@contextlib.asynccontextmanager
async def _node(store: MemoryStore) -> AsyncIterator[Node]:
    app = GatedApp()
    wrapped: Any = resumable(app, store=store, secret=SECRET, policy=POLICY)
    async with (
        serve_in_loop(wrapped) as info,
        httpx.AsyncClient(base_url=info.base_url, timeout=scaled(30)) as client,
    ):
        yield Node(app, wrapped, RawSession(client))


@contextlib.asynccontextmanager
async def _draining(node: Node) -> AsyncIterator[tuple[dict[str, Any], list[Event]]]:
    """`node` drains while a call of its runs (the drain waits for it): the call, and what its
    connection got (closed by the drain). On leaving, the app answers and the drain ends."""
    running = node.session.tool_call("slow")
    drained: list[Any] = []
    async with anyio.create_task_group() as tg:

        async def drain() -> None:
            drained.append(await node.wrapped.drain())

        events: list[Event] = []
        with anyio.fail_after(scaled(10)):
            async with node.session.open("POST", "/mcp", running) as (response, reader):
                assert response.status_code == 200
                async for event in reader:
                    events.append(event)
                    if event.data and len(events) == 2:  # (its priming event, its progress)
                        tg.start_soon(drain)
        assert events[-1].retry is not None, events
        yield running, events
        assert not node.app.answered.is_set(), "the drain waited for the running call"
        node.app.go.set()
    # (it counts the requests running at its start)
    assert drained and drained[0].finished == 1 and drained[0].stopped == 0, drained


async def _result_after(session: RawSession, call: dict[str, Any], events: list[Event]) -> None:
    """The call's answer was recorded: a resume after what its connection got has it."""
    after = next(e.id for e in reversed(events) if e.id)
    reply = await session.exchange("GET", "/mcp", headers=session.headers(last_event_id=after))
    answers = [m for m in reply.messages() if m.get("id") == call["id"]]
    assert len(answers) == 1 and "result" in answers[0], reply.raw


async def test_a_request_arriving_during_a_drain_is_let_go_once_its_priming_event_is_out() -> None:
    store = SharedMemoryStore()
    async with _node(store) as node, _node(store):  # (the other: a live peer)
        async with _draining(node):
            arriving = node.session.tool_call("quiet", {"quiet": True})  # (nothing before `go`)
            first = await _read_to_end(node.session, "POST", arriving, node.session.headers())
            _let_go_after_priming(first)
        await _result_after(node.session, arriving, first)


async def test_a_resume_attached_during_a_drain_is_let_go_once_its_priming_event_is_out() -> None:
    store = SharedMemoryStore()
    async with _node(store) as node, _node(store):  # (the other: a live peer)
        async with _draining(node) as (running, before):
            last_id = next(e.id for e in reversed(before) if e.id)
            headers = node.session.headers(last_event_id=last_id)
            _let_go_after_priming(await _read_to_end(node.session, "GET", None, headers))
        await _result_after(node.session, running, before)


async def test_a_resume_served_from_the_store_during_a_drain_is_let_go_once_its_priming_event_is_out() -> (
    None
):
    store = SharedMemoryStore()
    async with _node(store) as a, _node(store) as b:
        elsewhere = a.session.tool_call("slow")  # runs on A, held there
        first = await a.session.exchange("POST", "/mcp", elsewhere, stop_after=1)  # then its client leaves
        assert first.status == 200 and first.last_id is not None, first.raw
        async with _draining(b):
            b.session.session_id = a.session.session_id
            headers = b.session.headers(last_event_id=first.last_id)
            _let_go_after_priming(await _read_to_end(b.session, "GET", None, headers))
            a.app.go.set()
        await _result_after(a.session, elsewhere, first.events)


@pytest.mark.parametrize("store_class", [MemoryStore, SharedMemoryStore], ids=["memory", "shared-no-peer"])
async def test_where_no_other_node_can_serve_the_drain_keeps_every_connection_and_answers_on_it(
    store_class: type[MemoryStore],
) -> None:
    async with _node(store_class()) as node:
        session = node.session
        calls = {
            "running": session.tool_call("slow"),
            "arriving": session.tool_call("quiet", {"quiet": True}),
        }
        got: dict[str, list[Event]] = {name: [] for name in calls}
        primed = {name: anyio.Event() for name in calls}
        drained: list[Any] = []

        async def read(name: str) -> None:
            async with session.open("POST", "/mcp", calls[name]) as (response, reader):
                assert response.status_code == 200
                async for event in reader:
                    got[name].append(event)
                    primed[name].set()

        async def drain() -> None:
            drained.append(await node.wrapped.drain())

        with anyio.fail_after(scaled(10)):
            async with anyio.create_task_group() as tg:
                tg.start_soon(read, "running")
                await node.app.progressed.wait()
                tg.start_soon(drain)
                while node.wrapped.engine.services.draining is None:
                    await anyio.sleep(0.01)  # (the drain began)
                tg.start_soon(read, "arriving")
                await primed["arriving"].wait()  # (its head is out: a drain that closes would now)
                node.app.go.set()
    for name, call in calls.items():
        answers = [e.message for e in got[name] if e.data and e.message.get("id") == call["id"]]
        assert len(answers) == 1 and answers[0]["result"]["content"][0]["text"] == "ok", (name, got[name])
        assert all(e.retry is None for e in got[name][1:]), f"never closed with retry: {got[name]}"
    assert drained and drained[0].finished == 1 and drained[0].stopped == 0, drained
