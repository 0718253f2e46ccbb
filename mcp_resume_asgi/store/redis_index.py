"""`RedisStore`'s bounded, self-expiring indexes (`Store.index_add` and the rest).

One sorted set per index, `P i:<index>` (next to the keys `redis_scripts.py`
lays out): member -> its expiry in unix seconds as the score, so the live
members are the scores above now, in `(expires_at, member)` order as Redis keeps
equal scores (by the members' bytes). The key's own TTL is kept at its latest
member's expiry by every script that changes it, so an index whose members all
expired is gone with them, even if nobody touches it again.

Each operation is one Lua script: an add checks the cap and adds in one step (no
other process can add in between), and all four read "now" from Redis (`TIME`),
one clock for every node. The scripts live here, with the code that runs them,
rather than in `redis_scripts.py`, which holds the streams' scripts; the add and the
remove are Lua functions (`INDEX_FN`) that a stream's script also runs to list or
unlist its stream in the same step (`Store.open_with`'s `listing`, `append_final`'s
`unlist`). Each script here touches its one key only, so on a Redis Cluster an index is
wherever its key's slot is, and its name is the same as on one instance - but for the
indexes a stream's scripts write (`STREAM_INDEXES`), which are split by partition there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.index_bounds import check_index_args, page_limit
from mcp_resume_asgi.store.redis_connections import AnyRedis, register_script
from mcp_resume_asgi.store.redis_layout import RedisLayout

__all__ = ["INDEX_FN", "STREAM_INDEXES", "RedisIndexes"]

#: The index operations as Lua functions of the index's key: the index scripts here run them,
#: and so do the stream scripts that list or unlist their stream in the same step
#: (`RedisStore.open_with`'s `listing`, `append_final`'s `unlist`).
INDEX_FN = r"""
local function now_s()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
-- As a score argument: Lua's own number formatting keeps only 14 digits (whole ms lost).
local function score(x) return string.format('%.6f', x) end

-- The key lives as long as its last member: its TTL follows the highest score.
local function index_retune(key)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if #last == 0 then return end
  redis.call('PEXPIREAT', key, string.format('%d', math.ceil(tonumber(last[2]) * 1000)))
end

-- `index_add`: expires_text is the caller's exact float text; now (unix s), if the script read
-- Redis's clock already (nil: read here). Returns 1 (in, or left out as expired already) or 0 (the
-- index holds `cap` live members and `member` is not one of them).
local function index_add(key, member, expires_text, cap, now)
  local expires = tonumber(expires_text)
  now = now or now_s()
  redis.call('ZREMRANGEBYSCORE', key, '-inf', score(now))
  if expires <= now then
    redis.call('ZREM', key, member)
    index_retune(key)
    return 1
  end
  if redis.call('ZCARD', key) >= cap and not redis.call('ZSCORE', key, member) then return 0 end
  redis.call('ZADD', key, expires_text, member)
  index_retune(key)
  return 1
end

local function index_remove(key, member)
  if redis.call('ZREM', key, member) == 1 then index_retune(key) end
