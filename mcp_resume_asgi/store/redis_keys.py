"""`RedisStore`'s compare-and-set on keys (`Store.replace_key`), and a key read with a stream
(`Store.read_key_and_stream`).

A key (`P k:<key>`, laid out as `redis_scripts.py` describes) is compared and
written by one Lua script, so no other process can write it in between: the
write-side of a read-modify-write that several nodes may do at once (a task's
record). Like `PUT` (`set_key`), a write keeps the store's bound on keys
(`max_keys`, the `P g:keys` index).

`read_key_and_stream` is one script too: the key, the stream's metadata hash and
its final event (`XRANGE` of the one entry `<final_seq>-0`), one round trip where
`get_key`, `get_stream` and `read` take three - what every `tasks/get` of a
finished task needs. On a Redis Cluster that takes the key and the stream in one
partition: a task's record is (`keys.placed_by`); for any other pair the three reads
are made one after the other. The scripts live here, with the only code that runs them, to
keep `redis.py` to the stream operations.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, cast

from mcp_resume_asgi.store import redis_scripts as lua
from mcp_resume_asgi.store.base import KeyAndStream, StreamMeta
from mcp_resume_asgi.store.redis_connections import AnyRedis, register_script
from mcp_resume_asgi.store.redis_layout import RedisLayout

__all__ = ["RedisKeys"]

# ARGV: P, key, has_expected ('1' | '0'), expected, value, ttl_ms, max_keys, nonce. Returns 1 (set) / 0.
# Like `PUT`'s only-if-absent, it notes the call's nonce beside the key (`P kn:<key>`): the same
# call sent again after its reply was lost finds the key holding its value under its nonce,
# and answers 1 again instead of 0 (which would have its caller apply its change twice).
_REPLACE = r"""
local id, value, ttl, max = ARGV[2], ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
local keyprefix = P .. 'k:'
local noncekey = P .. 'kn:' .. id
local cur = redis.call('GET', keyprefix .. id)
if (ARGV[3] == '1' and cur ~= ARGV[4]) or (ARGV[3] ~= '1' and cur) then
  if cur == value and redis.call('GET', noncekey) == ARGV[8] then return 1 end
  return 0
end
redis.call('SET', keyprefix .. id, value, 'PX', ttl)
redis.call('SET', noncekey, ARGV[8], 'PX', ttl)
local now = now_ms()
bound(P .. 'g:keys', keyprefix, id, now + ttl, now, max)
return 1
"""

# ARGV: P, key, stream. Returns {value | nil, the metadata hash (flat; empty: no stream), final | nil}.
_READ_KEY_AND_STREAM = r"""
local s = ARGV[3]
local value = redis.call('GET', P .. 'k:' .. ARGV[2])
local meta = redis.call('HGETALL', mkey(s))
local final = false
local seq = tonumber(redis.call('HGET', mkey(s), 'final_seq') or '')  -- JSON: a number or null
if seq then
  local id = string.format('%d-0', seq)
  local entry = redis.call('XRANGE', ekey(s), id, id)[1]  -- nil once evicted
  if entry then final = entry[2][2] end
end
return {value, meta, final}
"""


class RedisKeys:
    """The compare-and-set of `RedisStore` (a mixin: it calls `_init_keys`)."""

    prefix: str
    max_keys: int
    _decode_meta: Callable[[Any], StreamMeta]
    _ready: Callable[[], Awaitable[RedisLayout]]
    _client: AnyRedis

    def _init_keys(self, client: AnyRedis) -> None:
        self._replace_key = register_script(client, lua.PRELUDE + _REPLACE)
        self._read_key_and_stream = register_script(client, lua.PRELUDE + _READ_KEY_AND_STREAM)

    async def replace_key(self, key: str, expected: str | None, value: str, ttl_s: float) -> bool:
        ttl_ms = max(1, math.ceil(ttl_s * 1000))
        has_expected = "0" if expected is None else "1"
        layout = await self._ready()
        part = layout.of_key(key)
        bound = layout.share(self.max_keys)
        nonce = secrets.token_hex(8)
        args: list[str | int] = [part, key, has_expected, expected or "", value, ttl_ms, bound, nonce]
        keys = [f"{part}k:{key}", f"{part}g:keys", f"{part}kn:{key}"]
        return bool(await self._replace_key(keys=keys, args=args))

    async def read_key_and_stream(self, key: str, stream_id: str) -> KeyAndStream:
        layout = await self._ready()
        part = layout.of_stream(stream_id)
        if layout.of_key(key) != part:  # not one slot: one read after the other
            raw = await self._client.get(f"{layout.of_key(key)}k:{key}")
            _, meta, final = await self._read_key_and_stream(
                keys=[f"{part}s:{stream_id}:m", f"{part}s:{stream_id}:e"], args=[part, "", stream_id]
            )
            return KeyAndStream(
                None if raw is None else cast(bytes, raw).decode(),
                self._decode_meta(meta) if meta else None,
                None if final is None else bytes(final),
            )
        keys = [f"{part}k:{key}", f"{part}s:{stream_id}:m", f"{part}s:{stream_id}:e"]
        value, meta, final = await self._read_key_and_stream(keys=keys, args=[part, key, stream_id])
        return KeyAndStream(
            None if value is None else bytes(value).decode(),
            self._decode_meta(meta) if meta else None,
            None if final is None else bytes(final),
        )
