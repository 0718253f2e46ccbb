"""A store shared by many processes: Redis (`pip install mcp-resume-asgi[redis]`).

Layout, for a key prefix `P` (all keys of one store live under it, so several
stores can share a Redis database; every node of one deployment uses the same):

* `P s:<stream>:m` - hash, the stream's `StreamMeta`, one field per attribute,
  each value JSON text (so `HINCRBY attach_gen` and `HINCRBY version` work on it).
* `P s:<stream>:e` - Redis Stream of events: entry id `<seq>-0`, one field `d`
  holding the payload. Read with `XRANGE (<after>-0 + COUNT n`.
* `P s:<stream>:n` - Redis Stream of at most one entry, id `<version>-0`: the
  notification that the stream changed (see `wait`).
* `P ss:<session>` - set of the session's stream ids.
* `P sess:<session>`, `P k:<key>` - strings (JSON / the value) with a TTL.
* `P g:total` (payload bytes held), `P g:nb` (hash stream -> bytes), `P g:lru`
  (zset stream -> activity tick), `P g:hold` (the same, only streams holding
  events), `P g:exp` (zset stream -> expiry in ms), `P g:tick`, and `P g:sess`,
  `P g:keys` (zsets id -> expiry, to bound how many there are).
* Pub/sub channel `P ch:<channel>` for `publish` / `subscribe`.

Every write is one Lua script, so each is atomic across processes and costs one
round trip: an `append` of a batch of any size is one `EVALSHA` (it adds the
events, trims by the stream's caps, keeps the global byte budget, bumps the
version and wakes waiters). Reads are one round trip each (`read` is a script
that checks for a gap and runs `XRANGE`; `get_stream` is `HGETALL`). The stream's
three keys share its TTL; when Redis expires a stream by TTL the global counters
still count its bytes until a sweep (run by `create_stream`, `usage` and the
budget itself) notices and forgets them.

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

import asyncio
import contextlib
import dataclasses
import json
import math
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any, cast

import anyio
import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

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

__all__ = ["RedisStore"]

_FIELDS = tuple(f.name for f in dataclasses.fields(StreamMeta))
_FIELD_SET = frozenset(_FIELDS)
#: How long the notification of a deleted stream outlives it (waiters see it and return).
_TOMBSTONE_MS = 10_000
#: Extra time a wait may take over `within_s` (waiting for a connection) before it is cut.
_WAIT_GRACE_S = 1.0


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _on_asyncio() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError(
            "RedisStore runs on asyncio only: the redis client does not support trio"
        ) from None


def _ms(seconds: float) -> int:
    return max(1, math.ceil(seconds * 1000))


# ----------------------------------------------------------------------------- Lua
# Every script gets the key prefix as ARGV[1] and builds key names from it.
_PRELUDE = r"""
local P = ARGV[1]
local function mkey(s) return P .. 's:' .. s .. ':m' end
local function ekey(s) return P .. 's:' .. s .. ':e' end
local function nkey(s) return P .. 's:' .. s .. ':n' end
local function sskey(sess) return P .. 'ss:' .. sess end
local TOTAL, NB, LRU, EXP, TICK = P .. 'g:total', P .. 'g:nb', P .. 'g:lru', P .. 'g:exp', P .. 'g:tick'
local HOLD = P .. 'g:hold'

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function total() return tonumber(redis.call('GET', TOTAL) or '0') end

-- Tell waiters the stream changed: notification entry <v>-0 (its only entry).
local function notify(s, v, ttl)
  local n = nkey(s)
  local id = string.format('%d-0', v)
  local ok = redis.pcall('XADD', n, 'MAXLEN', '1', id, 'v', '1')
  if type(ok) == 'table' and ok.err then  -- a stale notification stream with a higher id
    redis.call('DEL', n)
    redis.call('XADD', n, 'MAXLEN', '1', id, 'v', '1')
  end
  if ttl > 0 then redis.call('PEXPIRE', n, ttl) end
end

local function bump(s)
  local m = mkey(s)
  local v = redis.call('HINCRBY', m, 'version', 1)
  notify(s, v, redis.call('PTTL', m))
  return v
end

