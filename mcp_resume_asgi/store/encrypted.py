"""A store whose secrets are encrypted before they leave the process (`encryption_key`).

`encrypted(store, cipher)` stands in front of any store and encrypts, with a key the app's
nodes share (`wire/store_cipher.py`), what may carry a secret:

* every event's payload (the app's answers and notifications), bound to its stream and seq;
* every key's value (stored re-run requests with their credentials, task and REST call
  records with their requests and answers, claims), bound to the key's name;
* every message published on a channel (relayed requests with their credentials, relayed
  answers), bound to the channel.

What stays readable is what the store itself must read to do its work: the streams' metadata
(ids, owner node, principal, session id, method, request id, path, counters), session records
(revision, principal, declared capabilities), index members (digests), key and channel names,
and sizes. `docs/security.md` says it for a reader of the store.

What does not open with this node's key (another key, written in the clear, altered, or moved
to another key, stream or seq) is refused, never taken as plaintext: a value reads as absent,
an event as an SSE comment (its seq kept, so a reader's cursor moves on), a message is dropped;
each cause logged at most once a minute (`WARN_EVERY_S`). Deterministic encryption keeps the
store's compare-and-set working: the same value under the same key encrypts to the same bytes.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from cachetools import TTLCache

from mcp_resume_asgi.store.base import KeyAndStream, Listing, SessionInfo, Store, StoreUsage, StreamMeta
from mcp_resume_asgi.wire.store_cipher import StoreCipher

__all__ = ["UNREADABLE_EVENT", "WARN_EVERY_S", "EncryptedStore", "encrypted"]

logger = logging.getLogger(__name__)

#: How often, at most, one cause of refusal is logged as a warning (else at debug level).
WARN_EVERY_S = 60.0
#: What an event that does not open reads as: an SSE comment (clients skip it).
UNREADABLE_EVENT = b": this event does not open with this server's encryption key\n\n"


def encrypted(store: Store, cipher: StoreCipher | None) -> Store:
    """`store`, with what it carries encrypted by `cipher` (None: `store` itself)."""
    return store if cipher is None else EncryptedStore(store, cipher)


def _event_context(stream_id: str, seq: int) -> bytes:
    return b"event\0" + stream_id.encode("utf-8", "surrogatepass") + b"\0" + str(seq).encode()


def _key_context(key: str) -> bytes:
    return b"key\0" + key.encode("utf-8", "surrogatepass")


def _channel_context(channel: str) -> bytes:
    return b"message\0" + channel.encode("utf-8", "surrogatepass")


class EncryptedStore(Store):
    """Encrypts what the store it wraps carries (see the module docstring)."""

    def __init__(self, inner: Store, cipher: StoreCipher) -> None:
        self.inner = inner
        self.cipher = cipher
        self.shared = inner.shared
        self.durable = inner.durable
        self.write_behind = inner.write_behind
        self._refusals: TTLCache[str, bool] = TTLCache(maxsize=16, ttl=WARN_EVERY_S)

    def __getattr__(self, name: str) -> Any:
        # Only for what this class does not have: the wrapped store's own attributes.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _refused(self, what: str) -> None:
        level = logging.DEBUG if what in self._refusals else logging.WARNING
        self._refusals[what] = True
        logger.log(
            level,
            "%s does not open with this server's encryption_key (another key, written in the clear, "
            "altered, or moved): refused",
            what,
        )

    # -- events
    def _seal_events(self, stream_id: str, events: Sequence[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
        encrypt = self.cipher.encrypt
        return [(seq, encrypt(_event_context(stream_id, seq), payload)) for seq, payload in events]

    def _open_events(self, stream_id: str, events: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
        opened: list[tuple[int, bytes]] = []
        for seq, blob in events:
            payload = self.cipher.decrypt(_event_context(stream_id, seq), blob)
            if payload is None:
                self._refused("an event read from the store")
                payload = UNREADABLE_EVENT
            opened.append((seq, payload))
        return opened

    # -- key values
    def _seal_value(self, key: str, value: str) -> str:
        blob = self.cipher.encrypt(_key_context(key), value.encode("utf-8", "surrogatepass"))
        return base64.urlsafe_b64encode(blob).decode("ascii")

    def _open_value(self, key: str, text: str | None) -> str | None:
        if text is None:
            return None
        try:
            blob = base64.urlsafe_b64decode(text.encode("ascii"))
        except (ValueError, binascii.Error, UnicodeEncodeError):
            blob = b""
        value = self.cipher.decrypt(_key_context(key), blob)
        if value is None:
            self._refused("a key's value read from the store")
            return None
        return value.decode("utf-8", "surrogatepass")

    # -- what is encrypted
    async def append(
        self,
        stream_id: str,
        events: Sequence[tuple[int, bytes]],
        *,
        max_events: int,
        max_bytes: int,
        owner: str | None = None,
    ) -> None:
        await self.inner.append(
            stream_id,
            self._seal_events(stream_id, events),
            max_events=max_events,
            max_bytes=max_bytes,
            owner=owner,
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
        return await self.inner.open_with(
            meta,
            ttl_s,
            self._seal_events(meta.stream_id, events),
            max_events=max_events,
            max_bytes=max_bytes,
            final_seq=final_seq,
            retain_s=retain_s,
            listing=listing,
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
        owner: str | None = None,
        unlist: str | None = None,
    ) -> bool:
        return await self.inner.append_final(
            stream_id,
            self._seal_events(stream_id, events),
            max_events=max_events,
            max_bytes=max_bytes,
            final_seq=final_seq,
            retain_s=retain_s,
            owner=owner,
            unlist=unlist,
        )

    async def read(self, stream_id: str, after_seq: int, limit: int = 1000) -> list[tuple[int, bytes]]:
        return self._open_events(stream_id, await self.inner.read(stream_id, after_seq, limit))

    async def read_with_meta(
        self, stream_id: str, after_seq: int, limit: int = 1000
    ) -> tuple[list[tuple[int, bytes]], StreamMeta | None]:
        events, meta = await self.inner.read_with_meta(stream_id, after_seq, limit)
        return self._open_events(stream_id, events), meta

    async def read_key_and_stream(self, key: str, stream_id: str) -> KeyAndStream:
        read = await self.inner.read_key_and_stream(key, stream_id)
        final = read.final
        if final is not None and read.meta is not None and read.meta.final_seq is not None:
            final = self._open_events(stream_id, [(read.meta.final_seq, final)])[0][1]
        return KeyAndStream(self._open_value(key, read.value), read.meta, final)

    async def set_key(self, key: str, value: str, ttl_s: float) -> None:
        await self.inner.set_key(key, self._seal_value(key, value), ttl_s)

    async def get_key(self, key: str) -> str | None:
        return self._open_value(key, await self.inner.get_key(key))

    async def delete_key(self, key: str, value: str | None = None) -> bool:
        return await self.inner.delete_key(key, None if value is None else self._seal_value(key, value))

    async def add_key(self, key: str, value: str, ttl_s: float) -> str | None:
        existing = await self.inner.add_key(key, self._seal_value(key, value), ttl_s)
        if existing is None:
            return None
        opened = self._open_value(key, existing)
        return existing if opened is None else opened  # (unreadable: held all the same, by another)

    async def replace_key(self, key: str, expected: str | None, value: str, ttl_s: float) -> bool:
        sealed_expected = None if expected is None else self._seal_value(key, expected)
        return await self.inner.replace_key(key, sealed_expected, self._seal_value(key, value), ttl_s)

    async def publish(self, channel: str, message: bytes) -> int:
        return await self.inner.publish(channel, self.cipher.encrypt(_channel_context(channel), message))

    def subscribe(self, channel: str) -> AbstractAsyncContextManager[AsyncIterator[bytes]]:
        return self._subscribed(channel)

    @contextlib.asynccontextmanager
    async def _subscribed(self, channel: str) -> AsyncIterator[AsyncIterator[bytes]]:
        async with self.inner.subscribe(channel) as messages:
            yield self._opened_messages(channel, messages)

    async def _opened_messages(self, channel: str, messages: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        context = _channel_context(channel)
        async for blob in messages:
            message = self.cipher.decrypt(context, blob)
            if message is None:
                self._refused(f"a message on channel {channel!r}")
                continue
            yield message

    # -- passed through as they are
    def own_secret(self) -> bytes | None:
        return self.inner.own_secret()

    async def flush(self) -> None:
        await self.inner.flush()

    def is_unavailable_error(self, exc: BaseException) -> bool:
        return self.inner.is_unavailable_error(exc)

    async def create_stream(self, meta: StreamMeta, ttl_s: float) -> None:
        await self.inner.create_stream(meta, ttl_s)

    async def get_stream(self, stream_id: str) -> StreamMeta | None:
        return await self.inner.get_stream(stream_id)

    async def update_stream(
        self, stream_id: str, ttl_s: float | None = None, *, returning: bool = False, **changes: Any
    ) -> StreamMeta | None:
        return await self.inner.update_stream(stream_id, ttl_s, returning=returning, **changes)

    async def update_stream_if(
        self, stream_id: str, expect: Mapping[str, Any], ttl_s: float | None = None, **changes: Any
    ) -> tuple[bool, StreamMeta | None]:
        return await self.inner.update_stream_if(stream_id, expect, ttl_s, **changes)

    def detached(
        self, stream_id: str, gen: int, *, last_contact: float, delivered_seq: int
    ) -> Awaitable[Any]:
        return self.inner.detached(stream_id, gen, last_contact=last_contact, delivered_seq=delivered_seq)

    async def attach(self, stream_id: str, now: float) -> StreamMeta | None:
        return await self.inner.attach(stream_id, now)

    async def delete_stream(self, stream_id: str) -> None:
        await self.inner.delete_stream(stream_id)

    async def wait(
        self, stream_id: str, after_seq: int, within_s: float, *, version: int | None = None
    ) -> None:
        await self.inner.wait(stream_id, after_seq, within_s, version=version)

    async def put_session(self, info: SessionInfo, ttl_s: float) -> None:
        await self.inner.put_session(info, ttl_s)

    async def get_session(self, session_id: str) -> SessionInfo | None:
        return await self.inner.get_session(session_id)

    async def delete_session(self, session_id: str) -> list[str]:
        return await self.inner.delete_session(session_id)

    async def usage(self) -> StoreUsage:
        return await self.inner.usage()

    async def index_add(self, index: str, member: str, expires_at: float, *, cap: int) -> bool:
        return await self.inner.index_add(index, member, expires_at, cap=cap)

    async def index_remove(self, index: str, member: str) -> None:
        await self.inner.index_remove(index, member)

    async def index_page(
        self, index: str, *, after: tuple[float, str] | None = None, limit: int = 100
    ) -> list[tuple[str, float]]:
        return await self.inner.index_page(index, after=after, limit=limit)

    async def index_count(self, index: str) -> int:
        return await self.inner.index_count(index)

    async def aclose(self) -> None:
        await self.inner.aclose()
