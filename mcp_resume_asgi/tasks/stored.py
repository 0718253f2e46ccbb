"""A task's record in the store: read it, and change it without losing anyone else's change.

Several writers change one record (`task:<stream id>`), on any node, at any moment:
its creation, the end of each round (`TasksMiddleware`), the first poll that sees
the end (`ended_at`), `tasks/cancel` (`cancelled_at`) and the next round taking
over (`update.py`). A plain read-then-write loses whatever another writer stored
in between: a cancel acknowledged to its client and then overwritten by the next
round's pointer, which ran to completion. So every write is a compare-and-set
(`Store.replace_key`) of a *pure* change (`TaskRecord -> TaskRecord`): on a
conflict the record is read again and the change applied to what is there now,
at most `MAX_ATTEMPTS` times. A change must be idempotent (a write whose reply
was lost is retried against its own result).

Reading a task for `tasks/get` is one store read in the common cases (a task in its
first round, working or finished): the record, its request's stream and that
request's answer together (`Store.read_key_and_stream`, one round trip on Redis).
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import Store, StreamMeta
from mcp_resume_asgi.tasks.record import TaskRecord

logger = logging.getLogger(__name__)

#: Compare-and-set attempts before giving up: a record has a handful of writers per round,
#: each writing once, so a change that loses this many times in a row means something is wrong.
MAX_ATTEMPTS = 10

Change = Callable[[TaskRecord], TaskRecord]


class RecordContention(Exception):
    """The record kept changing under a writer: its change was not stored."""


class Unread(enum.Enum):
    UNREAD = "unread"


#: The final event of a round's stream was not read with it (`TaskRead.final`).
UNREAD = Unread.UNREAD
Final = bytes | None | Literal[Unread.UNREAD]


@dataclass(frozen=True, slots=True)
class TaskRead:
    """A task as one read found it (`read_task`)."""

    record: TaskRecord
    meta: StreamMeta | None
    """The stream of its current round (None: gone)."""
    final: Final
    """That stream's final event (None: none, or no longer retained), or `UNREAD`."""


#: A task record's key (`store/keys.py`; the name stays for callers).
task_key = keys.task_record


def _decoded(raw: str | None, stream_id: str) -> TaskRecord | None:
    record = TaskRecord.decode(raw)
    return record if record is not None and record.stream_id == stream_id else None


async def read_record(store: Store, stream_id: str) -> TaskRecord | None:
    """The record of the task whose first request is `stream_id`, if the store has one."""
    return _decoded(await store.get_key(keys.task_record(stream_id)), stream_id)


async def read_task(store: Store, stream_id: str) -> TaskRead | None:
    """The task's record and its current round's stream, with that stream's final event when
    the round is its first (one read; a later round's stream is a second, its event unread);
    None without a record."""
    read = await store.read_key_and_stream(keys.task_record(stream_id), stream_id)
    record = _decoded(read.value, stream_id)
    if record is None:
        return None
    if record.current_stream == stream_id:
        return TaskRead(record, read.meta, read.final)
    return TaskRead(record, await store.get_stream(record.current_stream), UNREAD)


async def change_record(
    store: Store, stream_id: str, change: Change, *, create: TaskRecord | None = None
) -> TaskRecord | None:
    """Store `change` applied to the task's record as it is now; return the record stored.

    With no record (expired, or never written), None - or, with `create`, `change(create)`
    written only if there is still none. Raises `RecordContention` after `MAX_ATTEMPTS`
    conflicts.
    """
    key = keys.task_record(stream_id)
    for _ in range(MAX_ATTEMPTS):
        raw = await store.get_key(key)
        current = _decoded(raw, stream_id)
        base = current if current is not None else create
        if base is None:
            return None
        changed = change(base)
        if changed == current:
            return current  # nothing to write
        if await store.replace_key(key, raw, changed.encode(), changed.ttl_left_s(time.time())):
            return changed
        logger.debug("task %s: its record changed meanwhile; the change is applied again", stream_id)
    raise RecordContention(f"task {stream_id}: its record changed {MAX_ATTEMPTS} times during one change")


async def create_record(store: Store, record: TaskRecord) -> TaskRecord:
    """Write a new task's record; the one already there, if another writer was first."""
    stored = await change_record(store, record.stream_id, lambda r: r, create=record)
    assert stored is not None
    return stored
