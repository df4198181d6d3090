-- events.lua: read a partition's event stream after a position.
--
-- KEYS[1]  schedule zset   {p}:schedule (names the partition's slot)
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  position: "<ms>-<seq>" (the last entry the reader has), "0-0"
--          (from the oldest kept) or "$" (from now on)
-- ARGV[3]  most entries to return
--
-- Touches: the event stream {p}:events (reads only). Publishes: nothing.
-- Helpers: none.
--
-- Returns { DONE, gap, position, then per entry: id, kind, job id, topic,
--           attempt, due ("" if none), error ("" if none) }: gap 1 when the
--           stream no longer holds the entry at the position asked for (it
--           was trimmed, or the stream is not the one the position came
--           from), so entries after it may be lost: the entries then start
--           at the oldest kept; position: the last entry returned, else
--           where the reader is now (for "$": the newest entry's id).
--
-- Guarantees: one atomic read, so a trim cannot fall between the gap check
-- and the read: what is returned follows the position without a hole, or
-- gap says there may be one (on Redis 6.2, from the oldest kept, also when
-- the stream is full but was never trimmed). Cost: XINFO STREAM (O(1)) and an XRANGE of at
-- most ARGV[3] entries: bounded by what it returns.
local key = P .. EVENTS_KEY
local after, count = ARGV[2], tonumber(ARGV[3])
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function before(a, b)
  local am, as = parse(a)
  local bm, bs = parse(b)
  return am < bm or (am == bm and as < bs)
end
if redis.call('EXISTS', key) == 0 then
  -- Nothing kept: a position of some earlier stream is a gap.
  if after == '$' or after == '0-0' then return { DONE, 0, '0-0' } end
  return { DONE, 1, '0-0' }
end
local info = redis.call('XINFO', 'STREAM', key)
local stream = {}
for i = 1, #info, 2 do stream[info[i]] = info[i + 1] end
local last = stream['last-generated-id']
if after == '$' then return { DONE, 0, last } end
local gap = 0
local first = stream['first-entry'] and stream['first-entry'][1]
if after == '0-0' then
  -- From the start: a gap if anything was ever trimmed. Redis 6.2 does not
  -- count what was added: a trim (MAXLEN ~ EVENTS) leaves at least EVENTS
  -- entries, so fewer means none was; as many may be a gap, said as one.
  local added, length = tonumber(stream['entries-added']), tonumber(stream['length'])
  if added then
    if added > length then gap = 1 end
  elseif length >= EVENTS then
    gap = 1
  end
elseif before(last, after) or (first and before(after, first)) then
  gap = 1
end
if gap == 1 then after = '0-0' end
local reply = { DONE, gap, after }
local entries = redis.call('XRANGE', key, '(' .. after, '+', 'COUNT', count)
for _, e in ipairs(entries) do
  reply[#reply + 1] = e[1]
  local f = e[2]
  -- The fields, in the order emit writes them.
  for i = 2, 12, 2 do reply[#reply + 1] = f[i] end
  reply[3] = e[1]
end
return reply
