"""A task's record changed by several writers at once (`tasks/stored.py`), on both stores.

Each race is forced, not hoped for: `PausingStore` holds one writer's write after its
read (a real store underneath) while the other writer goes through, then lets it go.

* The helper: two changes racing are both kept; a change that keeps losing gives up,
  bounded; a record is created once.
* End to end (a stock `MCPServer`, 2026-07-28, a task with a next round): a `tasks/cancel`
  stored between the next round's read of the record and its write stops that round;
  one read before the next round took over and stored after stops it too. Before the
  compare-and-set, the round ran to completion in both, though the cancel was acknowledged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import uuid
from collections.abc import AsyncIterator, Callable
from typing import cast

import anyio
import pytest

from mcp_resume_asgi import MemoryStore, Store
from mcp_resume_asgi.tasks.record import TaskRecord
from mcp_resume_asgi.tasks.stored import (
    MAX_ATTEMPTS,
    RecordContention,
    change_record,
    create_record,
    read_record,
    sealed,
    task_key,
)
from mcp_resume_asgi.wire.tokens import TokenSigner
from tests.apps.tasks_app import SEEN
from tests.support.pausing_store import PausingStore
from tests.support.stores import redis_prefix, redis_url
from tests.support.timing import scaled
from tests.test_tasks import created, store_kind, wrapped
from tests.test_tasks_input import ELICITING, YES, until_status, update

pytestmark = pytest.mark.anyio
__all__ = ["store_kind"]  # the store fixture (memory, Redis) of test_tasks.py

SIGNER = TokenSigner("tasks-tests-shared-secret")  # (`test_tasks.wrapped`'s secret)


@contextlib.asynccontextmanager
async def a_store(kind: str) -> AsyncIterator[Store]:
    if kind == "memory":
        yield MemoryStore()
        return
    from mcp_resume_asgi.store import RedisStore

    store = RedisStore(redis_url(), prefix=redis_prefix("test-task-races"))
    try:
        yield store
    finally:
        await store.clear()
        await store.aclose()


def a_record(stream_id: str = "s1") -> TaskRecord:
    return TaskRecord(stream_id, "alice", 1000.0, 3_600_000_000, 100, "/mcp", "2026-07-28")


# ----------------------------------------------------------------------------- the helper
async def test_two_changes_racing_are_both_kept(store_kind: str) -> None:
    async with a_store(store_kind) as real:
        pausing = PausingStore(real)
        store = cast(Store, pausing)
        await create_record(store, SIGNER, a_record())
        held = pausing.hold_write(task_key("s1"))

        async def end() -> None:
            await change_record(store, SIGNER, "s1", lambda r: r.ended(2000.0))

        async with anyio.create_task_group() as tg:
            tg.start_soon(end)
            try:
                await held.reached()  # the first writer has read the record, not written it
                cancelled = await change_record(store, SIGNER, "s1", lambda r: r.cancelled(1500.0))
            finally:
                held.release()
        assert cancelled is not None and cancelled.cancelled_at == 1500.0
        stored = await read_record(real, SIGNER, "s1")
        assert stored is not None
        assert (stored.cancelled_at, stored.ended_at) == (1500.0, 2000.0), "neither change was lost"


async def test_a_change_that_keeps_losing_gives_up(store_kind: str) -> None:
    async with a_store(store_kind) as real:
        await create_record(real, SIGNER, a_record())
        interfering = 0

        class Busy(PausingStore):
            async def replace_key(self, key: str, expected: str | None, value: str, ttl_s: float) -> bool:
                nonlocal interfering
                interfering += 1  # another writer gets there first, every time
                record = await read_record(real, SIGNER, "s1")
                assert record is not None
                busier = dataclasses.replace(record, poll_interval_ms=record.poll_interval_ms + 1)
                await real.set_key(key, sealed(SIGNER, busier), 60)
                return await real.replace_key(key, expected, value, ttl_s)

        with pytest.raises(RecordContention):
            await change_record(cast(Store, Busy(real)), SIGNER, "s1", lambda r: r.cancelled(1500.0))
        assert interfering == MAX_ATTEMPTS
        stored = await read_record(real, SIGNER, "s1")
        assert stored is not None and stored.cancelled_at is None


async def test_a_record_is_created_once_and_a_missing_one_is_not_changed(store_kind: str) -> None:
    async with a_store(store_kind) as store:
        first = await create_record(store, SIGNER, a_record())
        again = await create_record(store, SIGNER, dataclasses.replace(a_record(), created_at=1001.0))
        assert again == first and (await read_record(store, SIGNER, "s1")) == first
        assert await change_record(store, SIGNER, "gone", lambda r: r.cancelled(1.0)) is None
        assert await store.get_key(task_key("gone")) is None
        # A record of another task under the key (never written so) is no record of this one,
        # nor one written unsealed, nor one sealed for another task.
        await store.set_key(task_key("s2"), a_record("s3").encode(), 60)
        assert await read_record(store, SIGNER, "s2") is None
        await store.set_key(task_key("s2"), sealed(SIGNER, a_record("s3")), 60)
        assert await read_record(store, SIGNER, "s2") is None


# ----------------------------------------------------------------------------- end to end
def written(value: str) -> dict[str, object]:
    """The record a write stores (under its seal)."""
    record = json.loads(json.loads(value)["sealed"])
    assert isinstance(record, dict)
    return record


def is_round(n: int) -> Callable[[str], bool]:
    return lambda value: written(value)["round"] == n


def is_cancelled(value: str) -> bool:
    return written(value)["cancelled_at"] is not None


async def until_settled(tag: str) -> None:
    with anyio.fail_after(scaled(15)):
        while tag not in SEEN.cancelled and tag not in SEEN.finished:
            await anyio.sleep(0.05)


@pytest.mark.slow
async def test_a_cancel_stored_between_the_next_rounds_read_and_write_stops_that_round() -> None:
    tag = f"race-a-{uuid.uuid4().hex[:8]}"
    async with wrapped(wrap=PausingStore) as h:
        store = h.store
        assert isinstance(store, PausingStore)
        answer = await h.call("confirm_then_work", {"seconds": 8.0, "tag": tag}, capabilities=ELICITING)
        task_id = created(answer)
        key = next(iter((await until_status(h, task_id, "input_required"))["inputRequests"]))
        held = store.hold_write(task_key(h.stream_of(task_id)), is_round(1))
        try:
            acked = await update(h, task_id, {key: YES})
            await held.reached()  # the next round has read the record (not cancelled)
            cancel = await h.task("tasks/cancel", task_id)
        finally:
            held.release()
        assert acked.json()["result"] == {"resultType": "complete"}
        assert cancel.json()["result"] == {"resultType": "complete"}, cancel.text
        await until_settled(tag)
        assert tag in SEEN.cancelled and tag not in SEEN.finished, "the next round was stopped"
        assert (await h.get(task_id))["status"] == "cancelled"


@pytest.mark.slow
async def test_a_cancel_read_before_the_next_round_took_over_and_stored_after_stops_that_round() -> None:
    tag = f"race-b-{uuid.uuid4().hex[:8]}"
    async with wrapped(wrap=PausingStore) as h:
        store = h.store
        assert isinstance(store, PausingStore)
        answer = await h.call("confirm_then_work", {"seconds": 8.0, "tag": tag}, capabilities=ELICITING)
        task_id = created(answer)
        key = next(iter((await until_status(h, task_id, "input_required"))["inputRequests"]))
        origin = h.stream_of(task_id)
        held = store.hold_write(task_key(origin), is_cancelled)
        async with anyio.create_task_group() as tg:
            replies = []

            async def cancel() -> None:
                replies.append(await h.task("tasks/cancel", task_id))

            tg.start_soon(cancel)
            try:
                await held.reached()  # the cancel has read the record (still round 0)
                acked = await update(h, task_id, {key: YES})
                with anyio.fail_after(scaled(5)):
                    while (
                        tag not in SEEN.started
                        or getattr(await read_record(store, h.signer, origin), "round", 0) != 1
                    ):
                        await anyio.sleep(0.05)
            finally:
                held.release()
        assert acked.json()["result"] == {"resultType": "complete"}
        assert replies[0].json()["result"] == {"resultType": "complete"}, replies[0].text
        await until_settled(tag)
        assert tag in SEEN.cancelled and tag not in SEEN.finished, "the next round was stopped"
        assert (await h.get(task_id))["status"] == "cancelled"
