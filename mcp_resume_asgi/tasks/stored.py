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

A record decides who runs what: its principal is whom the task is shown to, and its call
(tool and arguments) and path are what the next round runs, as the caller of `tasks/update`.
Whoever can write to the store could rewrite them, so a record is sealed with the app's
secret (`SEAL_PURPOSE`, an HMAC over its JSON and its key): one that does not open (forged,
altered, copied from another task, or sealed with another secret) reads as no record, and
is logged (each cause at most once a minute).
"""

from __future__ import annotations

import enum
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from cachetools import TTLCache

from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import Store, StreamMeta
from mcp_resume_asgi.tasks.record import TaskRecord
from mcp_resume_asgi.wire.tokens import TokenSigner

logger = logging.getLogger(__name__)

#: The signing purpose of task records (a seal is valid for nothing else).
SEAL_PURPOSE = "task-record"
#: How often, at most, records refused for one cause are logged as a warning.
WARN_EVERY_S = 60.0
_refusals: TTLCache[str, bool] = TTLCache(maxsize=16, ttl=WARN_EVERY_S)

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


def _sealed_part(stream_id: str, text: str) -> bytes:
    """What a record's seal covers: its JSON and its key (a record copied under another task's
    key does not open there)."""
    key = keys.task_record(stream_id)
    return key.encode("utf-8", "surrogatepass") + b"\n" + text.encode("utf-8", "surrogatepass")


def sealed(signer: TokenSigner, record: TaskRecord) -> str:
    """The stored form of `record`: its JSON and its seal."""
    text = record.encode()
    return json.dumps(
        {"sealed": text, "seal": signer.mac(SEAL_PURPOSE, _sealed_part(record.stream_id, text))}
    )


def _refused(stream_id: str, why: str) -> None:
    level = logging.DEBUG if why in _refusals else logging.WARNING
    _refusals[why] = True
    logger.log(level, "task %s: its record in the store is refused: %s", stream_id, why)


def _decoded(signer: TokenSigner, raw: str | None, stream_id: str) -> TaskRecord | None:
    """The record `sealed` stored as `raw` for `stream_id`; None for none, or one that does not
    open (logged)."""
    if raw is None:
        return None
    try:
        outer = json.loads(raw)
    except (ValueError, RecursionError):
        outer = None
    text, mac = (outer.get("sealed"), outer.get("seal")) if isinstance(outer, dict) else (None, None)
    if not isinstance(text, str) or not isinstance(mac, str):
        _refused(stream_id, "it is not sealed")
        return None
    if not signer.verify_mac(SEAL_PURPOSE, _sealed_part(stream_id, text), mac):
        _refused(
            stream_id,
            "its seal does not match (not sealed with this app's secret, altered, or another task's)",
        )
        return None
    record = TaskRecord.decode(text)
    return record if record is not None and record.stream_id == stream_id else None


async def read_record(store: Store, signer: TokenSigner, stream_id: str) -> TaskRecord | None:
    """The record of the task whose first request is `stream_id`, if the store has one."""
    return _decoded(signer, await store.get_key(keys.task_record(stream_id)), stream_id)


async def read_task(store: Store, signer: TokenSigner, stream_id: str) -> TaskRead | None:
    """The task's record and its current round's stream, with that stream's final event when
    the round is its first (one read; a later round's stream is a second, its event unread);
    None without a record."""
    read = await store.read_key_and_stream(keys.task_record(stream_id), stream_id)
    record = _decoded(signer, read.value, stream_id)
    if record is None:
        return None
    if record.current_stream == stream_id:
        return TaskRead(record, read.meta, read.final)
    return TaskRead(record, await store.get_stream(record.current_stream), UNREAD)


async def change_record(
    store: Store, signer: TokenSigner, stream_id: str, change: Change, *, create: TaskRecord | None = None
) -> TaskRecord | None:
    """Store `change` applied to the task's record as it is now; return the record stored.

    With no record (expired, or never written), None - or, with `create`, `change(create)`
    written only if there is still none. Raises `RecordContention` after `MAX_ATTEMPTS`
    conflicts.
    """
    key = keys.task_record(stream_id)
    for _ in range(MAX_ATTEMPTS):
        raw = await store.get_key(key)
        current = _decoded(signer, raw, stream_id)
        base = current if current is not None else create
        if base is None:
            return None
        changed = change(base)
        if changed == current:
            return current  # nothing to write
        if await store.replace_key(key, raw, sealed(signer, changed), changed.ttl_left_s(time.time())):
            return changed
        logger.debug("task %s: its record changed meanwhile; the change is applied again", stream_id)
    raise RecordContention(f"task {stream_id}: its record changed {MAX_ATTEMPTS} times during one change")


async def create_record(store: Store, signer: TokenSigner, record: TaskRecord) -> TaskRecord:
    """Write a new task's record; the one already there, if another writer was first."""
    stored = await change_record(store, signer, record.stream_id, lambda r: r, create=record)
    assert stored is not None
    return stored
