"""A stream whose node is gone is ended once, fleet-wide, on every store (`engine/orphans.py`).

The decision on the record alone (`core/orphans.judge`), without an event loop; then the ending
itself on each real store (memory, SQLite, Redis, a Redis Cluster), several finders at once on
handles of one store, as nodes of a fleet are: exactly one of them records the error, as the
stream's answer, past every id the lost node can have handed out (a resume after one its store
never kept gets it); every finder learns the stream is over;
and a finder that comes after a re-run took the record, or after the request's own answer,
writes nothing.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from mcp_resume_asgi.core import resume
from mcp_resume_asgi.core.orphans import LOST_TAIL, ORPHAN_TEXT, Orphan, after_loss, judge
from mcp_resume_asgi.engine.orphans import end_orphan
from mcp_resume_asgi.policy import Policy
from mcp_resume_asgi.store.base import Store, StreamKind, StreamMeta, StreamState
from tests.test_store_contract import BIG, Factory, append, make, meta, store

pytestmark = pytest.mark.anyio

__all__ = ["make", "store"]  # the fixtures, used by name

LOST = "node-lost"


def record(**fields: Any) -> StreamMeta:
    return meta(owner=LOST, **fields)


# ------------------------------------------------------------------ the decision, sans IO
def test_a_record_with_its_end_or_none_is_over() -> None:
    assert judge(None, "me") is Orphan.OVER
    assert judge(record(state=StreamState.COMPLETED, final_seq=3), "me") is Orphan.OVER
    assert judge(record(state=StreamState.EXPIRED), "me") is Orphan.OVER
    assert judge(record(final_seq=3), "me") is Orphan.OVER, "an answer recorded, not yet completed"


def test_a_running_record_of_this_node_or_of_none_is_not_an_orphan() -> None:
    assert judge(record(), LOST) is Orphan.OURS
    assert judge(meta(owner=""), "me") is Orphan.OURS


def test_a_running_record_of_another_node_asks_its_heartbeat() -> None:
    assert judge(record(), "me") is Orphan.ASK


# ------------------------------------------------------------------ the ending, on each store
def _messages(events: list[tuple[int, bytes]]) -> list[dict[str, Any]]:
    found = []
    for _, frame in events:
        data = b"".join(line[6:] for line in frame.split(b"\n") if line.startswith(b"data: "))
        found.append(json.loads(data))
    return found


async def test_finders_on_several_nodes_end_it_exactly_once(make: Factory) -> None:
    first = await make()
    handles = [first, await make(peer=first), await make(peer=first)]
    await first.create_stream(record(request_id=7, method="tools/call"), ttl_s=60)
    await append(first, "s1", [(1, b"data: one\n\n"), (2, b"data: two\n\n")])
    said: list[bool] = []

    async def find(store: Store, node_id: str) -> None:
        current = await store.get_stream("s1")
        assert current is not None
        said.append(await end_orphan(store, node_id, current.copy(), Policy(), f"finder {node_id}"))

    async with anyio.create_task_group() as tg:
        for i in range(6):
            tg.start_soon(find, handles[i % len(handles)], f"node-{i}")
    ended = await first.get_stream("s1")
    assert ended is not None
    assert said == [True] * 6, "every finder learns it is over"
    end = after_loss(2)
    assert end == 2 + LOST_TAIL
    assert ended.state is StreamState.COMPLETED and ended.final_seq == end and ended.last_seq == end
    assert ended.owner.startswith("node-"), "the winner's"
    events = await first.read("s1", 0)
    assert [seq for seq, _ in events] == [1, 2, end], "one error, past what the lost node handed out"
    error = _messages(events[2:])[0]
    assert error == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32000, "message": ORPHAN_TEXT},
    }
    # Found again later (another sweep, a late follower): over, nothing written.
    assert await end_orphan(first, "node-late", ended.copy(), Policy(), "late") is True
    assert [seq for seq, _ in await first.read("s1", 0)] == [1, 2, end]


async def test_a_resume_after_an_id_the_lost_node_handed_out_but_never_stored_gets_the_error(
    store: Store,
) -> None:
    """The lost node handed its client events the store never got (a SQLite file killed within
    its commit window, a Redis primary failing over): the client holds an id past what the
    record says, say 3 where the store has 1 and 2. Whoever ends the stream records the error
    where no such id can name it, so the client's resume after 3 gets it, at once."""
    await store.create_stream(record(request_id=7, method="tools/call"), ttl_s=60)
    await append(store, "s1", [(1, b"data: one\n\n"), (2, b"data: two\n\n")])
    seen = (await store.get_stream("s1")).copy()  # type: ignore[union-attr]
    assert await end_orphan(store, "node-finder", seen, Policy(), "the sweep") is True
    ended = await store.get_stream("s1")
    assert ended is not None and ended.final_seq is not None
    for held in (2, 3, 4, 1000):  # (the last event stored; ids of events the store never got)
        said = resume.answer(ended, held, via_link=False)
        assert said.kind is resume.Resume.SERVE, (held, said, ended.final_seq)
        events = await store.read("s1", held)
        assert [seq for seq, _ in events] == [ended.final_seq], held
        assert _messages(events) == [
            {"jsonrpc": "2.0", "id": 7, "error": {"code": -32000, "message": ORPHAN_TEXT}}
        ]
    # Its own id: the client has the answer.
    assert resume.answer(ended, ended.final_seq, via_link=False).kind is resume.Resume.NOTHING


async def test_a_finder_after_a_rerun_took_the_record_writes_nothing(store: Store) -> None:
    await store.create_stream(record(), ttl_s=60)
    seen = await store.get_stream("s1")
    assert seen is not None
    seen = seen.copy()
    applied, _ = await store.update_stream_if(
        "s1", {"owner": LOST, "state": StreamState.RUNNING}, owner="node-rerun"
    )
    assert applied
    assert await end_orphan(store, "node-finder", seen, Policy(), "a follower") is True, "it goes on"
    after = await store.get_stream("s1")
    assert after is not None and after.owner == "node-rerun" and after.final_seq is None
    assert await store.read("s1", 0) == []


async def test_a_finder_after_the_answer_writes_nothing(store: Store) -> None:
    await store.create_stream(record(), ttl_s=60)
    seen = (await store.get_stream("s1")).copy()  # type: ignore[union-attr]
    await store.append_final("s1", [(1, b"data: answer\n\n")], max_events=BIG, max_bytes=BIG, final_seq=1)
    assert await end_orphan(store, "node-finder", seen, Policy(), "the sweep") is True
    assert [frame for _, frame in await store.read("s1", 0)] == [b"data: answer\n\n"]


async def test_a_finder_of_a_record_gone_says_so(store: Store) -> None:
    await store.create_stream(record(), ttl_s=60)
    seen = (await store.get_stream("s1")).copy()  # type: ignore[union-attr]
    await store.delete_stream("s1")
    assert await end_orphan(store, "node-finder", seen, Policy(), "the sweep") is False


async def test_a_sessions_get_stream_is_expired_not_answered(store: Store) -> None:
    standalone = record()
    standalone.kind = StreamKind.STANDALONE
    await store.create_stream(standalone, ttl_s=60)
    seen = (await store.get_stream("s1")).copy()  # type: ignore[union-attr]
    assert await end_orphan(store, "node-finder", seen, Policy(), "a follower") is True
    after = await store.get_stream("s1")
    assert after is not None and after.state is StreamState.EXPIRED and after.final_seq is None
