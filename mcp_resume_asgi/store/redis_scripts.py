"""The Lua scripts of `RedisStore`: every write (and the reads that must see a
consistent stream) is one script, so it is atomic across processes and costs one
round trip.

Layout, for a key prefix `P` (all keys of one store live under it, so several
stores can share a Redis database; every node of one deployment uses the same):

* `P s:<stream>:m` - hash, the stream's `StreamMeta`, one field per attribute,
  each value JSON text (so `HINCRBY attach_gen` and `HINCRBY version` work on it).
* `P s:<stream>:e` - Redis Stream of events: entry id `<seq>-0`, one field `d`
  holding the payload. Read with `XRANGE (<after>-0 + COUNT n`.
* `P s:<stream>:n` - Redis Stream of at most one entry, id `<version>-0`: the
  notification that the stream changed without new events (see `wait`).
* `P ss:<session>` - set of the session's stream ids.
* `P sess:<session>`, `P k:<key>` - strings (JSON / the value) with a TTL.
* `P g:total` (payload bytes held), `P g:nb` (hash stream -> bytes), `P g:lru`
  (zset stream -> activity tick), `P g:hold` (the same, only streams holding
  events), `P g:exp` (zset stream -> expiry in ms), `P g:tick`, and `P g:sess`,
  `P g:keys` (zsets id -> expiry, to bound how many there are).
* Pub/sub channel `P ch:<channel>` for `publish` / `subscribe`.
* `P i:<index>` - zset member -> expiry (unix s), the indexes (`redis_index.py`); a
  stream's opening and its final write may list and unlist it there in the same script.

Every script gets its partition's prefix as ARGV[1] and builds key names from it;
each is registered with `PRELUDE` in front (the key-name helpers). On one Redis
instance that prefix is the store's `P`, so the names above are exact; on a Redis
Cluster it is `P{<tag>}` (`redis_layout.py`), and every key a script touches is of
its partition, in one slot. A stream's script declares in KEYS its record alone
(`RedisLayout.stream_keys`), which routes it to the slot's primary; every other key it
touches - the stream's events and notification, its session's set, the partition's `g:`
keys, the streams it trims for the byte budget or evicts at `max_streams` - shares the
partition's hash tag, so it is in the same slot. Other scripts declare the keys they know.
"""

#: How long the notification of a deleted stream outlives it (waiters see it and return).
TOMBSTONE_MS = 10_000

PRELUDE = r"""
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

-- The stream changed: the version moves and waiters are told. (A write that adds events that
-- stay moves the version without a notification, `finish`: a waiter blocks on the events stream
-- after the last event it saw stored, and the new events wake it.)
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

-- The session id of a record's `session_id` field as stored (JSON text; nil, false or null: none).
local function session_in(raw)
  if not raw then return nil end
  local sess = cjson.decode(raw)
  if type(sess) == 'string' then return sess end
  return nil
end

local function session_of(m)
  return session_in(redis.call('HGET', m, 'session_id'))
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
  if total() <= budget then return end
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
""".replace("TOMBSTONE_MS", str(TOMBSTONE_MS))

# Create stream s with the record's fields (a table: field, value, ...), replacing one of that id;
# false when the store holds max_streams running streams, else the time it read (ms). `tick`: the
# stream takes its place in the activity order now (false: the events its caller adds next give
# it one). `fields_of` reads the fields as the caller sends them: one argument, each field name
# and value followed by a NUL but the last (JSON text holds no raw NUL), so a record of two dozen
# fields costs the caller one argument to encode, not fifty.
CREATE_FN = r"""
local function fields_of(text)
  local out, at = {}, 1
  while true do
    local nul = string.find(text, '\0', at, true)
    if not nul then
      out[#out + 1] = string.sub(text, at)
      return out
    end
    out[#out + 1] = string.sub(text, at, nul - 1)
    at = nul + 1
  end
end

local function create(s, ttl, max_streams, sess, scan, fields, tick)
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
    if not freed then return false end
  end
  redis.call('DEL', m, ekey(s), nkey(s))
  fields[#fields + 1] = 'version'
  fields[#fields + 1] = '0'
  redis.call('HSET', m, unpack(fields))
  redis.call('PEXPIRE', m, ttl)
  redis.call('ZADD', EXP, now + ttl, s)
  if tick then redis.call('ZADD', LRU, redis.call('INCR', TICK), s) end
  if sess ~= '' then
    redis.call('SADD', sskey(sess), s)
    extend_session_set(sess, ttl)
  end
  return now
end
"""

