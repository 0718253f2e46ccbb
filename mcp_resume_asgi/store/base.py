"""The storage seam between the stream engine and where events live.

The engine runs an app's request on one node, but a client may come back on any
node (issue: scale out), so everything a resuming client needs - the events, the
stream's state, the session's protocol version - goes through this interface
rather than living in the engine's own objects. Implementations: `MemoryStore`
(one process, the default) and a Redis store (many processes).

Events are stored as `(seq, payload)` pairs: `seq` is assigned by the engine,
strictly increasing per stream, and `payload` is the SSE frame *without* its
`id:` line, so replay is a concatenation, not a re-serialisation.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from mcp_resume_asgi.wire.side_slots import SideAttribute, side_attribute

JSONValue = Any
"""A decoded JSON value (a JSON-RPC id is a str or an int)."""


class StreamKind(enum.StrEnum):
    REQUEST = "request"
    """The SSE answer to one POSTed JSON-RPC request."""
    STANDALONE = "standalone"
    """The session's GET stream for unsolicited server messages."""


class StreamState(enum.StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    """The final JSON-RPC response for the request was recorded (or the app ended the stream)."""
    EXPIRED = "expired"
    """Nobody came back within the resume window; the app's work was cancelled."""


_T = TypeVar("_T")


class _MetaRarely:
    """The fields of a `StreamMeta` that most records keep at their defaults, apart (`_rarely`)."""

    __slots__ = ("first_seq", "resumable_opt_in", "route", "trace", "turn")

    def __init__(
        self,
        first_seq: int = 1,
        resumable_opt_in: bool = False,
        route: int = -1,
        trace: str | None = None,
        turn: int = 0,
    ) -> None:
        self.first_seq = first_seq
        self.resumable_opt_in = resumable_opt_in
        self.route = route
        self.trace = trace
        self.turn = turn


_META_DEFAULTS = _MetaRarely()
"""The defaults, shared by every record that keeps them all (never written itself)."""


def _rarely(name: str) -> Any:
    """A `StreamMeta` field kept in its `_MetaRarely` (`side_slots`)."""
    return side_attribute("_rare", _META_DEFAULTS, _MetaRarely, name)


_FRESH: Any = object()
"""(`StreamMeta`) No list given: a new one."""


class StreamMeta:
    """Everything about a stream that a node other than its owner may need.

    A store may hold thousands of these, one per stream in its resume window, so the fields most
    records keep at their defaults (`first_seq`, `turn`, `route`, `resumable_opt_in`, `trace`) lie
    in a side object shared until one of them is written; each is a field all the same."""

    __dataclass_fields__: ClassVar[dict[str, Any]]
    __slots__ = (
        "_rare",
        "attach_gen",
        "attached",
        "delivered_seq",
        "final_seq",
        "issued_inputs",
        "kind",
        "last_contact",
        "last_seq",
        "method",
        "owner",
        "path",
        "pending_inputs",
        "principal",
        "protocol_version",
        "request_id",
        "session_id",
        "state",
        "stream_id",
        "version",
    )

    stream_id: str
    kind: StreamKind
    session_id: str | None
    principal: str | None
    protocol_version: str
    path: str
    """Path of the app's MCP endpoint, where client answers are delivered."""
    request_id: JSONValue
    method: str | None
    state: StreamState
    last_seq: int
    """Highest seq recorded so far (0: only the priming position exists)."""
    first_seq: SideAttribute[int] = _rarely("first_seq")
    """Lowest seq still retained; a resume from before `first_seq - 1` hit a gap."""
    final_seq: int | None
    delivered_seq: int
    """Highest seq written to some client connection."""
    pending_inputs: list[JSONValue]
    """Ids of server-to-client requests on this stream that still wait for an answer."""
    issued_inputs: list[JSONValue]
    attach_gen: int
    """Bumped by every new client attachment; an older attachment that sees a newer
    generation knows it was replaced and leaves."""
    attached: bool
    last_contact: float
    turn: SideAttribute[int] = _rarely("turn")
    owner: str
    """Node that runs the app's side of the stream."""
    route: SideAttribute[int] = _rarely("route")
    """Index of the route whose policy governs the stream (-1: the default policy)."""
    resumable_opt_in: SideAttribute[bool] = _rarely("resumable_opt_in")
    """The client of a 2026-07-28 request asked for a resumable stream
    (`protocol.RESUMABLE_STREAMS_EXTENSION`); without it that revision's streams are not."""
    version: int
    """Kept by the store, not the caller: bumped by every change to the stream (events
    appended or dropped, metadata updated, an attach). A waiter passes the version it
    last saw to `Store.wait`, so a change made between its read and its wait - on
    another node, say - wakes it at once instead of being missed. (Keep the number,
    not the object: `get_stream` may hand out the store's live record.)"""
    trace: SideAttribute[str | None] = _rarely("trace")
    """The W3C `traceparent` of the request that created the stream, if telemetry is on
    (`telemetry`): a resume on any node links its span to it. 55 characters at most; a
    record without it (written before it existed) reads as None."""

    def __init__(
        self,
        stream_id: str,
        kind: StreamKind,
        session_id: str | None,
        principal: str | None,
        protocol_version: str,
        path: str,
        request_id: JSONValue = None,
        method: str | None = None,
        state: StreamState = StreamState.RUNNING,
        last_seq: int = 0,
        first_seq: int = 1,
        final_seq: int | None = None,
        delivered_seq: int = 0,
        pending_inputs: list[JSONValue] = _FRESH,
        issued_inputs: list[JSONValue] = _FRESH,
        attach_gen: int = 0,
        attached: bool = False,
        last_contact: float = 0.0,
        turn: int = 0,
        owner: str = "",
        route: int = -1,
        resumable_opt_in: bool = False,
        version: int = 0,
        trace: str | None = None,
    ) -> None:
        self.stream_id = stream_id
        self.kind = kind
        self.session_id = session_id
        self.principal = principal
        self.protocol_version = protocol_version
        self.path = path
        self.request_id = request_id
        self.method = method
        self.state = state
        self.last_seq = last_seq
        self.final_seq = final_seq
        self.delivered_seq = delivered_seq
        self.pending_inputs = [] if pending_inputs is _FRESH else pending_inputs
        self.issued_inputs = [] if issued_inputs is _FRESH else issued_inputs
        self.attach_gen = attach_gen
        self.attached = attached
        self.last_contact = last_contact
        self.owner = owner
        self.version = version
        if first_seq == 1 and turn == 0 and route == -1 and trace is None and resumable_opt_in is False:
            self._rare = _META_DEFAULTS
        else:
            self._rare = _MetaRarely(first_seq, resumable_opt_in, route, trace, turn)

    @property
    def waiting_for_input(self) -> bool:
        return bool(self.pending_inputs) and self.state is StreamState.RUNNING

    def copy(self) -> StreamMeta:
        """A copy with lists of its own (its rarely set fields shared while at their defaults);
        `copy.copy` on a slotted class is ~20x slower."""
        copied = StreamMeta(
            self.stream_id,
            self.kind,
            self.session_id,
            self.principal,
            self.protocol_version,
            self.path,
            self.request_id,
            self.method,
            self.state,
            self.last_seq,
            final_seq=self.final_seq,
            delivered_seq=self.delivered_seq,
            pending_inputs=list(self.pending_inputs),
            issued_inputs=list(self.issued_inputs),
            attach_gen=self.attach_gen,
            attached=self.attached,
            last_contact=self.last_contact,
            owner=self.owner,
            version=self.version,
        )
        rare = self._rare
        if rare is not _META_DEFAULTS:
            copied._rare = _MetaRarely(
                rare.first_seq, rare.resumable_opt_in, rare.route, rare.trace, rare.turn
            )
        return copied


# A dataclass of its own `__slots__` and `__init__` (fields, repr, eq, `replace` as any dataclass's);
# applied here, not as a decorator, so that type checkers take the class as written.
dataclass(init=False)(StreamMeta)


def record_fields(meta: StreamMeta) -> tuple[Any, ...]:
    """A record as plain values in one order, its enums as their values and without `version`
    (each store keeps its own): what `SQLiteStore`'s file and `MemoryStore`'s cold streams keep,
    made a record again by `record_from_fields`."""
    return (
        meta.stream_id,
        meta.kind.value,
        meta.session_id,
        meta.principal,
        meta.protocol_version,
        meta.path,
        meta.request_id,
        meta.method,
        meta.state.value,
        meta.last_seq,
        meta.first_seq,
        meta.final_seq,
        meta.delivered_seq,
        meta.pending_inputs,
        meta.issued_inputs,
        meta.attach_gen,
        meta.attached,
        meta.last_contact,
        meta.turn,
        meta.owner,
        meta.route,
        meta.resumable_opt_in,
        meta.trace,
    )


def record_from_fields(f: Sequence[Any]) -> StreamMeta:
    """The record `record_fields` gave as `f`, its values taken as they are (a caller reading them
    from outside checks them first); ValueError for a kind or state that is none."""
    return StreamMeta(
        f[0],
        StreamKind(f[1]),
        f[2],
        f[3],
        f[4],
        f[5],
        f[6],
        f[7],
        StreamState(f[8]),
        f[9],
        first_seq=f[10],
        final_seq=f[11],
        delivered_seq=f[12],
        pending_inputs=f[13],
        issued_inputs=f[14],
        attach_gen=f[15],
        attached=f[16],
        last_contact=f[17],
        turn=f[18],
        owner=f[19],
        route=f[20],
        resumable_opt_in=f[21],
        trace=f[22],
    )


@dataclass(slots=True)
class SessionInfo:
    """What the engine learned about an MCP session at `initialize`."""

    session_id: str
    protocol_version: str
    principal: str | None = None
    capabilities: dict[str, Any] = field(default_factory=dict)
    """The client capabilities sent in `initialize`."""


class GapError(Exception):
    """A client asked to resume from before the oldest event still retained."""

    def __init__(self, stream_id: str, after_seq: int, first_seq: int) -> None:
        super().__init__(f"events after {after_seq} were dropped (oldest kept: {first_seq})")
        self.stream_id = stream_id
        self.after_seq = after_seq
        self.first_seq = first_seq


@dataclass(slots=True)
class KeyAndStream:
    """What `Store.read_key_and_stream` read, at one moment."""

    value: str | None
    """`get_key(key)`."""
    meta: StreamMeta | None
    """`get_stream(stream_id)`."""
    final: bytes | None
    """The payload of the stream's final event (`meta.final_seq`); None while it has none, or
    once that event is no longer retained (evicted to stay within the store's bounds)."""


@dataclass(frozen=True, slots=True)
class Listing:
    """An entry of an index (`Store.index_add`) that opening a stream writes in the same call
    (`Store.open_with`'s `listing`): the stream's id as a member of `index` until `expires_at`
    (unix time), unless `index` holds `cap` live members already."""

    index: str
    expires_at: float
    cap: int


class FencedError(Exception):
    """A write made on behalf of a node that no longer owns the stream (`Store.append`'s
    `owner`): the node was taken for lost and another one runs its request now. Nothing of the
    write was made."""

    def __init__(self, stream_id: str, owner: str | None) -> None:
        super().__init__(f"stream {stream_id} is owned by {owner!r} now")
        self.stream_id = stream_id
        self.owner = owner


class StoreFullError(Exception):
    """The store holds its maximum number of running streams; new streams are refused."""


@dataclass(slots=True)
class StoreUsage:
    """What a store holds right now (metrics, tests)."""

    streams: int
    """Streams not yet expired or deleted."""
    bytes: int
    """Event payload bytes retained, across all streams (what the global budget bounds)."""


class Store(abc.ABC):
    """Where streams, their events and session facts are kept.

    Every method is safe to call concurrently. Bounds are the store's job:
    `append` evicts the oldest events of a stream beyond its caps (advancing
    `first_seq`) and keeps the store's global byte budget.
    """

    shared: bool = False
    """True when other processes see the same data (the middleware then runs as a node
    of a cluster: heartbeats, session owners, relays)."""

    durable: bool = False
    """True when what the store holds outlives this process, which a restart finds again
    (`SQLiteStore`): the middleware then runs the process as a node (a heartbeat), so that what
    an earlier life left running has an owner no longer alive, as a lost node's would."""

    write_behind: bool = False
    """True when each write costs a round trip: the engine then lets the app go on while
    a write is in flight and records what it sent meanwhile as one batch."""

    def is_unavailable_error(self, exc: BaseException) -> bool:
        """Whether `exc`, raised by this store, means the store cannot be reached right now
        (the middleware then serves requests without resumability until it recovers)."""
        return False

    def own_secret(self) -> bytes | None:
        """A secret the store keeps, for a process configured with none, so that the stream URLs
        and event ids it mints still verify after a restart (None: the store keeps none)."""
        return None

    @abc.abstractmethod
    async def create_stream(self, meta: StreamMeta, ttl_s: float) -> None: ...

    @abc.abstractmethod
    async def get_stream(self, stream_id: str) -> StreamMeta | None:
        """The stream's metadata, to be treated as read-only: change it with `update_stream`.

        It may be a snapshot (Redis) or the store's own record (memory), so a caller
        that keeps it may see later changes, or may not.
        """

    @abc.abstractmethod
    async def update_stream(
        self, stream_id: str, ttl_s: float | None = None, *, returning: bool = False, **changes: Any
    ) -> StreamMeta | None:
        """Apply `changes` to the stream's metadata, optionally reset its TTL, wake waiters.

        Returns None, unless `returning`: then the metadata after the change, or None when the
        stream does not exist (nothing was changed). Most callers only write, and reading the
        record back costs (a copy, or on Redis a reply to decode), so it is asked for.
        """

    @abc.abstractmethod
    async def update_stream_if(
        self,
        stream_id: str,
        expect: Mapping[str, Any],
        ttl_s: float | None = None,
        **changes: Any,
    ) -> tuple[bool, StreamMeta | None]:
        """Compare-and-set: apply `changes` (as `update_stream`) only if every field named in
        `expect` currently equals its value, atomically across processes.

        Returns `(applied, meta)`: the metadata after the change, or as it is when the
        expectation failed; `(False, None)` when the stream does not exist. Lets a node
        do a read-modify-write (detach only if `attach_gen` is still ours, `turn + 1`,
        `pending_inputs` edits) without losing another node's concurrent change.
        """

    def detached(
        self, stream_id: str, gen: int, *, last_contact: float, delivered_seq: int
    ) -> Awaitable[Any]:
        """The stream's connection of generation `gen` was let go: not attached any more, in
        contact at `last_contact`, delivered up to `delivered_seq` - unless a newer connection
        has taken the stream over. `update_stream_if` on `attach_gen`, which this is; a store
        may do it more cheaply (once per request, `MemoryStore`'s does)."""
        return self.update_stream_if(
            stream_id,
            {"attach_gen": gen},
            attached=False,
            last_contact=last_contact,
            delivered_seq=delivered_seq,
        )

    @abc.abstractmethod
    async def attach(self, stream_id: str, now: float) -> StreamMeta | None:
        """Atomically make a new client connection the stream's only one: bump
        `attach_gen`, set `attached` and `last_contact`; return the updated metadata."""

    @abc.abstractmethod
    async def delete_stream(self, stream_id: str) -> None: ...

    @abc.abstractmethod
    async def append(
        self,
        stream_id: str,
        events: Sequence[tuple[int, bytes]],
        *,
        max_events: int,
        max_bytes: int,
        owner: str | None = None,
    ) -> None:
        """Record events (seqs strictly increasing) and wake readers waiting on the stream.

        Idempotent: events the stream holds already are not recorded again, so a write retried
        after its first try landed unseen (a store that timed out but ran it) changes nothing;
        another payload under a seq already recorded is a ValueError.

        Fenced: with `owner`, nothing is written unless the stream's record names that node as
        its owner (checked in the same step as the write): `FencedError` otherwise. A node that
        only looked dead (paused past its timeout) finds so on its next write, before it adds
        an event beside those of the node that runs its request again."""

    async def open_with(
        self,
        meta: StreamMeta,
        ttl_s: float,
        events: Sequence[tuple[int, bytes]],
        *,
        max_events: int,
        max_bytes: int,
        final_seq: int | None = None,
        retain_s: float | None = None,
        listing: Listing | None = None,
    ) -> bool:
        """`create_stream(meta, ttl_s)` with its first `events` (`append`), and, with `final_seq`
        (the final answer is among them), the stream completed (`state` COMPLETED, `final_seq`,
        kept `retain_s` from now; None: `ttl_s`), as one call.

        With `listing` and no `final_seq`, the stream is also added to `listing.index`
        (`index_add(listing.index, meta.stream_id, listing.expires_at, cap=listing.cap)`): True
        once it is there, False when that index was full (the stream is opened all the same). A
        stream opened completed is not listed; without `listing`, False.

        A request answered at once needs nothing else of the store, nor does a running one's
        entry in the index of running requests: a store that pays a round trip per call does it
        in one, and atomically (`RedisStore`: one Lua script). The store may keep `meta` itself
        (`MemoryStore` does): the caller gives it up. This default makes the calls, in that
        order, so a reader never sees a `final_seq` ahead of its event, nor a listed stream
        without its record. Raises `StoreFullError` as `create_stream` does.
        """
        await self.create_stream(meta, ttl_s)
        if events:
            await self.append(meta.stream_id, events, max_events=max_events, max_bytes=max_bytes)
        if final_seq is not None:
            await self.update_stream(
                meta.stream_id, ttl_s=retain_s, final_seq=final_seq, state=StreamState.COMPLETED
            )
        return await self._list_by_call(meta.stream_id, listing, final_seq)

    async def _list_by_call(self, stream_id: str, listing: Listing | None, final_seq: int | None) -> bool:
        """`open_with`'s `listing` made by a call of its own (`index_add`), once the stream is
        open: what `open_with` returns for a store that does not write it in the same call."""
        if listing is None or final_seq is not None:
            return False
        return await self.index_add(listing.index, stream_id, listing.expires_at, cap=listing.cap)

    async def append_final(
        self,
        stream_id: str,
        events: Sequence[tuple[int, bytes]],
        *,
        max_events: int,
        max_bytes: int,
        final_seq: int,
        retain_s: float | None = None,
        owner: str | None = None,
        unlist: str | None = None,
    ) -> bool:
        """`append(events)`, the last of which hold the final answer (`final_seq`), and the stream
        completed as `open_with` completes it, as one call. False when the stream does not
        exist (nothing was written). `owner`: fenced as `append` is. `unlist`: an index the
        stream is taken out of in the same call (`index_remove(unlist, stream_id)`), whether or
        not the stream exists; not when the write is fenced (nothing is written then).

        What recording a request's answer takes once its stream is open; this default makes
        the calls (`append`, then `update_stream`, then `index_remove`), as the answer must be
        stored before the stream says it has one, and before it leaves the index.
        """
        await self.append(stream_id, events, max_events=max_events, max_bytes=max_bytes, owner=owner)
        completed = await self.update_stream(
            stream_id, ttl_s=retain_s, returning=True, final_seq=final_seq, state=StreamState.COMPLETED
        )
        if unlist is not None:
            await self.index_remove(unlist, stream_id)
        return completed is not None

    @abc.abstractmethod
    async def read(self, stream_id: str, after_seq: int, limit: int = 1000) -> list[tuple[int, bytes]]:
        """Events with seq > `after_seq`, oldest first, at most `limit`.

        Raises `GapError` when events right after `after_seq` were evicted.
        """

    async def read_with_meta(
        self, stream_id: str, after_seq: int, limit: int = 1000
    ) -> tuple[list[tuple[int, bytes]], StreamMeta | None]:
        """`read`, then the stream's metadata as it is after those events (None: the stream is gone).

        What a client connection does after every batch it forwards; a store that
        pays a round trip per call does both in one.
        """
        events = await self.read(stream_id, after_seq, limit)
        return events, await self.get_stream(stream_id)

    async def read_key_and_stream(self, key: str, stream_id: str) -> KeyAndStream:
        """`get_key(key)`, `get_stream(stream_id)` and the stream's final event, as one read.

        What answering for a request's outcome from the store takes (a task's record, its
        request's stream, that request's answer: `tasks/get`); a store that pays a round trip
        per call does it in one, and atomically (`RedisStore`: one Lua script). This default
        makes the three calls, as the memory store, which pays no round trip, keeps it; the
        metadata is a copy, for `get_stream` may hand out the live record (`MemoryStore`), which
        the stream's answer being recorded after this read would change under the caller: a
        `final_seq` with no `final` read for it reads as an answer lost.
        """
        value = await self.get_key(key)
        meta = await self.get_stream(stream_id)
        if meta is not None:
            meta = meta.copy()
        final = None
        if meta is not None and meta.final_seq is not None:
            try:
                events = await self.read(stream_id, meta.final_seq - 1, 1)
            except GapError:
                events = []
            if events and events[0][0] == meta.final_seq:
                final = events[0][1]
        return KeyAndStream(value, meta, final)

    @abc.abstractmethod
    async def wait(
        self, stream_id: str, after_seq: int, within_s: float, *, version: int | None = None
    ) -> None:
        """Return when the stream has an event after `after_seq`, its metadata changed, or `within_s` seconds passed.

        With `version` (the `StreamMeta.version` the caller last saw), also return at
        once if the stream changed since then; without it, only changes made after the
        call started are noticed. Returns at once for a stream that does not exist.
        """

    @abc.abstractmethod
    async def put_session(self, info: SessionInfo, ttl_s: float) -> None: ...

    @abc.abstractmethod
    async def get_session(self, session_id: str) -> SessionInfo | None: ...

    @abc.abstractmethod
    async def delete_session(self, session_id: str) -> list[str]:
        """Forget the session; return the ids of the streams that belonged to it."""

    @abc.abstractmethod
    async def set_key(self, key: str, value: str, ttl_s: float) -> None: ...

    @abc.abstractmethod
    async def get_key(self, key: str) -> str | None: ...

    @abc.abstractmethod
    async def delete_key(self, key: str, value: str | None = None) -> bool:
        """Delete the key; with `value`, only if it still holds that value (atomically).
        True if a key was deleted."""

    # -- between nodes ------------------------------------------------------------------
    @abc.abstractmethod
    async def publish(self, channel: str, message: bytes) -> int:
        """Send a small message to the current subscribers of `channel` (fire and forget:
        no persistence, at most once). Returns how many subscribers received it (for Redis:
        subscribed connections, across all nodes)."""

    @abc.abstractmethod
    def subscribe(self, channel: str) -> AbstractAsyncContextManager[AsyncIterator[bytes]]:
        """`async with store.subscribe(ch) as messages: async for m in messages: ...`

        The subscription is active once the `async with` body starts: every message
        published after that point is delivered, in order. Leaving the block (or
        cancelling the iteration) unsubscribes. For nodes to reach each other, e.g. the
        stream's `owner` node listening on a channel named after itself.
        """

    @abc.abstractmethod
    async def usage(self) -> StoreUsage:
        """How many streams and event bytes the store holds (the whole store, all nodes)."""

    @abc.abstractmethod
    async def add_key(self, key: str, value: str, ttl_s: float) -> str | None:
        """Set `key` only if it is absent (atomically); return the value already there, if any."""

    @abc.abstractmethod
    async def replace_key(self, key: str, expected: str | None, value: str, ttl_s: float) -> bool:
        """Compare-and-set: set `key` to `value` (TTL `ttl_s`) only if it holds `expected`
        now (`expected=None`: only if it is absent), atomically across processes. True if set.

        A read-modify-write of a key (`get_key`, compute, write) that several nodes may do
        at once writes with this and, on False, reads again and recomputes, so no writer's
        change is lost to another's (a task's record: `tasks/stored.py`)."""

    # -- bounded, self-expiring indexes --------------------------------------------------
    # Sets of ids that must be counted or listed per owner (a principal's tasks, its REST
    # calls) while each id lives only as long as what it names: every member carries its own
    # expiry, and a set whose members all expired leaves nothing behind.

    @abc.abstractmethod
    async def index_add(self, index: str, member: str, expires_at: float, *, cap: int) -> bool:
        """Add `member` (or move its expiry) to the bounded, self-expiring set `index`.

        Drops the members whose `expires_at` (unix time) passed first; returns False,
        adding nothing, when the set already holds `cap` live members and `member` is not
        one of them. Atomic across processes: concurrent adds never take the set past
        `cap`. An `expires_at` already past leaves `member` out (True). Names and members
        longer than `MAX_INDEX_NAME_BYTES` / `MAX_INDEX_MEMBER_BYTES` are a ValueError.
        """

    @abc.abstractmethod
    async def index_remove(self, index: str, member: str) -> None:
        """Take `member` out of `index` (nothing happens if it is not there)."""

    @abc.abstractmethod
    async def index_page(
        self, index: str, *, after: tuple[float, str] | None = None, limit: int = 100
    ) -> list[tuple[str, float]]:
        """Live members as `(member, expires_at)`, ordered by `(expires_at, member)`.

        Only those after `after` (the `(expires_at, member)` of the last one a previous
        page returned, whether or not it is still there), at most `limit` (capped at
        `MAX_INDEX_PAGE`). Members are ordered as their UTF-8 bytes are.
        """

    @abc.abstractmethod
    async def index_count(self, index: str) -> int:
        """How many live members `index` holds."""

    async def flush(self) -> None:  # noqa: B027 - optional hook
        """Return once what the store was given is written where it keeps it (a store whose writes
        return before that: `SQLiteStore`). The middleware calls it at shutdown, its drain over,
        before the server exits; the other stores have nothing to wait for."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the memory store has none."""
