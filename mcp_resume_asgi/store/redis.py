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
two streams at once: the events stream (after `after_seq`) and the notification
stream (after the version the caller saw). Every change bumps `version` and adds
entry `<version>-0` to the notification stream, so nothing that happens between
a caller's read and its wait is missed when it passes `version=`. A blocked wait
holds a connection of a separate pool (`max_waiters`); cancelling it (anyio
cancel scopes on asyncio) closes that connection, which the pool reopens on next
use.

A `RedisStore` belongs to one asyncio event loop (its connections do): create it
in, or first use it from, the loop that serves the app. asyncio only: the redis
client does not run on trio.

Use a Redis whose `maxmemory-policy` is `noeviction` (or no `maxmemory`): Redis
evicting these keys on its own would break the byte accounting. Redis Cluster is
not supported (scripts touch one stream's keys and the shared `g:` keys).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any, cast

import anyio
import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from mcp_resume_asgi.store import redis_scripts as lua
from mcp_resume_asgi.store.base import (
    GapError,
    SessionInfo,
    Store,
    StoreFullError,
    StoreUsage,
    StreamKind,
    StreamMeta,
    StreamState,
)
from mcp_resume_asgi.store.redis_connections import delete_prefixed, open_clients
from mcp_resume_asgi.store.redis_connections import on_asyncio as _on_asyncio
from mcp_resume_asgi.store.redis_index import RedisIndexes
from mcp_resume_asgi.store.redis_keys import RedisKeys

__all__ = ["RedisStore"]

_FIELDS = tuple(f.name for f in dataclasses.fields(StreamMeta))
_FIELD_SET = frozenset(_FIELDS)
#: Extra time a wait may take over `within_s` (waiting for a connection) before it is cut.
_WAIT_GRACE_S = 1.0


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _ms(seconds: float) -> int:
    return max(1, math.ceil(seconds * 1000))


class RedisStore(RedisIndexes, RedisKeys, Store):
    """`Store` on Redis, shared by every process that uses the same Redis and prefix.

    Give either `url` (the store owns its connection pools and closes them in
    `aclose`) or `client` (a `redis.asyncio.Redis` with `decode_responses=False`;
    the caller closes it). `wait_client` is used for blocking calls (`wait`'s
    `XREAD BLOCK`, `subscribe`); it defaults to a pool of `max_waiters`
    connections of its own with `url`, else to `client`.

    Bounds as in `MemoryStore`, but for the whole store across all processes:
    `max_bytes` of event payloads, `max_streams`, `max_sessions`, `max_keys`.
    """

    shared = True
    write_behind = True

    def is_unavailable_error(self, exc: BaseException) -> bool:
        return isinstance(exc, RedisConnectionError | RedisTimeoutError | OSError)

    def __init__(
        self,
        url: str | None = None,
        *,
        client: aioredis.Redis | None = None,
        wait_client: aioredis.Redis | None = None,
        prefix: str = "mcp-resume:",
        max_bytes: int = 256 * 1024 * 1024,
        max_streams: int = 100_000,
        max_sessions: int = 100_000,
        max_keys: int = 100_000,
        max_connections: int = 64,
        max_waiters: int = 1000,
        full_scan: int = 1000,
    ) -> None:
        if (url is None) == (client is None):
            raise ValueError("RedisStore needs exactly one of url= or client=")
        if not prefix:
            raise ValueError("prefix must not be empty")
        if min(max_bytes, max_streams, max_sessions, max_keys, max_connections, max_waiters, full_scan) <= 0:
            raise ValueError("RedisStore bounds must be positive")
        self.prefix = prefix
        self.max_bytes = max_bytes
        self.max_streams = max_streams
        self.max_sessions = max_sessions
        self.max_keys = max_keys
        self.full_scan = full_scan
        client, wait_client, self._owned = open_clients(
            url, client, wait_client, max_connections, max_waiters
        )
        self._client = client
        self._waiter = wait_client if wait_client is not None else client
        self._create = client.register_script(lua.PRELUDE + lua.CREATE)
        self._update = client.register_script(lua.PRELUDE + lua.UPDATE)
        self._attach = client.register_script(lua.PRELUDE + lua.ATTACH)
        self._delete = client.register_script(lua.PRELUDE + lua.DELETE)
        self._append = client.register_script(lua.PRELUDE + lua.APPEND)
        self._append_final = client.register_script(lua.PRELUDE + lua.APPEND_FINAL)
        self._open_with = client.register_script(lua.PRELUDE + lua.OPEN_WITH)
        self._read = client.register_script(lua.PRELUDE + lua.READ)
        self._read_meta = client.register_script(lua.PRELUDE + lua.READ_META)
        self._usage = client.register_script(lua.PRELUDE + lua.USAGE)
        self._put = client.register_script(lua.PRELUDE + lua.PUT)
        self._delete_key = client.register_script(lua.PRELUDE + lua.DELETE_KEY)
        self._delete_session = client.register_script(lua.PRELUDE + lua.DELETE_SESSION)
        self._init_indexes(client)
        self._init_keys(client)

    # -- helpers ---------------------------------------------------------------------
    def _m(self, stream_id: str) -> str:
        return f"{self.prefix}s:{stream_id}:m"

    def _e(self, stream_id: str) -> str:
        return f"{self.prefix}s:{stream_id}:e"

    def _n(self, stream_id: str) -> str:
        return f"{self.prefix}s:{stream_id}:n"

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
    def _encode_meta(meta: StreamMeta) -> list[str]:
        fields: list[str] = []
        for name in _FIELDS:
            if name != "version":
                fields += [name, _dumps(getattr(meta, name))]
        return fields

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

    async def _write(self, script: Any, args: list[Any]) -> Any:
        """Run a script that creates or appends: its refusals as the `Store` contract names them."""
        try:
            return await script(args=args)
        except ResponseError as exc:
            if "STOREFULL" in str(exc):
                raise StoreFullError(f"{self.max_streams} streams are running") from None
            if str(exc).startswith("SEQ"):
                raise ValueError(str(exc)) from None
            raise

    # -- streams -----------------------------------------------------------------------
    async def create_stream(self, meta: StreamMeta, ttl_s: float) -> None:
        _on_asyncio()
        fields = self._encode_meta(meta)
        await self._write(
            self._create,
            [
                self.prefix,
                meta.stream_id,
                _ms(ttl_s),
                self.max_streams,
                meta.session_id or "",
                self.full_scan,
                *fields,
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
    ) -> None:
        _on_asyncio()
        fields = self._encode_meta(meta)
        await self._write(
            self._open_with,
            [
                self.prefix,
                meta.stream_id,
                _ms(ttl_s),
                self.max_streams,
                meta.session_id or "",
                self.full_scan,
                max_events,
                max_bytes,
                self.max_bytes,
                "" if final_seq is None else _dumps(final_seq),
                "" if retain_s is None else _ms(retain_s),
                len(fields),
                *fields,
                *self._encode_events(events),
            ],
        )

    async def append_final(
        self,
        stream_id: str,
        events: Sequence[tuple[int, bytes]],
        *,
        max_events: int,
        max_bytes: int,
        final_seq: int,
        retain_s: float | None = None,
    ) -> bool:
        reply = await self._write(
            self._append_final,
            [
                self.prefix,
                stream_id,
                max_events,
                max_bytes,
                self.max_bytes,
                _dumps(final_seq),
                "" if retain_s is None else _ms(retain_s),
                *self._encode_events(events),
            ],
        )
        return bool(reply)

    async def get_stream(self, stream_id: str) -> StreamMeta | None:
        _on_asyncio()
        raw = await self._client.hgetall(self._m(stream_id))
        return self._decode_meta(raw) if raw else None

    async def update_stream(
        self, stream_id: str, ttl_s: float | None = None, *, returning: bool = False, **changes: Any
    ) -> StreamMeta | None:
        reply = await self._update(
            args=[
                self.prefix,
                stream_id,
                "" if ttl_s is None else _ms(ttl_s),
                "1" if returning else "0",
                0,
                *self._encode_changes(changes),
            ]
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
        reply = await self._update(
            args=[
                self.prefix,
                stream_id,
                "" if ttl_s is None else _ms(ttl_s),
                "1",
                len(expect),
                *[x for name, value in expect.items() for x in (name, _dumps(value))],
                *self._encode_changes(changes),
            ]
        )
        if reply[0] == 0:
            return False, None
        return reply[0] == 1, self._decode_meta(reply[1])

    async def attach(self, stream_id: str, now: float) -> StreamMeta | None:
        _on_asyncio()
        reply = await self._attach(args=[self.prefix, stream_id, _dumps(float(now))])
        return self._decode_meta(reply[1]) if reply[0] == 1 else None

    async def delete_stream(self, stream_id: str) -> None:
        await self._delete(args=[self.prefix, stream_id])

    async def append(
        self, stream_id: str, events: Sequence[tuple[int, bytes]], *, max_events: int, max_bytes: int
    ) -> None:
        if not events:
            return
        args: list[Any] = [self.prefix, stream_id, max_events, max_bytes, self.max_bytes]
        await self._write(self._append, args + self._encode_events(events))

    async def read(self, stream_id: str, after_seq: int, limit: int = 1000) -> list[tuple[int, bytes]]:
        reply = await self._read(args=[self.prefix, stream_id, int(after_seq), max(int(limit), 1)])
        if reply[0] == 0:
            return []
        if reply[0] == -1:
            raise GapError(stream_id, after_seq, int(reply[1]))
        return [(int(entry_id.split(b"-", 1)[0]), fields[1]) for entry_id, fields in reply[1]]

    async def read_with_meta(
        self, stream_id: str, after_seq: int, limit: int = 1000
    ) -> tuple[list[tuple[int, bytes]], StreamMeta | None]:
        reply = await self._read_meta(args=[self.prefix, stream_id, int(after_seq), max(int(limit), 1)])
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
            last_seq, current = await self._client.hmget(self._m(stream_id), ["last_seq", "version"])
            if last_seq is None or current is None or int(last_seq) > after_seq:
                return
            seen = int(current)
            if version is not None and version != seen:
                return
            if within_s <= 0:
                return
            streams: dict[Any, Any] = {
                self._e(stream_id): f"{max(after_seq, 0)}-0",
                self._n(stream_id): f"{seen}-0",
            }
            with contextlib.suppress(RedisTimeoutError):
                await self._waiter.xread(streams, count=1, block=_ms(within_s))

    # -- sessions and keys -------------------------------------------------------------
    async def put_session(self, info: SessionInfo, ttl_s: float) -> None:
        _on_asyncio()
        value = _dumps(dataclasses.asdict(info))
        await self._put(
            args=[self.prefix, "sess", info.session_id, value, _ms(ttl_s), self.max_sessions, "0"]
        )

    async def get_session(self, session_id: str) -> SessionInfo | None:
        _on_asyncio()
        raw = await self._client.get(f"{self.prefix}sess:{session_id}")
        return None if raw is None else SessionInfo(**json.loads(raw))

    async def delete_session(self, session_id: str) -> list[str]:
        reply = await self._delete_session(args=[self.prefix, session_id])
        return sorted(x.decode() for x in reply)

    async def set_key(self, key: str, value: str, ttl_s: float) -> None:
        _on_asyncio()
        await self._put(args=[self.prefix, "k", key, value, _ms(ttl_s), self.max_keys, "0"])

    async def add_key(self, key: str, value: str, ttl_s: float) -> str | None:
        _on_asyncio()
        existing = await self._put(args=[self.prefix, "k", key, value, _ms(ttl_s), self.max_keys, "1"])
        return None if existing is None else cast(bytes, existing).decode()

    async def get_key(self, key: str) -> str | None:
        _on_asyncio()
        raw = await self._client.get(f"{self.prefix}k:{key}")
        return None if raw is None else cast(bytes, raw).decode()

    async def delete_key(self, key: str, value: str | None = None) -> bool:
        deleted = await self._delete_key(args=[self.prefix, key, value or "", "0" if value is None else "1"])
        return bool(deleted)

    # -- between nodes -----------------------------------------------------------------
    async def publish(self, channel: str, message: bytes) -> int:
        _on_asyncio()
        return int(await self._client.publish(f"{self.prefix}ch:{channel}", message))

    @contextlib.asynccontextmanager
    async def subscribe(self, channel: str) -> AsyncIterator[AsyncIterator[bytes]]:
        _on_asyncio()
        pubsub: PubSub = self._waiter.pubsub()
        name = f"{self.prefix}ch:{channel}".encode()
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

    # -- introspection and lifecycle ----------------------------------------------------
    async def usage(self) -> StoreUsage:
        _on_asyncio()
        streams, nbytes = await self._usage(args=[self.prefix])
        return StoreUsage(streams=int(streams), bytes=int(nbytes))

    async def clear(self) -> None:
        """Delete every key under this store's prefix (tests, resets)."""
        await delete_prefixed(self._client, self.prefix)

    async def aclose(self) -> None:
        for client in self._owned:
            await client.aclose()
        self._owned = []