# ARGV: P, stream, ttl_ms, max_streams, session ('' for none), scan, fields (`fields_of`).
CREATE = (
    CREATE_FN
    + r"""
if not create(ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6]), fields_of(ARGV[7]), true) then
  return redis.error_reply('STOREFULL')
end
return 1
"""
)

# ARGV: P, stream, ttl_ms ('' for none), returning ('1' | '0'), n_expect, expect field/value
# pairs..., change field/value pairs... Returns {0} (no stream), {2, meta} (expectation
# failed), {1, meta} (applied; {1} when not returning). The record is read once (`HMGET`: its
# `state`, which every record has, its version, session and the expected fields) and written
# once, the changes and the next version together.
UPDATE = r"""
local s, ttl, returning, nexp = ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1', tonumber(ARGV[5])
local m = mkey(s)
local names = {'state', 'version', 'session_id'}
for k = 1, nexp do names[#names + 1] = ARGV[4 + 2 * k] end
local rec = redis.call('HMGET', m, unpack(names))
if not rec[1] then return {0} end
local i = 6
for k = 1, nexp do
  if not same(rec[3 + k], ARGV[i + 1]) then
    return {2, redis.call('HGETALL', m)}
  end
  i = i + 2
end
local v = tonumber(rec[2] or '0') + 1
local fields = {'version', string.format('%d', v)}
for j = i, #ARGV do fields[#fields + 1] = ARGV[j] end
redis.call('HSET', m, unpack(fields))
if ttl then
  redis.call('PEXPIRE', m, ttl)
  redis.call('PEXPIRE', ekey(s), ttl)
  redis.call('ZADD', EXP, now_ms() + ttl, s)
  local sess = session_in(rec[3])
  if sess then extend_session_set(sess, ttl) end
end
notify(s, v, redis.call('PTTL', m))
if not returning then return {1} end
return {1, redis.call('HGETALL', m)}
"""

# ARGV: P, stream, now (JSON)
ATTACH = r"""
local s = ARGV[2]
local m = mkey(s)
if redis.call('EXISTS', m) == 0 then return {0} end
redis.call('HINCRBY', m, 'attach_gen', 1)
redis.call('HSET', m, 'attached', 'true', 'last_contact', ARGV[3])
bump(s)
return {1, redis.call('HGETALL', m)}
"""

# ARGV: P, stream
DELETE = r"""
local s = ARGV[2]
if redis.call('EXISTS', mkey(s)) == 1 then drop(s) else forget_expired(s) end
return 1
"""