local function forget_bytes(s)
  local nb = tonumber(redis.call('HGET', NB, s) or '0')
  if nb ~= 0 then redis.call('DECRBY', TOTAL, nb) end
  redis.call('HDEL', NB, s)
  redis.call('ZREM', HOLD, s)
end

local function session_of(m)
  local raw = redis.call('HGET', m, 'session_id')
  if not raw then return nil end
  local sess = cjson.decode(raw)
  if type(sess) == 'string' then return sess end
  return nil
end

-- Forget a stream entirely and wake its waiters (they find it gone).
local function drop(s)
  local m = mkey(s)
  local v = tonumber(redis.call('HGET', m, 'version') or '0')
  local sess = session_of(m)
  if sess then redis.call('SREM', sskey(sess), s) end
  redis.call('DEL', m, ekey(s))
  forget_bytes(s)
  redis.call('ZREM', LRU, s)
  redis.call('ZREM', EXP, s)
  notify(s, v + 1, 0)
  redis.call('PEXPIRE', nkey(s), TOMBSTONE_MS)
end

-- Bookkeeping of streams Redis expired by TTL (their keys are gone already).
local function forget_expired(s)
  redis.call('DEL', mkey(s), ekey(s))
  forget_bytes(s)
  redis.call('ZREM', LRU, s)
  redis.call('ZREM', EXP, s)
end

local function sweep(now, limit)
  local due = redis.call('ZRANGEBYSCORE', EXP, '-inf', now, 'LIMIT', 0, limit)
  for _, s in ipairs(due) do
    local ttl = redis.call('PTTL', mkey(s))
    if ttl > 0 then
      redis.call('ZADD', EXP, now + ttl, s)
    elseif ttl == -1 then
      redis.call('ZADD', EXP, now + 3600000, s)
    else
      forget_expired(s)
    end
  end
end

