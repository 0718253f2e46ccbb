"""A store shared by many processes: Redis (`pip install mcp-resume-asgi[redis]`).

The keys, all under one prefix, are laid out as `redis_scripts.py` describes.

Every write is one Lua script, so each is atomic across processes and costs one
round trip: an `append` of a batch of any size is one `EVALSHA` (it adds the
events, trims by the stream's caps, keeps the global byte budget, bumps the
version and wakes waiters), and so is a stream created with its first events and its
answer (`open_with`) or an answer appended with the stream completed (`append_final`).
Reads are one round trip each (`read` is a script
that checks for a gap and runs `XRANGE`; `get_stream` is `HGETALL`). The stream's
three keys share its TTL; when Redis expires a stream by TTL the global counters
still count its bytes until a sweep (run by `create_stream`, `usage` and the
budget itself) notices and forgets them. Its connection pools are set up by
`redis_connections.py`.

`wait` reads `last_seq` and `version` (`HMGET`), then blocks in `XREAD BLOCK` on
two streams at once: the events stream (after the last event stored) and the
notification stream (after the version the caller saw). Every change bumps `version`;
one that adds no event also adds entry `<version>-0` to the notification stream (one
that adds events wakes the wait through them), so nothing that happens between a
caller's read and its wait is missed when it passes `version=`. A blocked wait
holds a connection of a separate pool (`max_waiters`); cancelling it (anyio
cancel scopes on asyncio) closes that connection, which the pool reopens on next
use.

A `RedisStore` belongs to one asyncio event loop (its connections do): create it
in, or first use it from, the loop that serves the app. asyncio only: the redis
client does not run on trio.

Use a Redis whose `maxmemory-policy` is `noeviction` (or no `maxmemory`): Redis
evicting these keys on its own would break the byte accounting.

Redis Cluster: `RedisStore(url)` finds out on first use whether `url` names a node of a
cluster (`INFO cluster`: `cluster_enabled:1`) and then talks to the whole cluster through
redis-py's `RedisCluster`; `RedisStore(client=RedisCluster(...))` does so at once. There
the store is split into partitions, each under a hash tag of its own, so every script
touches one slot and the global bounds are kept per partition (`redis_layout.py` says how,
and what that costs); `publish` and `subscribe` use sharded pub/sub (`SPUBLISH`,
`SSUBSCRIBE`: Redis >= 7). On one instance nothing of that changes a key's name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import secrets
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import anyio
import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ClusterDownError, RedisClusterException, RedisError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from mcp_resume_asgi.store import redis_scripts as lua
from mcp_resume_asgi.store.base import (
    FencedError,
    GapError,
    Listing,
    SessionInfo,
    Store,
    StoreFullError,
    StoreUsage,
    StreamKind,
    StreamMeta,
    StreamState,
)
from mcp_resume_asgi.store.bounds import check_bounds
from mcp_resume_asgi.store.index_bounds import check_index_args
from mcp_resume_asgi.store.redis_connections import (
    AnyRedis,
    Script,
    delete_prefixed,
    is_cluster_node,
    open_clients,
    open_cluster_clients,
    register_script,
)
from mcp_resume_asgi.store.redis_connections import on_asyncio as _on_asyncio
from mcp_resume_asgi.store.redis_index import INDEX_FN, STREAM_INDEXES, RedisIndexes
from mcp_resume_asgi.store.redis_keys import RedisKeys
from mcp_resume_asgi.store.redis_layout import DEFAULT_PARTITIONS, RedisLayout

if TYPE_CHECKING:  # redis-py >= 8 (async cluster pub/sub); the store runs on one instance with older ones
    from redis.asyncio.cluster import ClusterPubSub

logger = logging.getLogger(__name__)

__all__ = ["RedisStore"]

_FIELDS = tuple(f.name for f in dataclasses.fields(StreamMeta))
_FIELD_SET = frozenset(_FIELDS)
#: What `_encode_meta` writes: every field but `version`, which the store keeps.
_WRITTEN_FIELDS = tuple(name for name in _FIELDS if name != "version")
#: How long one read of a sharded subscription blocks (then it reads again: no message lost).
_LISTEN_S = 3600.0
#: Extra time a wait may take over `within_s` (waiting for a connection) before it is cut.
_WAIT_GRACE_S = 1.0


#: `json.dumps(value, separators=...)` makes an encoder per call; a store encodes a dozen values a
#: request (a stream's record), so one is made once.
_dumps = json.JSONEncoder(separators=(",", ":")).encode


def _json_text(value: Any) -> str:
    """`value` as JSON text: a record's null, booleans and whole numbers (half its fields) written
    directly, the rest by the encoder (a call each, which costs more than the value)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is int:
        return str(value)
    return _dumps(value)