# Add events to stream s (seq, payload, ... from ARGV[first] on), trim it by its caps and
# keep the global budget; neither the record's `last_seq` nor its version is written here: the
# caller writes them with its own changes in one `HSET` (`finish`), and notifies waiters when
# the write added no event that stays (the added events wake them). Returns 0 (no stream), 1
# (nothing new), 2 (added), 3 (added, and trimmed away at once: the stream holds no event), or a
# SEQ error; then the record as read (`rec`: its `version` and `session_id`, raw) and the
# record's fields to write, `last_seq` among them when events were added.
# The events stream takes the record's TTL when it is made (it holds no event yet): the
# scripts that change the record's TTL change both. The caps and the budget are looked at
# only when the counts the writes return say they are passed. With `owner` (the writer's node id as the record
# keeps it, JSON; '' or nil: any), nothing is written unless the record's owner is that node: a
# FENCED error naming the owner (the node was taken for lost, and another runs its request).
# Idempotent: the events the stream holds already (a retry of an append whose reply was lost,
# Redis having run it late) are skipped, each checked against the payload stored under its seq
# (an event trimmed since cannot be checked: taken as written). `made`: the stream was created by
# this script ({ttl = ms to live, last_seq = the record's, session = its session id or ''}), so
# it holds no event yet, its events stream takes that TTL and its record is not read again (nil:
# all read from Redis).
APPEND_FN = r"""
local function add_events(s, maxev, maxb, budget, first, owner, made)
  local m, e = mkey(s), ekey(s)
  local rec, last_seq = {}, nil
  if made then
    rec.version, rec.session_id, last_seq = '0', cjson.encode(made.session), made.last_seq
    if made.session == '' then rec.session_id = nil end
  else
    local got = redis.call('HMGET', m, 'last_seq', 'version', 'session_id', 'owner')
    last_seq, rec.version, rec.session_id = got[1], got[2], got[3]
    if not last_seq then return 0 end
    if owner and owner ~= '' and got[4] ~= owner then
      return redis.error_reply('FENCED ' .. (got[4] or 'null'))
    end
  end
  local sets = {}
  local start = first
  while start <= #ARGV and tonumber(ARGV[start]) <= tonumber(last_seq) do
    local id = ARGV[start] .. '-0'
    local stored = redis.call('XRANGE', e, id, id)
    if #stored == 1 and stored[1][2][2] ~= ARGV[start + 1] then
      return redis.error_reply('SEQ event ' .. ARGV[start] .. ' is recorded already, with another payload')
    end
    start = start + 2
  end
  if start > #ARGV then return 1, rec, sets end
  local n = 0
  if not made then n = redis.call('XLEN', e) end
  local fresh = n == 0
  local added = 0
  for i = start, #ARGV, 2 do
    redis.call('XADD', e, ARGV[i] .. '-0', 'd', ARGV[i + 1])
    added = added + string.len(ARGV[i + 1])
    n = n + 1
  end
  if fresh then
    local ttl = made and made.ttl or redis.call('PTTL', m)
    if ttl > 0 then redis.call('PEXPIRE', e, ttl) end
  end
  sets[1], sets[2] = 'last_seq', ARGV[#ARGV - 1]
  local nb = redis.call('HINCRBY', NB, s, added)
  local held = redis.call('INCRBY', TOTAL, added)
  local tick = redis.call('INCR', TICK)
  redis.call('ZADD', LRU, tick, s)
  redis.call('ZADD', HOLD, tick, s)
  local trimmed = false
  if (maxev and n > maxev) or (maxb and nb > maxb) then
    trim(s, maxev, maxb, nil)
    trimmed = true
  end
  if budget and held > budget then
    enforce(s, budget)
    trimmed = true
  end
  if trimmed and redis.call('XLEN', e) == 0 then return 3, rec, sets end
  return 2, rec, sets
end

-- The stream holds its final answer (final_seq, JSON): completed (added to `sets`, the fields
-- its caller writes), kept ttl ms from now (nil: as it is).
local function complete(s, final_seq, ttl, rec, sets)
  sets[#sets + 1] = 'final_seq'
  sets[#sets + 1] = final_seq
  sets[#sets + 1] = 'state'
  sets[#sets + 1] = '"completed"'
  if ttl then
    redis.call('PEXPIRE', mkey(s), ttl)
    redis.call('PEXPIRE', ekey(s), ttl)
    redis.call('ZADD', EXP, now_ms() + ttl, s)
    local sess = session_in(rec.session_id)
    if sess then extend_session_set(sess, ttl) end
  end
end

-- Write `sets` and the next version to the record in one `HSET`; notify the waiters unless the
-- write added events that stay (`added` 2: they wake the waiters blocked on the events stream).
local function finish(s, added, rec, sets)
  local m = mkey(s)
  local v = tonumber(rec.version or '0') + 1
  sets[#sets + 1] = 'version'
  sets[#sets + 1] = string.format('%d', v)
  redis.call('HSET', m, unpack(sets))
  if added ~= 2 then notify(s, v, redis.call('PTTL', m)) end
end
"""

# ARGV: P, stream, max_events, max_bytes, budget, owner ('' for any), seq, payload, seq, payload, ...
APPEND = (
    APPEND_FN
    + r"""
local added, rec, sets = add_events(ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), 7, ARGV[6])
if added == 2 or added == 3 then
  finish(ARGV[2], added, rec, sets)
  return 1
end
return added
"""
)