-- Drop the oldest events of stream s while it has more than maxev events, more than
-- maxb bytes, or the store more than budget bytes (nil: no such limit). Advances
-- first_seq; returns whether any event was dropped.
local function trim(s, maxev, maxb, budget)
  local e = ekey(s)
  local n = redis.call('XLEN', e)
  local nb = tonumber(redis.call('HGET', NB, s) or '0')
  local over_total = 0
  if budget then over_total = total() - budget end
  local freed, last, start = 0, nil, '-'
  local function over()
    return (maxev and n > maxev) or (maxb and nb > maxb) or (budget and freed < over_total)
  end
  while n > 0 and over() do
    local batch = redis.call('XRANGE', e, start, '+', 'COUNT', 256)
    if #batch == 0 then break end
    for _, entry in ipairs(batch) do
      if not over() then break end
      local size = string.len(entry[2][2])
      n = n - 1
      nb = nb - size
      freed = freed + size
      last = entry[1]
    end
    start = '(' .. batch[#batch][1]
  end
  if last then
    local seq = tonumber(string.match(last, '^(%d+)'))
    redis.call('XTRIM', e, 'MINID', string.format('%d-0', seq + 1))
    redis.call('HSET', mkey(s), 'first_seq', string.format('%d', seq + 1))
    if freed ~= 0 then
      redis.call('HINCRBY', NB, s, -freed)
      redis.call('DECRBY', TOTAL, freed)
    end
  end
  if n <= 0 then forget_bytes(s) end  -- holds nothing now: out of the budget's scan
  return last ~= nil
end

-- The global budget: oldest events of the least recently active streams go first,
-- the stream being appended to last (as MemoryStore does). HOLD lists only streams
-- that hold events, in activity order, so the scan never walks empty streams.
local function enforce(current, budget)
  local alone = redis.call('ZCARD', HOLD) <= 1
  while total() > budget do
    local progress = false
    for _, s in ipairs(redis.call('ZRANGE', HOLD, 0, 127)) do
      if total() <= budget then break end
      if s ~= current or alone then
        local before = total()
        if redis.call('EXISTS', mkey(s)) == 0 then
          forget_expired(s)
        elseif trim(s, nil, nil, budget) and s ~= current then
          bump(s)
        end
        if total() < before or not redis.call('ZSCORE', HOLD, s) then progress = true end
      end
    end
    if not progress then break end  -- nothing left to trim but the current stream
  end
  if total() > budget then trim(current, nil, nil, budget) end
end

local function extend_session_set(sess, ttl)
  local key = sskey(sess)
  local cur = redis.call('PTTL', key)
  if cur < ttl then redis.call('PEXPIRE', key, ttl) end
end

local function same(stored, expected)
  if stored == expected then return true end
  if not stored then return false end
  local a, b = tonumber(stored), tonumber(expected)
  return a ~= nil and b ~= nil and a == b
end

-- Keep a zset index of keys with expiries bounded to max entries (soonest expiry
-- evicted first, never the key just written).
local function bound(index, keyprefix, member, expires, now, max)
  redis.call('ZADD', index, expires, member)
  redis.call('ZREMRANGEBYSCORE', index, '-inf', now)
  local over = redis.call('ZCARD', index) - max
  if over <= 0 then return end
  local victims = redis.call('ZRANGE', index, 0, over)
  for _, v in ipairs(victims) do
    if over <= 0 then break end
    if v ~= member then
      redis.call('DEL', keyprefix .. v)
      redis.call('ZREM', index, v)
      over = over - 1
    end
  end
end
""".replace("TOMBSTONE_MS", str(_TOMBSTONE_MS))

# ARGV: P, stream, ttl_ms, max_streams, session ('' for none), scan, field, value, ...
_CREATE = r"""
local s, ttl, max_streams, sess, scan = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
local now = now_ms()
sweep(now, 100)
local m = mkey(s)
if redis.call('EXISTS', m) == 1 then drop(s) end
if redis.call('ZCARD', EXP) >= max_streams then
  local freed = false
  for _, c in ipairs(redis.call('ZRANGE', LRU, 0, scan - 1)) do
    local state = redis.call('HGET', mkey(c), 'state')
    if not state then
      forget_expired(c)
      freed = true
      break
    elseif state ~= '"running"' then
      drop(c)
      freed = true
      break
    end
  end
  if not freed then return redis.error_reply('STOREFULL') end
end
redis.call('DEL', m, ekey(s), nkey(s))
local fields = {}
for i = 7, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', m, unpack(fields))
redis.call('HSET', m, 'version', '0')
redis.call('PEXPIRE', m, ttl)
redis.call('ZADD', EXP, now + ttl, s)
redis.call('ZADD', LRU, redis.call('INCR', TICK), s)
if sess ~= '' then
  redis.call('SADD', sskey(sess), s)
  extend_session_set(sess, ttl)
end
return 1
"""

# ARGV: P, stream, ttl_ms ('' for none), n_expect, expect field/value pairs..., change field/value pairs...
# Returns {0} (no stream), {2, meta} (expectation failed), {1, meta} (applied).
_UPDATE = r"""
local s, ttl, nexp = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local m = mkey(s)
if redis.call('EXISTS', m) == 0 then return {0} end
local i = 5
for _ = 1, nexp do
  if not same(redis.call('HGET', m, ARGV[i]), ARGV[i + 1]) then
    return {2, redis.call('HGETALL', m)}
  end
  i = i + 2
end
if i <= #ARGV then
  local fields = {}
  for j = i, #ARGV do fields[#fields + 1] = ARGV[j] end
  redis.call('HSET', m, unpack(fields))
end
if ttl then
  redis.call('PEXPIRE', m, ttl)
  redis.call('PEXPIRE', ekey(s), ttl)
  redis.call('ZADD', EXP, now_ms() + ttl, s)
  local sess = session_of(m)
  if sess then extend_session_set(sess, ttl) end
end
bump(s)
return {1, redis.call('HGETALL', m)}
"""

# ARGV: P, stream, now (JSON)
_ATTACH = r"""
local s = ARGV[2]
local m = mkey(s)
if redis.call('EXISTS', m) == 0 then return {0} end
redis.call('HINCRBY', m, 'attach_gen', 1)
redis.call('HSET', m, 'attached', 'true', 'last_contact', ARGV[3])
bump(s)
return {1, redis.call('HGETALL', m)}
"""

# ARGV: P, stream
_DELETE = r"""
local s = ARGV[2]
if redis.call('EXISTS', mkey(s)) == 1 then drop(s) else forget_expired(s) end
return 1
"""

# ARGV: P, stream, max_events, max_bytes, budget, seq, payload, seq, payload, ...
_APPEND = r"""
local s, maxev, maxb, budget = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local m, e = mkey(s), ekey(s)
local last_seq = redis.call('HGET', m, 'last_seq')
if not last_seq then return 0 end
if tonumber(ARGV[6]) <= tonumber(last_seq) then
  return redis.error_reply('SEQ event seqs must grow: ' .. ARGV[6] .. ' after ' .. last_seq)
end
local added = 0
for i = 6, #ARGV, 2 do
  redis.call('XADD', e, ARGV[i] .. '-0', 'd', ARGV[i + 1])
  added = added + string.len(ARGV[i + 1])
end
local ttl = redis.call('PTTL', m)
if ttl > 0 then redis.call('PEXPIRE', e, ttl) end
redis.call('HSET', m, 'last_seq', ARGV[#ARGV - 1])
redis.call('HINCRBY', NB, s, added)
redis.call('INCRBY', TOTAL, added)
local tick = redis.call('INCR', TICK)
redis.call('ZADD', LRU, tick, s)
redis.call('ZADD', HOLD, tick, s)
trim(s, maxev, maxb, nil)
enforce(s, budget)
bump(s)
return 1
"""

# ARGV: P, stream, after, limit. Returns {0} (no stream), {-1, first_seq} (gap), {1, entries}.
_READ = r"""
local s, after = ARGV[2], tonumber(ARGV[3])
local first = redis.call('HGET', mkey(s), 'first_seq')
if not first then return {0} end
first = tonumber(first)
if after + 1 < first then return {-1, first} end
local start = '-'
if after >= 0 then start = '(' .. ARGV[3] .. '-0' end
return {1, redis.call('XRANGE', ekey(s), start, '+', 'COUNT', ARGV[4])}
"""

# ARGV: P, stream, after, limit. _READ's reply, then the metadata hash (flat) or nil.
_READ_META = r"""
local s, after = ARGV[2], tonumber(ARGV[3])
local m = mkey(s)
local first = redis.call('HGET', m, 'first_seq')
if not first then return {0} end
first = tonumber(first)
if after + 1 < first then return {-1, first} end
local start = '-'
if after >= 0 then start = '(' .. ARGV[3] .. '-0' end
return {1, redis.call('XRANGE', ekey(s), start, '+', 'COUNT', ARGV[4]), redis.call('HGETALL', m)}
"""

# ARGV: P
_USAGE = r"""
sweep(now_ms(), 1000)
return {redis.call('ZCARD', EXP), total()}
"""

# ARGV: P, kind ('sess' | 'k'), id, value, ttl_ms, max, only_if_absent ('1' | '0')
# Returns the value already there when only_if_absent and the key exists, else nil.
_PUT = r"""
local kind, id, value, ttl, max = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local keyprefix = P .. kind .. ':'
local key = keyprefix .. id
if ARGV[7] == '1' then
  local cur = redis.call('GET', key)
  if cur then return cur end
end
redis.call('SET', key, value, 'PX', ttl)
local index = P .. 'g:keys'
if kind == 'sess' then index = P .. 'g:sess' end
local now = now_ms()
bound(index, keyprefix, id, now + ttl, now, max)
return false
"""

# ARGV: P, key, value ('' with has_value '0' for unconditional), has_value
_DELETE_KEY = r"""
local key = P .. 'k:' .. ARGV[2]
if ARGV[4] == '1' and redis.call('GET', key) ~= ARGV[3] then return 0 end
redis.call('ZREM', P .. 'g:keys', ARGV[2])
return redis.call('DEL', key)
"""

# ARGV: P, session. Returns the ids of its streams that still exist.
_DELETE_SESSION = r"""
local sess = ARGV[2]
redis.call('DEL', P .. 'sess:' .. sess)
redis.call('ZREM', P .. 'g:sess', sess)
local out = {}
for _, s in ipairs(redis.call('SMEMBERS', sskey(sess))) do
  if redis.call('EXISTS', mkey(s)) == 1 then out[#out + 1] = s end
end
redis.call('DEL', sskey(sess))
return out
"""


#: After Redis restarted, every pooled connection is dead: a command that meets one is
#: sent once more on a fresh connection instead of failing a healthy request. (A
#: command that did run before its connection broke is not at risk of running twice
#: unnoticed: every append names its entry ids, so a repeat is refused by Redis.)
_RECONNECT: dict[str, Any] = {
    "retry": Retry(NoBackoff(), 1),
    "retry_on_error": [RedisConnectionError],
}


class RedisStore(Store):
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
        self._owned: list[aioredis.Redis] = []
        if url is not None:
            client = aioredis.Redis(
                connection_pool=aioredis.BlockingConnectionPool.from_url(
                    url, max_connections=max_connections, timeout=None, **_RECONNECT
                )
            )
            self._owned.append(client)
            if wait_client is None:
                wait_client = aioredis.Redis(
                    connection_pool=aioredis.BlockingConnectionPool.from_url(
                        url, max_connections=max_waiters, timeout=None, **_RECONNECT
                    )
                )
                self._owned.append(wait_client)
        assert client is not None
        for c in (client, wait_client):
            if c is not None and c.connection_pool.connection_kwargs.get("decode_responses"):
                raise ValueError("RedisStore needs a client with decode_responses=False (payloads are bytes)")
        self._client = client
        self._waiter = wait_client if wait_client is not None else client
        self._create = client.register_script(_PRELUDE + _CREATE)
        self._update = client.register_script(_PRELUDE + _UPDATE)
        self._attach = client.register_script(_PRELUDE + _ATTACH)
        self._delete = client.register_script(_PRELUDE + _DELETE)
        self._append = client.register_script(_PRELUDE + _APPEND)
        self._read = client.register_script(_PRELUDE + _READ)
        self._read_meta = client.register_script(_PRELUDE + _READ_META)
        self._usage = client.register_script(_PRELUDE + _USAGE)
        self._put = client.register_script(_PRELUDE + _PUT)
        self._delete_key = client.register_script(_PRELUDE + _DELETE_KEY)
        self._delete_session = client.register_script(_PRELUDE + _DELETE_SESSION)

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

    # -- streams -----------------------------------------------------------------------
    async def create_stream(self, meta: StreamMeta, ttl_s: float) -> None:
        _on_asyncio()
        fields: list[str] = []
        for name in _FIELDS:
            if name != "version":
                fields += [name, _dumps(getattr(meta, name))]
        try:
            await self._create(
                args=[
                    self.prefix,
                    meta.stream_id,
                    _ms(ttl_s),
                    self.max_streams,
                    meta.session_id or "",
                    self.full_scan,
                    *fields,
                ]
            )
        except ResponseError as exc:
            if "STOREFULL" in str(exc):
                raise StoreFullError(f"{self.max_streams} streams are running") from None
            raise

    async def get_stream(self, stream_id: str) -> StreamMeta | None:
        _on_asyncio()
        raw = await self._client.hgetall(self._m(stream_id))
        return self._decode_meta(raw) if raw else None

    async def update_stream(
        self, stream_id: str, ttl_s: float | None = None, **changes: Any
    ) -> StreamMeta | None:
        _, meta = await self.update_stream_if(stream_id, {}, ttl_s, **changes)
        return meta

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
        previous = None
        for seq, payload in events:
            if previous is not None and seq <= previous:
                raise ValueError("event seqs must be strictly increasing")
            previous = seq
            args += [int(seq), payload]
        try:
            await self._append(args=args)
        except ResponseError as exc:
            if str(exc).startswith("SEQ"):
                raise ValueError(str(exc)) from None
            raise

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
        pattern = self.prefix.replace("\\", "\\\\")
        for char in "*?[]":
            pattern = pattern.replace(char, "\\" + char)
        batch: list[Any] = []
        async for key in self._client.scan_iter(match=pattern + "*", count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                await self._client.unlink(*batch)
                batch = []
        if batch:
            await self._client.unlink(*batch)

    async def aclose(self) -> None:
        for client in self._owned:
            await client.aclose()
        self._owned = []