def _owner_named(text: str) -> str | None:
    """The owner a FENCED reply names (the record's field, JSON; None when it has none)."""
    try:
        owner = json.loads(text)
    except ValueError:
        return text[:100]
    return owner if isinstance(owner, str) else None


def _ms(seconds: float) -> int:
    return max(1, math.ceil(seconds * 1000))


class RedisStore(RedisIndexes, RedisKeys, Store):
    """`Store` on Redis, shared by every process that uses the same Redis and prefix.

    Give either `url` (the store owns its connection pools and closes them in
    `aclose`; a node of a Redis Cluster is found out on first use) or `client` (a
    `redis.asyncio.Redis` or `redis.asyncio.RedisCluster` with `decode_responses=False`;
    the caller closes it). `wait_client` is used for blocking calls (`wait`'s
    `XREAD BLOCK`, `subscribe`); it defaults to a pool of `max_waiters`
    connections of its own with `url`, else to `client`.

    Bounds as in `MemoryStore`, but for the whole store across all processes:
    `max_bytes` of event payloads, `max_streams`, `max_sessions`, `max_keys`. On a
    cluster the store has `partitions` (default 16), each keeping its share of every
    bound (`redis_layout.py`); `partitions` is ignored on one instance.
    """

    shared = True
    write_behind = True

    def is_unavailable_error(self, exc: BaseException) -> bool:
        """Down, slow, or refusing writes it could lose: a primary with `min-replicas-to-write`
        and too few replicas in reach answers `NOREPLICAS` - an outage, until they are back."""
        if isinstance(exc, ResponseError) and str(exc).startswith("NOREPLICAS"):
            return True
        if isinstance(exc, AttributeError) and "writelines" in str(exc):
            # redis-py 8.1's asyncio cluster client re-initialising after a failover, under
            # concurrent commands, can hand one a connection a concurrent disconnect has just
            # torn down ('NoneType' object has no attribute 'writelines'): the failover's
            # outage, not a bug of ours to answer with a 500.
            return True
        return isinstance(
            exc, RedisConnectionError | RedisTimeoutError | OSError | ClusterDownError | RedisClusterException
        )

    def __init__(
        self,
        url: str | None = None,
        *,
        client: AnyRedis | None = None,
        wait_client: AnyRedis | None = None,
        prefix: str = "mcp-resume:",
        max_bytes: int = 256 * 1024 * 1024,
        max_streams: int = 100_000,
        max_sessions: int = 100_000,
        max_keys: int = 100_000,
        max_connections: int = 64,
        max_waiters: int = 1000,
        full_scan: int = 1000,
        partitions: int = DEFAULT_PARTITIONS,
    ) -> None:
        if (url is None) == (client is None):
            raise ValueError("RedisStore needs exactly one of url= or client=")
        if not prefix:
            raise ValueError("prefix must not be empty")
        check_bounds(
            "RedisStore",
            max_bytes=max_bytes,
            max_streams=max_streams,
            max_sessions=max_sessions,
            max_keys=max_keys,
            max_connections=max_connections,
            max_waiters=max_waiters,
            full_scan=full_scan,
            partitions=partitions,
        )
        self.prefix = prefix
        self.max_bytes = max_bytes
        self.max_streams = max_streams
        self.max_sessions = max_sessions
        self.max_keys = max_keys
        self.full_scan = full_scan
        self.partitions = partitions
        self._url = url
        self._max_connections = max_connections
        self._max_waiters = max_waiters
        client, wait_client, self._owned = open_clients(
            url, client, wait_client, max_connections, max_waiters
        )
        self._client: AnyRedis = client
        self._waiter: AnyRedis = wait_client if wait_client is not None else client
        #: Known once the store knows whether it runs on a cluster (`_ready`).
        self._layout: RedisLayout | None = None
        if url is None:  # the bounds checked now; the clients readied on first use
            self._new_layout(cluster=isinstance(client, RedisCluster))
        self._detecting = anyio.Lock()
        self._register(client)

    def _register(self, client: AnyRedis) -> None:
        self._create = register_script(client, lua.PRELUDE + lua.CREATE)
        self._update = register_script(client, lua.PRELUDE + lua.UPDATE)
        self._attach = register_script(client, lua.PRELUDE + lua.ATTACH)
        self._delete = register_script(client, lua.PRELUDE + lua.DELETE)
        self._append = register_script(client, lua.PRELUDE + lua.APPEND)
        self._append_final = register_script(client, lua.PRELUDE + INDEX_FN + lua.APPEND_FINAL)
        self._open_with = register_script(client, lua.PRELUDE + INDEX_FN + lua.OPEN_WITH)
        self._read = register_script(client, lua.PRELUDE + lua.READ)
        self._read_meta = register_script(client, lua.PRELUDE + lua.READ_META)
        self._usage = register_script(client, lua.PRELUDE + lua.USAGE)
        self._put = register_script(client, lua.PRELUDE + lua.PUT)
        self._delete_key = register_script(client, lua.PRELUDE + lua.DELETE_KEY)
        self._delete_session = register_script(client, lua.PRELUDE + lua.DELETE_SESSION)
        self._init_indexes(client)
        self._init_keys(client)

    async def _ready(self) -> RedisLayout:
        """The layout, once the store knows whether `url` names a cluster node (`INFO`, on the
        first use: a store is built outside any event loop, and Redis may be down then)."""
        if self._layout is not None:
            return self._layout
        async with self._detecting:
            if self._layout is None:
                cluster = await is_cluster_node(self._client)
                if cluster and not hasattr(RedisCluster, "pubsub"):
                    raise RuntimeError("RedisStore on Redis Cluster needs redis-py >= 8 (sharded pub/sub)")
                if cluster and self._url is not None:
                    single = self._owned
                    client, wait_client, self._owned = open_cluster_clients(
                        self._url, self._max_connections, self._max_waiters
                    )
                    self._client, self._waiter = client, wait_client
                    self._register(client)
                    for old in single:
                        await old.aclose()
                if cluster:
                    # Once, before any command: redis-py's cluster client (8.1) first used by
                    # concurrent commands initialises itself under each of them, and may then
                    # send a command twice - a script run twice - or on a closed connection.
                    # One after the other, not in a task group: a failure (a node slow to answer)
                    # is the client's own error, which callers take as an outage, not an
                    # exception group they would not recognise.
                    for each in {id(c): c for c in (self._client, self._waiter)}.values():
                        if isinstance(each, RedisCluster):
                            await each.initialize()
                self._layout = self._new_layout(cluster=cluster)
        return self._layout

    def _new_layout(self, *, cluster: bool) -> RedisLayout:
        layout = RedisLayout(self.prefix, cluster=cluster, partitions=self.partitions)
        layout.check(
            max_bytes=self.max_bytes,
            max_streams=self.max_streams,
            max_sessions=self.max_sessions,
            max_keys=self.max_keys,
        )
        return layout

    # -- helpers ---------------------------------------------------------------------
    @staticmethod
    def _m(part: str, stream_id: str) -> str:
        return f"{part}s:{stream_id}:m"

    @staticmethod
    def _e(part: str, stream_id: str) -> str:
        return f"{part}s:{stream_id}:e"

    @staticmethod
    def _n(part: str, stream_id: str) -> str:
        return f"{part}s:{stream_id}:n"

    async def _stream(self, stream_id: str) -> tuple[str, list[str]]:
        """The stream's partition prefix (a script's ARGV[1]) and the keys its scripts declare."""
        layout = self._layout if self._layout is not None else await self._ready()
        part = layout.of_stream(stream_id)
        return part, layout.stream_keys(part, stream_id)

    @staticmethod
    def _decode_meta(raw: Any) -> StreamMeta:
        """A `StreamMeta` from HGETALL's reply (a dict, or a flat list from a script)."""
        items: Iterable[tuple[Any, Any]] = (
            raw.items() if isinstance(raw, dict) else zip(raw[::2], raw[1::2], strict=True)
        )
        values: dict[str, Any] = {}
        for key, value in items:
            name = key.decode()
            if name in _FIELD_SET:
                values[name] = json.loads(value)
        values["kind"] = StreamKind(values["kind"])
        values["state"] = StreamState(values["state"])
        return StreamMeta(**values)

    @staticmethod
    def _encode_changes(changes: Mapping[str, Any]) -> list[str]:
        out: list[str] = []
        for name, value in changes.items():
            if name not in _FIELD_SET:
                raise AttributeError(f"StreamMeta has no field {name!r}")
            if name == "version":
                raise ValueError("StreamMeta.version is kept by the store")
            out += [name, _dumps(value)]
        return out

    @staticmethod
    def _encode_meta(meta: StreamMeta) -> str:
        """The record's fields as the scripts read them (`redis_scripts.fields_of`): one argument,
        name and JSON value each followed by a NUL but the last (JSON text holds no raw NUL)."""
        parts: list[str] = []
        for name in _WRITTEN_FIELDS:
            parts.append(name)
            parts.append(_json_text(getattr(meta, name)))
        return "\0".join(parts)

    @staticmethod
    def _encode_events(events: Sequence[tuple[int, bytes]]) -> list[Any]:
        args: list[Any] = []
        previous = None
        for seq, payload in events:
            if previous is not None and seq <= previous:
                raise ValueError("event seqs must be strictly increasing")
            previous = seq
            args += [int(seq), payload]
        return args

    async def _write(self, script: Script, keys: list[str], args: list[Any]) -> Any:
        """Run a script that creates or appends: its refusals as the `Store` contract names them."""
        try:
            return await script(keys=keys, args=args)
        except ResponseError as exc:
            if "STOREFULL" in str(exc):
                raise StoreFullError(f"{self.max_streams} streams are running") from None
            if str(exc).startswith("SEQ"):
                raise ValueError(str(exc)) from None
            if str(exc).startswith("FENCED"):
                raise FencedError(args[1], _owner_named(str(exc).removeprefix("FENCED "))) from None
            raise

    # -- streams -----------------------------------------------------------------------
    async def create_stream(self, meta: StreamMeta, ttl_s: float) -> None:
        _on_asyncio()
        fields = self._encode_meta(meta)
        part, keys = await self._stream(meta.stream_id)
        await self._write(
            self._create,
            keys,
            [
                part,
                meta.stream_id,
                _ms(ttl_s),
                self._layout_share(self.max_streams),
                meta.session_id or "",
                self.full_scan,
                fields,
            ],
        )

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
        """One script, which lists the stream too (on a cluster, an index of `STREAM_INDEXES`
        only, kept by partition; another one is a key of its own slot: a second call,
        `index_add`)."""
        _on_asyncio()
        fields = self._encode_meta(meta)
        part, keys = await self._stream(meta.stream_id)
        if final_seq is not None:
            listing = None
        listed: list[Any] = ["", "", ""]
        folded = listing is not None and self._folds(listing.index)
        if folded:
            assert listing is not None and self._layout is not None
            check_index_args(listing.index, meta.stream_id, expires_at=listing.expires_at, cap=listing.cap)
            cap = self._index_cap(self._layout, listing.index, listing.cap)
            listed = [listing.index, repr(float(listing.expires_at)), cap]
        reply = await self._write(
            self._open_with,
            keys,
            [
                part,
                meta.stream_id,
                _ms(ttl_s),
                self._layout_share(self.max_streams),
                meta.session_id or "",
                self.full_scan,
                max_events,
                max_bytes,
                self._layout_share(self.max_bytes),
                "" if final_seq is None else _dumps(final_seq),
                "" if retain_s is None else _ms(retain_s),
                *listed,
                fields,
                *self._encode_events(events),
            ],
        )
        if folded:
            return int(reply) == 1
        return await self._list_by_call(meta.stream_id, listing, final_seq)

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
        """One script, which unlists the stream too (on a cluster as `open_with` lists it)."""
        part, keys = await self._stream(stream_id)
        folded = unlist is not None and self._folds(unlist)
        if unlist is not None and folded:
            check_index_args(unlist, stream_id)
        reply = await self._write(
            self._append_final,
            keys,
            [
                part,
                stream_id,
                max_events,
                max_bytes,
                self._layout_share(self.max_bytes),
                _dumps(final_seq),
                "" if retain_s is None else _ms(retain_s),
                "" if owner is None else _dumps(owner),
                unlist if unlist is not None and folded else "",
                *self._encode_events(events),
            ],
        )
        if unlist is not None and not folded:
            await self.index_remove(unlist, stream_id)
        return bool(reply)

    def _folds(self, index: str) -> bool:
        """Whether a stream's script writes its entry of `index` itself: on one instance any
        index, on a cluster one kept by partition (`STREAM_INDEXES`). (Asked once the layout is
        known: every caller asked for it first.)"""
        assert self._layout is not None
        return not self._layout.cluster or index in STREAM_INDEXES

    def _layout_share(self, bound: int) -> int:
        """A partition's share of a bound of the whole store (`RedisLayout.share`)."""
        assert self._layout is not None
        return self._layout.share(bound)

    async def get_stream(self, stream_id: str) -> StreamMeta | None:
        _on_asyncio()
        layout = await self._ready()
        raw = await self._client.hgetall(self._m(layout.of_stream(stream_id), stream_id))
        return self._decode_meta(raw) if raw else None

    async def update_stream(
        self, stream_id: str, ttl_s: float | None = None, *, returning: bool = False, **changes: Any
    ) -> StreamMeta | None:
        encoded = self._encode_changes(changes)
        part, keys = await self._stream(stream_id)
        reply = await self._update(
            keys=keys,
            args=[
                part,
                stream_id,
                "" if ttl_s is None else _ms(ttl_s),
                "1" if returning else "0",
                0,
                *encoded,
            ],
        )
        return self._decode_meta(reply[1]) if returning and reply[0] == 1 else None

    async def update_stream_if(
        self,
        stream_id: str,
        expect: Mapping[str, Any],
        ttl_s: float | None = None,
        **changes: Any,
    ) -> tuple[bool, StreamMeta | None]:
        for name in expect:
            if name not in _FIELD_SET:
                raise AttributeError(f"StreamMeta has no field {name!r}")
        encoded = self._encode_changes(changes)
        part, keys = await self._stream(stream_id)
        reply = await self._update(
            keys=keys,
            args=[
                part,
                stream_id,
                "" if ttl_s is None else _ms(ttl_s),
                "1",
                len(expect),
                *[x for name, value in expect.items() for x in (name, _dumps(value))],
                *encoded,
            ],
        )
        if reply[0] == 0:
            return False, None
        return reply[0] == 1, self._decode_meta(reply[1])

    async def detached(self, stream_id: str, gen: int, *, last_contact: float, delivered_seq: int) -> None:
        """`update_stream_if` on `attach_gen`, asking for no record back: once per request, and the
        record (`HGETALL`, decoded here) is what costs most of it."""
        part, keys = await self._stream(stream_id)
        await self._update(
            keys=keys,
            args=[
                part,
                stream_id,
                "",
                "0",
                1,
                "attach_gen",
                str(int(gen)),
                "attached",
                "false",
                "last_contact",
                _dumps(float(last_contact)),
                "delivered_seq",
                str(int(delivered_seq)),
            ],
        )

    async def attach(self, stream_id: str, now: float) -> StreamMeta | None:
        _on_asyncio()
        part, keys = await self._stream(stream_id)
        reply = await self._attach(keys=keys, args=[part, stream_id, _dumps(float(now))])
        return self._decode_meta(reply[1]) if reply[0] == 1 else None

    async def delete_stream(self, stream_id: str) -> None:
        part, keys = await self._stream(stream_id)
        await self._delete(keys=keys, args=[part, stream_id])

    async def append(
        self,
        stream_id: str,
        events: Sequence[tuple[int, bytes]],
        *,
        max_events: int,
        max_bytes: int,
        owner: str | None = None,
    ) -> None:
        if not events:
            return
        encoded = self._encode_events(events)
        part, keys = await self._stream(stream_id)
        fence = "" if owner is None else _dumps(owner)
        args: list[Any] = [part, stream_id, max_events, max_bytes, self._layout_share(self.max_bytes), fence]
        await self._write(self._append, keys, args + encoded)

    async def read(self, stream_id: str, after_seq: int, limit: int = 1000) -> list[tuple[int, bytes]]:
        part, keys = await self._stream(stream_id)
        reply = await self._read(keys=keys, args=[part, stream_id, int(after_seq), max(int(limit), 1)])
        if reply[0] == 0:
            return []
        if reply[0] == -1:
            raise GapError(stream_id, after_seq, int(reply[1]))
        return [(int(entry_id.split(b"-", 1)[0]), fields[1]) for entry_id, fields in reply[1]]

    async def read_with_meta(
        self, stream_id: str, after_seq: int, limit: int = 1000
    ) -> tuple[list[tuple[int, bytes]], StreamMeta | None]:
        part, keys = await self._stream(stream_id)
        args: list[Any] = [part, stream_id, int(after_seq), max(int(limit), 1)]
        reply = await self._read_meta(keys=keys, args=args)
        if reply[0] == 0:
            return [], None
        if reply[0] == -1:
            raise GapError(stream_id, after_seq, int(reply[1]))
        events = [(int(entry_id.split(b"-", 1)[0]), fields[1]) for entry_id, fields in reply[1]]
        return events, self._decode_meta(reply[2]) if reply[2] else None

    async def wait(
        self, stream_id: str, after_seq: int, within_s: float, *, version: int | None = None
    ) -> None:
        with anyio.move_on_after(within_s + _WAIT_GRACE_S):
            part = (await self._ready()).of_stream(stream_id)
            last_seq, current = await self._client.hmget(self._m(part, stream_id), ["last_seq", "version"])
            if last_seq is None or current is None or int(last_seq) > after_seq:
                return
            seen = int(current)
            if version is not None and version != seen:
                return
            if within_s <= 0:
                return
            # After the last event stored (not `after_seq`, which may be past it): any event
            # added wakes the wait, as a write that adds events bumps the version without a
            # notification (`redis_scripts.finish`).
            streams: dict[Any, Any] = {
                self._e(part, stream_id): f"{max(int(last_seq), 0)}-0",
                self._n(part, stream_id): f"{seen}-0",
            }
            with contextlib.suppress(RedisTimeoutError):
                await self._waiter.xread(streams, count=1, block=_ms(within_s))

    # -- sessions and keys -------------------------------------------------------------
    async def _put_value(
        self, kind: str, part: str, id_: str, value: str, ttl_s: float, bound: int, nx: str
    ) -> Any:
        """`PUT` of a session (`kind` 'sess') or a key ('k') in partition `part`; `nx` '1'
        with a nonce of its own, so that the script sent again finds its first run hers."""
        index = f"{part}g:sess" if kind == "sess" else f"{part}g:keys"
        nonce = secrets.token_hex(8) if nx == "1" else ""
        args: list[Any] = [part, kind, id_, value, _ms(ttl_s), self._layout_share(bound), nx, nonce]
        return await self._put(keys=[f"{part}{kind}:{id_}", index, f"{part}{kind}n:{id_}"], args=args)

    async def put_session(self, info: SessionInfo, ttl_s: float) -> None:
        _on_asyncio()
        value = _dumps(dataclasses.asdict(info))
        part = (await self._ready()).of_session(info.session_id)
        await self._put_value("sess", part, info.session_id, value, ttl_s, self.max_sessions, "0")

    async def get_session(self, session_id: str) -> SessionInfo | None:
        _on_asyncio()
        part = (await self._ready()).of_session(session_id)
        raw = await self._client.get(f"{part}sess:{session_id}")
        return None if raw is None else SessionInfo(**json.loads(raw))

    async def delete_session(self, session_id: str) -> list[str]:
        """The session's record lives in its own partition, but its streams in theirs, each
        partition listing its streams of the session: every partition is asked (at once)."""
        layout = await self._ready()
        found: list[str] = []

        async def one(part: str) -> None:
            keys = [f"{part}sess:{session_id}", f"{part}g:sess", f"{part}ss:{session_id}"]
            reply = await self._delete_session(keys=keys, args=[part, session_id])
            found.extend(x.decode() for x in reply)

        async with anyio.create_task_group() as tg:
            for part in layout.prefixes:
                tg.start_soon(one, part)
        return sorted(found)

    async def set_key(self, key: str, value: str, ttl_s: float) -> None:
        _on_asyncio()
        part = (await self._ready()).of_key(key)
        await self._put_value("k", part, key, value, ttl_s, self.max_keys, "0")

    async def add_key(self, key: str, value: str, ttl_s: float) -> str | None:
        _on_asyncio()
        part = (await self._ready()).of_key(key)
        existing = await self._put_value("k", part, key, value, ttl_s, self.max_keys, "1")
        return None if existing is None else cast(bytes, existing).decode()

    async def get_key(self, key: str) -> str | None:
        _on_asyncio()
        part = (await self._ready()).of_key(key)
        raw = await self._client.get(f"{part}k:{key}")
        return None if raw is None else cast(bytes, raw).decode()

    async def delete_key(self, key: str, value: str | None = None) -> bool:
        part = (await self._ready()).of_key(key)
        keys = [f"{part}k:{key}", f"{part}g:keys", f"{part}kn:{key}"]
        args = [part, key, value or "", "0" if value is None else "1"]
        return bool(await self._delete_key(keys=keys, args=args))

    # -- between nodes -----------------------------------------------------------------
    async def publish(self, channel: str, message: bytes) -> int:
        """On a cluster a sharded publish (`SPUBLISH`): only the channel's shard carries it."""
        _on_asyncio()
        layout = await self._ready()
        name = f"{self.prefix}ch:{channel}"
        if layout.cluster:
            return int(await self._client.spublish(name, message))
        return int(await self._client.publish(name, message))

    @contextlib.asynccontextmanager
    async def subscribe(self, channel: str) -> AsyncIterator[AsyncIterator[bytes]]:
        _on_asyncio()
        layout = await self._ready()
        name = f"{self.prefix}ch:{channel}".encode()
        if layout.cluster:
            assert isinstance(self._waiter, RedisCluster)
            async with self._subscribe_sharded(self._waiter, name) as inbox:
                yield inbox
            return
        assert isinstance(self._waiter, aioredis.Redis)
        pubsub: PubSub = self._waiter.pubsub()
        try:
            await pubsub.subscribe(name)
            while True:  # the subscription is live once Redis confirmed it
                message = await pubsub.get_message(timeout=None)
                if message is not None and message["type"] == "subscribe":
                    break

            async def messages() -> AsyncIterator[bytes]:
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=None)
                    if message is not None and message["type"] == "message":
                        yield message["data"]

            yield messages()
        finally:
            with anyio.CancelScope(shield=True):
                await pubsub.aclose()  # type: ignore[no-untyped-call]

    @staticmethod
    @contextlib.asynccontextmanager
    async def _subscribe_sharded(cluster: RedisCluster, name: bytes) -> AsyncIterator[AsyncIterator[bytes]]:
        """`SSUBSCRIBE` on the shard that owns the channel's slot (Redis >= 7)."""
        pubsub: ClusterPubSub = cluster.pubsub()
        try:
            try:
                await pubsub.ssubscribe(name)
                while True:  # the subscription is live once Redis confirmed it
                    message = await pubsub.get_sharded_message(timeout=_LISTEN_S)
                    if message is not None and message["type"] in ("ssubscribe", b"ssubscribe"):
                        break
            except (RedisConnectionError, RedisTimeoutError):
                # The shard's primary is gone (a failover): redis-py refreshes its slot map
                # only after a failed command, never after a failed subscribe, so without
                # this every retry would dial the dead primary again, for good.
                with contextlib.suppress(Exception):
                    await cluster.nodes_manager.initialize()
                raise

            async def sharded() -> AsyncIterator[bytes]:
                while True:
                    message = await pubsub.get_sharded_message(
                        ignore_subscribe_messages=True, timeout=_LISTEN_S
                    )
                    if message is not None and message["type"] in ("smessage", b"smessage"):
                        yield message["data"]

            yield sharded()
        finally:
            with anyio.CancelScope(shield=True):
                await pubsub.aclose()

    # -- introspection and lifecycle ----------------------------------------------------
    async def usage(self) -> StoreUsage:
        """The sum over the partitions (one on a single instance), each read at once."""
        _on_asyncio()
        layout = await self._ready()
        totals = [0, 0]

        async def one(part: str) -> None:
            streams, nbytes = await self._usage(keys=[f"{part}g:exp", f"{part}g:total"], args=[part])
            totals[0] += int(streams)
            totals[1] += int(nbytes)

        async with anyio.create_task_group() as tg:
            for part in layout.prefixes:
                tg.start_soon(one, part)
        return StoreUsage(streams=totals[0], bytes=totals[1])

    async def clear(self) -> None:
        """Delete every key under this store's prefix (tests, resets)."""
        await self._ready()
        await delete_prefixed(self._client, self.prefix)

    async def aclose(self) -> None:
        """Close the clients the store opened, and their connections. A connection that cannot be
        closed cleanly (Redis gone, or the event loop it was opened on closed since) is let go of,
        said once in the log: closing never fails."""
        owned, self._owned = self._owned, []
        for client in owned:
            try:
                await client.aclose()
            except (RuntimeError, OSError, RedisError) as exc:
                logger.warning("RedisStore: its connections could not all be closed cleanly: %s", exc)