end
"""

# KEYS: index. ARGV: member, expires_at (the caller's exact float text), cap. Returns 1 / 0.
_ADD = r"""
return index_add(KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3]))
"""

# KEYS: index. ARGV: member.
_REMOVE = r"""
index_remove(KEYS[1], ARGV[1])
return 1
"""

# KEYS: index. Returns the number of live members.
_COUNT = r"""
local key = KEYS[1]
return redis.call('ZCOUNT', key, '(' .. score(now_s()), '+inf')
"""

# KEYS: index. ARGV: limit, has_after ('1' | '0'), after score, after member.
# Returns a flat list member, score, member, score...
_PAGE = r"""
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local now = now_s()
local low = '(' .. score(now)
local out = {}
-- Members are ordered by their bytes, as Redis orders equal scores (Lua's `<` on
-- strings follows the server's locale, so it is not used).
local function bytes_after(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x > y end
  end
  return #a > #b
end
if ARGV[2] == '1' and tonumber(ARGV[3]) > now then
  local same = redis.call('ZRANGEBYSCORE', key, ARGV[3], ARGV[3], 'WITHSCORES')
  for i = 1, #same, 2 do
    if #out >= 2 * limit then break end
    if bytes_after(same[i], ARGV[4]) then
      out[#out + 1] = same[i]
      out[#out + 1] = same[i + 1]
    end
  end
  low = '(' .. ARGV[3]
end
local left = limit - #out / 2
if left > 0 then
  for _, x in ipairs(redis.call('ZRANGEBYSCORE', key, low, '+inf', 'WITHSCORES', 'LIMIT', 0, left)) do
    out[#out + 1] = x
  end
end
return out
"""


#: The indexes whose members are stream ids, written by a stream's own scripts (`Store.open_with`'s
#: `listing`, `append_final`'s `unlist`): on a Redis Cluster each is split by its members'
#: partitions, as the streams are (`P{<tag>}i:<index>`), so that a stream's script, confined to its
#: partition's slot, writes its own entry; an operation on one member goes to that member's
#: partition, a page or a count reads every partition, and each partition keeps its share of a cap
#: (`RedisLayout.share`, as the store's other bounds: a cap below the partitions holds nothing).
#: On one instance nothing of that changes a name.
STREAM_INDEXES = frozenset({keys.RUNNING_INDEX})


class RedisIndexes:
    """The index operations of `RedisStore` (a mixin: it calls `_init_indexes`)."""

    prefix: str
    _ready: Callable[[], Awaitable[RedisLayout]]

    def _init_indexes(self, client: AnyRedis) -> None:
        self._index_add = register_script(client, INDEX_FN + _ADD)
        self._index_remove = register_script(client, INDEX_FN + _REMOVE)
        self._index_count = register_script(client, INDEX_FN + _COUNT)
        self._index_page = register_script(client, INDEX_FN + _PAGE)

    def _index_key(self, index: str) -> str:
        return f"{self.prefix}i:{index}"

    @staticmethod
    def _split(layout: RedisLayout, index: str) -> bool:
        """Whether `index` is kept per partition (`STREAM_INDEXES`, on a cluster)."""
        return layout.cluster and index in STREAM_INDEXES

    @staticmethod
    def _index_cap(layout: RedisLayout, index: str, cap: int) -> int:
        """The cap one key of `index` keeps: a partition's share of it when split."""
        return layout.share(cap) if RedisIndexes._split(layout, index) else cap

    def _member_key(self, layout: RedisLayout, index: str, member: str) -> str:
        """The key that holds (or would hold) `member` of `index`."""
        if self._split(layout, index):
            return f"{layout.of_stream(member)}i:{index}"
        return self._index_key(index)

    async def index_add(self, index: str, member: str, expires_at: float, *, cap: int) -> bool:
        check_index_args(index, member, expires_at=expires_at, cap=cap)
        layout = await self._ready()
        added = await self._index_add(
            keys=[self._member_key(layout, index, member)],
            args=[member, repr(float(expires_at)), self._index_cap(layout, index, cap)],
        )
        return bool(added)

    async def index_remove(self, index: str, member: str) -> None:
        check_index_args(index, member)
        layout = await self._ready()
        await self._index_remove(keys=[self._member_key(layout, index, member)], args=[member])

    async def index_page(
        self, index: str, *, after: tuple[float, str] | None = None, limit: int = 100
    ) -> list[tuple[str, float]]:
        check_index_args(index, after=after)
        layout = await self._ready()
        limit = page_limit(limit)
        args: list[Any] = [limit, "0", "0", ""]
        if after is not None:
            args[1:] = ["1", repr(float(after[0])), after[1]]
        if not self._split(layout, index):
            reply = await self._index_page(keys=[self._index_key(index)], args=args)
            return [(reply[i].decode(), float(reply[i + 1])) for i in range(0, len(reply), 2)]
        # Each partition's first `limit` after `after`, merged in the order one key keeps.
        found: list[tuple[float, bytes]] = []

        async def one(part: str) -> None:
            reply = await self._index_page(keys=[f"{part}i:{index}"], args=args)
            found.extend((float(reply[i + 1]), reply[i]) for i in range(0, len(reply), 2))

        async with anyio.create_task_group() as tg:
            for part in layout.prefixes:
                tg.start_soon(one, part)
        found.sort()
        return [(member.decode(), at) for at, member in found[:limit]]

    async def index_count(self, index: str) -> int:
        check_index_args(index)
        layout = await self._ready()
        if not self._split(layout, index):
            return int(await self._index_count(keys=[self._index_key(index)]))
        counts: list[int] = []

        async def one(part: str) -> None:
            counts.append(int(await self._index_count(keys=[f"{part}i:{index}"])))

        async with anyio.create_task_group() as tg:
            for part in layout.prefixes:
                tg.start_soon(one, part)
        return sum(counts)