# ARGV: P, stream, max_events, max_bytes, budget, final_seq, retain_ms ('' for none), owner ('' for
# any), unlist (an index to take the stream out of, `P i:<unlist>`; '' for none), seq, payload, ...
# Returns 0 (no stream: nothing written) or 1. Needs `redis_index.INDEX_FN` in front.
APPEND_FINAL = (
    APPEND_FN
    + r"""
local s = ARGV[2]
local added, rec, sets = add_events(s, tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), 10, ARGV[8])
if type(added) == 'table' then return added end
if ARGV[9] ~= '' then index_remove(P .. 'i:' .. ARGV[9], s) end
if added == 0 then return 0 end
complete(s, ARGV[6], tonumber(ARGV[7]), rec, sets)
finish(s, added, rec, sets)
return 1
"""
)

# ARGV: P, stream, ttl_ms, max_streams, session ('' for none), scan, max_events, max_bytes,
# budget, final_seq ('' for none), retain_ms ('' for none), index ('' for none), expires_at, cap,
# fields (`fields_of`), then seq, payload, ...: `create`, `add_events`, `complete` and, with an
# index and no final_seq, the stream listed in `P i:<index>` until expires_at (`index_add`), as
# one write. Returns 1, or 2 when that index was full (not listed). Needs
# `redis_index.INDEX_FN` in front.
OPEN_WITH = (
    CREATE_FN
    + APPEND_FN
    + r"""
local s, ttl = ARGV[2], tonumber(ARGV[3])
local has_events = #ARGV >= 16
local fields = fields_of(ARGV[15])
local now = create(s, ttl, tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6]), fields, not has_events)
if not now then return redis.error_reply('STOREFULL') end
local made = {ttl = ttl, session = ARGV[5], last_seq = '0'}
for i = 1, #fields - 1, 2 do
  if fields[i] == 'last_seq' then made.last_seq = fields[i + 1] end
end
local added, rec, sets = add_events(s, tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]), 16, nil, made)
if type(added) == 'table' then return added end
if has_events and added ~= 2 and added ~= 3 then redis.call('ZADD', LRU, redis.call('INCR', TICK), s) end
if ARGV[10] ~= '' then complete(s, ARGV[10], tonumber(ARGV[11]), rec, sets) end
finish(s, added, rec, sets)
if ARGV[12] ~= '' and ARGV[10] == '' then
  return 2 - index_add(P .. 'i:' .. ARGV[12], s, ARGV[13], tonumber(ARGV[14]), now / 1000)
end
return 1
"""
)

# ARGV: P, stream, after, limit. Returns {0} (no stream), {-1, first_seq} (gap), {1, entries}.
READ = r"""
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
READ_META = r"""
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
USAGE = r"""
sweep(now_ms(), 1000)
return {redis.call('ZCARD', EXP), total()}
"""

# ARGV: P, kind ('sess' | 'k'), id, value, ttl_ms, max, only_if_absent ('1' | '0'), nonce
# Returns the value already there when only_if_absent and the key exists, else nil.
# only_if_absent notes the call's `nonce` beside the key (`P <kind>n:<id>`, same TTL): the
# same call sent again after its reply was lost (a dropped connection, a failover) finds
# its own nonce there and succeeds again instead of reporting its own value as taken.
PUT = r"""
local kind, id, value, ttl, max = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local keyprefix = P .. kind .. ':'
local key = keyprefix .. id
local noncekey = P .. kind .. 'n:' .. id
if ARGV[7] == '1' then
  local cur = redis.call('GET', key)
  if cur then
    if ARGV[8] ~= '' and redis.call('GET', noncekey) == ARGV[8] then return false end
    return cur
  end
end
redis.call('SET', key, value, 'PX', ttl)
if ARGV[7] == '1' and ARGV[8] ~= '' then redis.call('SET', noncekey, ARGV[8], 'PX', ttl) end
local index = P .. 'g:keys'
if kind == 'sess' then index = P .. 'g:sess' end
local now = now_ms()
bound(index, keyprefix, id, now + ttl, now, max)
return false
"""

# ARGV: P, key, value ('' with has_value '0' for unconditional), has_value
DELETE_KEY = r"""
local key = P .. 'k:' .. ARGV[2]
if ARGV[4] == '1' and redis.call('GET', key) ~= ARGV[3] then return 0 end
redis.call('ZREM', P .. 'g:keys', ARGV[2])
redis.call('DEL', P .. 'kn:' .. ARGV[2])
return redis.call('DEL', key)
"""

# ARGV: P, session. Returns the ids of its streams that still exist.
DELETE_SESSION = r"""
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
