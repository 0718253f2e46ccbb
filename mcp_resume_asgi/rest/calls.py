"""A REST tool call's record in the store, and what the store says of its task.

A call is named by the client (`PUT /mcp/tools/{tool}/calls/{id}`) and scoped to the
caller: its record is under `rest:<principal>:<tool>:<id>` (digests, so any name fits
a key and another principal's call of the same id is another key - and a 404; the formats
are in `store/keys.py`). The
record is created with `add_key` (set-if-absent, atomic on every store): whoever
creates it runs the call, and a PUT that finds it is a retry (same `Idempotency-Key`:
the current state, never a second run) or a conflict (another key: 409).

It holds what the task cannot: the key, when, the request (the PUT body), the node
that took the PUT, then the task id the Tasks layer answered - or, for a call that was
answered without becoming a task, that answer. Everything else (status, result,
inputs) is the task's, read through `tasks/get`. Each call is also a member of the
caller's per-tool index (the store's bounded, self-expiring sets) for the listing.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp_resume_asgi.rest.json_text import parse_client
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import GapError, Store, StreamMeta
from mcp_resume_asgi.tasks.record import TaskRecord, message_of
from mcp_resume_asgi.tasks.stored import read_record

if TYPE_CHECKING:
    from mcp_resume_asgi.engine.port import Records
    from mcp_resume_asgi.tasks.record import StreamView

#: Largest record read back (the request and a plain answer are bounded when written).
MAX_RECORD_BYTES = 48 * 1024 * 1024
#: Events read back, from a stream's end, to find its latest progress notification.
PROGRESS_LOOKBACK = 32
#: Latest expiry a listing cursor may name (Unix time, the year 5138: any real one is below).
MAX_CURSOR_TIME = 1e11
#: A call's key formats are `store/keys.py`'s (these names stay for callers).
call_key = keys.rest_call
index_name = keys.rest_calls_index
index_member = keys.rest_call_member


@dataclass(frozen=True, slots=True)
class CallRecord:
    tool: str
    call_id: str
    idempotency_key: str
    created_at: float
    """Unix time."""
    request: Any
    """The PUT body: the tool's arguments."""
    owner: str
    """The node that took the PUT (its death before the task exists fails the call)."""
    ttl_s: float
    """How long the call is kept (its task's TTL)."""
    task_id: str | None = None
    answer: dict[str, Any] | None = None
    """The JSON-RPC answer of a call the app answered without a task (a result or an error)."""

    @property
    def expires_at(self) -> float:
        return self.created_at + self.ttl_s

    def ttl_left_s(self, now: float) -> float:
        return max(1.0, self.expires_at - now)

    def encode(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def decode(cls, raw: str | None) -> CallRecord | None:
        if raw is None or len(raw) > MAX_RECORD_BYTES:
            return None
        try:
            data = json.loads(raw)
            record = cls(**data) if isinstance(data, dict) else None
        except (ValueError, TypeError, RecursionError):
            return None
        if record is None or not _well_formed(record):
            return None
        return record


def _well_formed(r: CallRecord) -> bool:
    return (
        isinstance(r.tool, str)
        and isinstance(r.call_id, str)
        and isinstance(r.idempotency_key, str)
        and isinstance(r.created_at, int | float)
        and math.isfinite(r.created_at)
        and isinstance(r.owner, str)
        and isinstance(r.ttl_s, int | float)
        and (r.task_id is None or isinstance(r.task_id, str))
        and (r.answer is None or isinstance(r.answer, dict))
    )


StreamOfTask = Callable[[str], "str | None"]
"""The stream behind a task id (the Tasks layer's `stream_of_task`, bound to its signer)."""
TaskView = Callable[["TaskRecord", "StreamMeta | None"], Awaitable["StreamView"]]
"""A task's current round as the store holds it (the Tasks layer's `view_of`, bound)."""


class CallStore:
    """The calls' records, indexes and what the store holds of their tasks.

    `stream_of_task` and `task_view` are the Tasks layer's reads of its own records, handed
    over bound (the face reads a task as the Tasks layer does, never the engine)."""

    def __init__(self, port: Records, stream_of_task: StreamOfTask, task_view: TaskView) -> None:
        self.store: Store = port.store
        self.signer = port.signer
        self._stream_of_task = stream_of_task
        self.task_view = task_view

    async def load(self, key: str) -> CallRecord | None:
        return CallRecord.decode(await self.store.get_key(key))

    async def create(self, key: str, record: CallRecord) -> CallRecord | None:
        """Write `record` if no call has `key`; else the call already there (None: created)."""
        existing = await self.store.add_key(key, record.encode(), record.ttl_s)
        if existing is None:
            return None
        found = CallRecord.decode(existing)
        return found if found is not None else record  # unreadable: never run it again

    async def save(self, key: str, record: CallRecord, now: float) -> None:
        await self.store.set_key(key, record.encode(), record.ttl_left_s(now))

    async def forget(self, key: str, principal: str | None, record: CallRecord) -> None:
        """Take back a call the app refused outright (it never ran; the same PUT may come again)."""
        await self.store.delete_key(key)
        await self.unindex(principal, record)

    async def unindex(self, principal: str | None, record: CallRecord) -> None:
        await self.store.index_remove(
            keys.rest_calls_index(principal, record.tool), keys.rest_call_member(record.call_id)
        )

    async def indexed(self, principal: str | None, record: CallRecord, cap: int) -> bool:
        member = keys.rest_call_member(record.call_id)
        return await self.store.index_add(
            keys.rest_calls_index(principal, record.tool), member, record.expires_at, cap=cap
        )

    # ------------------------------------------------------------------ the call's task, in the store
    def stream_of(self, task_id: str) -> str | None:
        """The stream behind a task id (signed by the Tasks layer: a forged one is None)."""
        return self._stream_of_task(task_id)

    async def task_record(self, task_id: str) -> TaskRecord | None:
        stream_id = self.stream_of(task_id)
        if stream_id is None:
            return None
        return await read_record(self.store, self.signer, stream_id)

    async def current_stream(self, task_id: str) -> StreamMeta | None:
        """The stream of the task's current round (where its progress and answer are)."""
        record = await self.task_record(task_id)
        return await self.store.get_stream(record.current_stream) if record is not None else None

    async def latest_progress(self, meta: StreamMeta | None) -> dict[str, Any] | None:
        """The last `notifications/progress` the app sent on the stream, from its last events."""
        if meta is None or meta.last_seq <= 0:
            return None
        after = max(meta.first_seq - 1, meta.last_seq - PROGRESS_LOOKBACK, 0)
        try:
            events = await self.store.read(meta.stream_id, after, PROGRESS_LOOKBACK)
        except GapError:
            return None
        for _, frame in reversed(events):
            message = message_of(frame)
            if message is not None and message.get("method") == "notifications/progress":
                return message
        return None


def encode_cursor(expires_at: float, member: str) -> str:
    raw = json.dumps([expires_at, member], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(value: str) -> tuple[float, str] | None:
    """The position a `nextCursor` names, or None when it is not one `encode_cursor` gave: the
    member a call digest, the expiry a finite time (never text the store cannot take)."""
    if not 0 < len(value) <= 512 or not value.isascii():
        return None
    try:
        data = parse_client(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))
    except (ValueError, TypeError):  # (NotAcceptedJSON and binascii.Error are ValueErrors)
        return None
    if (
        isinstance(data, list)
        and len(data) == 2
        and isinstance(data[0], int | float)
        and not isinstance(data[0], bool)
        and 0 <= data[0] <= MAX_CURSOR_TIME
        and isinstance(data[1], str)
        and keys.is_rest_call_member(data[1])
    ):
        return float(data[0]), data[1]
    return None
