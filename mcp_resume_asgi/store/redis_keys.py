"""`RedisStore`'s compare-and-set on keys (`Store.replace_key`).

A key (`P k:<key>`, laid out as `redis_scripts.py` describes) is compared and
written by one Lua script, so no other process can write it in between: the
write-side of a read-modify-write that several nodes may do at once (a task's
record). Like `PUT` (`set_key`), a write keeps the store's bound on keys
(`max_keys`, the `P g:keys` index). The script lives here, with the only code
that runs it, to keep `redis.py` to the stream operations.
"""

from __future__ import annotations

import math

import redis.asyncio as aioredis

from mcp_resume_asgi.store import redis_scripts as lua

__all__ = ["RedisKeys"]

# ARGV: P, key, has_expected ('1' | '0'), expected, value, ttl_ms, max_keys. Returns 1 (set) / 0.
_REPLACE = r"""
local id, value, ttl, max = ARGV[2], ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
local keyprefix = P .. 'k:'
local cur = redis.call('GET', keyprefix .. id)
if ARGV[3] == '1' then
  if cur ~= ARGV[4] then return 0 end
elseif cur then
  return 0
end
redis.call('SET', keyprefix .. id, value, 'PX', ttl)
local now = now_ms()
bound(P .. 'g:keys', keyprefix, id, now + ttl, now, max)
return 1
"""


class RedisKeys:
    """The compare-and-set of `RedisStore` (a mixin: it calls `_init_keys`)."""

    prefix: str
    max_keys: int

    def _init_keys(self, client: aioredis.Redis) -> None:
        self._replace_key = client.register_script(lua.PRELUDE + _REPLACE)

    async def replace_key(self, key: str, expected: str | None, value: str, ttl_s: float) -> bool:
        ttl_ms = max(1, math.ceil(ttl_s * 1000))
        has_expected = "0" if expected is None else "1"
        args: list[str | int] = [self.prefix, key, has_expected, expected or "", value, ttl_ms, self.max_keys]
        return bool(await self._replace_key(args=args))
