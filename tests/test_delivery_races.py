"""Delivery races: an event recorded while the connection it is for is being written by another.

One writer at a time per connection (`Connection.busy`): an event the app records while a
resume is catching the connection up from the store is left to that writer. Its read of the
store may have been answered before the event landed there (with Redis, a reply in flight
while the app's append lands and is delivered): the writer must look again, or the event -
here the request's answer - waits for the next keep-alive, and with keep-alives off forever.
(The writer reads the store only for events stored ahead of the write under way - what that
write carries, it delivers itself - so the client here is behind by one event the store holds.)

Seen first across two nodes (`test_multinode.py`, the client helper's answers POSTed to the
Link URL of another node and relayed: the continuation got its headers and nothing more).
Forced here in one process with a real store and its calls held (`PausingStore`).
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from mcp_resume_asgi import Policy, resumable
from mcp_resume_asgi.store import MemoryStore
from tests.apps.gated_app import GatedApp
from tests.support.pausing_store import PausingStore
from tests.support.raw import RawSession
from tests.support.server import serve_in_loop
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # (`serve_in_loop` runs uvicorn in the test's own loop)


async def test_a_result_recorded_while_a_resume_reads_the_store_reaches_that_resume() -> None:
    app = GatedApp()
    store = PausingStore(MemoryStore())
    # No keep-alive: it would write the connection 15 s later and deliver the result with it.
    wrapped = resumable(app, store=store, secret="delivery-races-secret", policy=Policy(keepalive_s=None))
    async with (
        serve_in_loop(wrapped) as info,
        httpx.AsyncClient(base_url=info.base_url, timeout=30) as client,
    ):
        session = RawSession(client)
        call = session.tool_call("slow", {"steps": 2})
        first = await session.exchange("POST", "/mcp", call, stop_after=1)  # then the client leaves
        assert first.status == 200 and first.last_id is not None, first.raw
        await app.progressed.wait()  # both progress events sent: the second is stored, not seen

        appended = store.hold_append(matches=lambda payloads: '"result"' in payloads)
        app.go.set()
        await appended.reached()  # the result has its seq; the store does not have it yet
        assert appended.held_key is not None
        read = store.hold_read(appended.held_key)
        replies: list[Any] = []
        async with anyio.create_task_group() as tg:

            async def resume() -> None:
                replies.append(
                    await session.exchange(
                        "GET", "/mcp", headers=session.headers(last_event_id=first.last_id), timeout=20
                    )
                )

            tg.start_soon(resume)
            await read.reached()  # the resume's catch-up read (the 2nd progress) lacks the result ...
            appended.release()  # ... which lands now, and is delivered while that read is on its way
            with anyio.fail_after(scaled(10)):
                await app.answered.wait()
            read.release()
    reply = replies[0]
    assert reply.status == 200, reply.raw
    answers = [m for m in reply.messages() if m.get("id") == call["id"]]
    assert len(answers) == 1 and "result" in answers[0], reply.raw
    steps = [m["params"]["progress"] for m in reply.messages() if m.get("method") == "notifications/progress"]
    assert steps == [2], reply.raw
