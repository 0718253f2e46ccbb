"""A write the store refuses behind the app's back (not an outage: a full store, say) ends the
stream with an error saying so, and nothing after it is recorded: events stored after a hole
would reach a resuming client as if none were missing. Two ways a write happens behind the
app's back: a store that writes behind (Redis), and a burst (what an app sends without yielding
goes out in one batch when it yields, on asyncio)."""

from __future__ import annotations

import json
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from starlette.types import Receive, Scope, Send

from mcp_resume_asgi import MemoryStore, Policy, ResumeMiddleware
from mcp_resume_asgi.engine.recorder import REFUSED_TEXT, StreamNotRecorded
from mcp_resume_asgi.store.base import Store, StreamMeta, StreamState
from tests.test_direct_path import RESULT, SESSION, Client, _progress, _scope

pytestmark = pytest.mark.anyio


class RefusingStore(MemoryStore):
    """The memory store, refusing its `refuse_at`th append (1-based) and every later one."""

    def __init__(self, refuse_at: int, *, write_behind: bool) -> None:
        super().__init__()
        self.write_behind = write_behind
        self.refuse_at = refuse_at
        self.appends = 0
        self.stream_ids: list[str] = []

    # A record created with its first events (`open_with`) counts them as an append.
    open_with = Store.open_with

    async def create_stream(self, meta: StreamMeta, ttl_s: float) -> None:
        self.stream_ids.append(meta.stream_id)
        await super().create_stream(meta, ttl_s)

    async def append(self, stream_id: str, events: list[tuple[int, bytes]], **kwargs: Any) -> None:
        self.appends += 1
        if self.appends >= self.refuse_at:
            raise ValueError("the store is full")
        await super().append(stream_id, events, **kwargs)


class Talker:
    """Sends `notes` progress events (yielding after each when `paced`), then the result; notes
    what its `send` raised."""

    def __init__(self, notes: int, *, paced: bool) -> None:
        self.notes = notes
        self.paced = paced
        self.raised: BaseException | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        headers = [(b"content-type", b"text/event-stream"), (b"mcp-session-id", SESSION)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        try:
            for i in range(1, self.notes + 1):
                await send({"type": "http.response.body", "body": _progress(i), "more_body": True})
                if self.paced:
                    await anyio.sleep(0.001)  # (each its own batch of the write-behind)
            await anyio.sleep(0.01)
            await send({"type": "http.response.body", "body": RESULT, "more_body": False})
        except StreamNotRecorded as exc:
            self.raised = exc
            raise


async def _recorded(store: RefusingStore) -> tuple[list[dict[str, Any]], StreamMeta]:
    (stream_id,) = store.stream_ids
    meta = await store.get_stream(stream_id)
    assert meta is not None
    events = await MemoryStore.read(store, stream_id, 0)
    messages = []
    for _, payload in events:
        for line in payload.split(b"\n"):
            if line.startswith(b"data: "):
                messages.append(json.loads(line[6:]))
    return messages, meta


@pytest.mark.parametrize(
    ("write_behind", "paced", "refuse_at", "anyio_backend"),
    # (a burst: its first event is written at once, the other eleven in the second append)
    [(True, True, 3, "asyncio"), (True, True, 3, "trio"), (False, False, 2, "asyncio")],
    ids=["write-behind-asyncio", "write-behind-trio", "burst-asyncio"],
)
async def test_a_refused_write_ends_the_stream_with_an_error_and_nothing_after_it(
    write_behind: bool, paced: bool, refuse_at: int
) -> None:
    store = RefusingStore(refuse_at, write_behind=write_behind)
    app = Talker(12, paced=paced)
    middleware = ResumeMiddleware(app, policy=Policy(keepalive_s=None), store=store)
    client = Client()
    with anyio.fail_after(10):
        await middleware(_scope(), client.receive, client.send)
    messages, meta = await _recorded(store)
    assert isinstance(app.raised, StreamNotRecorded), "the app's send after the refusal must fail"
    *progress, last = messages
    assert all(m["method"] == "notifications/progress" for m in progress)
    kept = [m["params"]["progress"] for m in progress]
    assert kept == list(range(1, len(kept) + 1)) and len(kept) < 12, kept
    assert last["id"] == 7 and REFUSED_TEXT in last["error"]["message"], last
    assert meta.state is StreamState.COMPLETED and meta.final_seq is not None
    # What the client was sent is what a resume would give it: no event of after the hole.
    seen = [json.loads(line[6:]) for line in client.body().split(b"\n") if line.startswith(b"data: {")]
    assert [m for m in seen if "method" in m] == progress[: len([m for m in seen if "method" in m])]
