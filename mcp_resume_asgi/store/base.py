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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

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


@dataclass(slots=True)
class StreamMeta:
    """Everything about a stream that a node other than its owner may need."""

    stream_id: str
    kind: StreamKind
    session_id: str | None
    principal: str | None
    protocol_version: str
    path: str
    """Path of the app's MCP endpoint, where client answers are delivered."""
    request_id: JSONValue = None
    method: str | None = None
    state: StreamState = StreamState.RUNNING
    last_seq: int = 0
    """Highest seq recorded so far (0: only the priming position exists)."""
    first_seq: int = 1
    """Lowest seq still retained; a resume from before `first_seq - 1` hit a gap."""
    final_seq: int | None = None
    delivered_seq: int = 0
    """Highest seq written to some client connection."""
    pending_inputs: list[JSONValue] = field(default_factory=list)
    """Ids of server-to-client requests on this stream that still wait for an answer."""
    issued_inputs: list[JSONValue] = field(default_factory=list)
    attach_gen: int = 0
    """Bumped by every new client attachment; an older attachment that sees a newer
    generation knows it was replaced and leaves."""
    attached: bool = False
    last_contact: float = 0.0
    turn: int = 0
    owner: str = ""
    """Node that runs the app's side of the stream."""
    route: int = -1
    """Index of the route whose policy governs the stream (-1: the default policy)."""

    @property
    def waiting_for_input(self) -> bool:
        return bool(self.pending_inputs) and self.state is StreamState.RUNNING


@dataclass(slots=True)
class SessionInfo:
    """What the engine learned about an MCP session at `initialize`."""

    session_id: str
    protocol_version: str
    principal: str | None = None


class GapError(Exception):
    """A client asked to resume from before the oldest event still retained."""

    def __init__(self, stream_id: str, after_seq: int, first_seq: int) -> None:
        super().__init__(f"events after {after_seq} were dropped (oldest kept: {first_seq})")
        self.stream_id = stream_id
        self.after_seq = after_seq
        self.first_seq = first_seq


class Store(abc.ABC):
    """Where streams, their events and session facts are kept.

    Every method is safe to call concurrently. Bounds are the store's job:
    `append` evicts the oldest events of a stream beyond its caps (advancing
    `first_seq`) and keeps the store's global byte budget.
    """

    @abc.abstractmethod
    async def create_stream(self, meta: StreamMeta, ttl_s: float) -> None: ...

    @abc.abstractmethod
    async def get_stream(self, stream_id: str) -> StreamMeta | None:
        """A copy of the stream's metadata (callers may not mutate store state through it)."""

    @abc.abstractmethod
    async def update_stream(
        self, stream_id: str, ttl_s: float | None = None, **changes: Any
    ) -> StreamMeta | None:
        """Apply `changes` to the stream's metadata, optionally reset its TTL, wake waiters."""

    @abc.abstractmethod
    async def attach(self, stream_id: str, now: float) -> StreamMeta | None:
        """Atomically make a new client connection the stream's only one: bump
        `attach_gen`, set `attached` and `last_contact`; return the updated metadata."""

    @abc.abstractmethod
    async def delete_stream(self, stream_id: str) -> None: ...

    @abc.abstractmethod
    async def append(
        self, stream_id: str, events: Sequence[tuple[int, bytes]], *, max_events: int, max_bytes: int
    ) -> None:
        """Record events (seqs strictly increasing) and wake readers waiting on the stream."""

    @abc.abstractmethod
    async def read(self, stream_id: str, after_seq: int, limit: int = 1000) -> list[tuple[int, bytes]]:
        """Events with seq > `after_seq`, oldest first, at most `limit`.

        Raises `GapError` when events right after `after_seq` were evicted.
        """

    @abc.abstractmethod
    async def wait(self, stream_id: str, after_seq: int, within_s: float) -> None:
        """Return when the stream has an event after `after_seq`, its metadata changed, or `within_s` seconds passed."""

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
    async def delete_key(self, key: str) -> None: ...

    @abc.abstractmethod
    async def add_key(self, key: str, value: str, ttl_s: float) -> str | None:
        """Set `key` only if it is absent (atomically); return the value already there, if any."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the memory store has none."""
