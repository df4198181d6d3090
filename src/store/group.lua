-- group.lua: a group's settings (concurrency limit, pause) and figures,
-- and a page of a topic's groups.
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  "get", "set" or "list"
-- ARGV[3]  topic
-- get:  ARGV[4] group
-- set:  ARGV[4] group, ARGV[5] concurrency limit ("": none; "-": as it
--       is), ARGV[6] paused ("1", "0"; "-": as it is), ARGV[7] rate, jobs
--       a second ("": none; "-": as it is), ARGV[8] its burst
-- list: ARGV[4] the last group of the previous page ("": from the start),
--       ARGV[5] most groups (1 to MAX_TAG_PAGE)
--
-- Touches: the group's hash, its line (read), the topic's rotation and
-- groups index, the levels index (set: a group that may hand out jobs
-- again goes into the rotation). Publishes: ready (set: when that let the
-- group's ready jobs out).
-- Helpers: now_us, invalid, G.figures, G.reopen, G.tidy, G.index_key,
-- G.key, LISTS.notify.
--
-- Returns get and set: { DONE, ready, reserved, held, limit (-1: none),
-- paused, head age in ms (-1: none ready), rate (-1: none), burst }; list:
-- { DONE, last group ('' when the index ends here), then per group: name
-- and the eight figures }.
-- Cost: get and set O(1) commands (set: a lowered limit or a pause takes
-- the group out of the rotation when a pop reaches it, not here); list
-- one ZRANGEBYLEX, O(log N + page), and an HMGET, a ZCARD, a ZRANGE and an
-- HGET per group.
--
-- Guarantees: set checks its arguments before its first write; a rate set
-- again keeps its bucket's level (at most the new burst); a raised
-- limit or a resume lets the group's ready jobs out at once (waiting
-- consumers hear of it); a lowered limit takes no lease back: no new job
-- of the group is handed out until fewer than the limit are reserved.
local op, topic = ARGV[2], ARGV[3]
local now_ms = math.floor(now_us() / 1000)
if op == 'get' then
  local reply = G.figures(topic, ARGV[4], now_ms)
  table.insert(reply, 1, DONE)
  return reply
end
if op == 'list' then
  local limit = tonumber(ARGV[5])
  if not limit or limit < 1 or limit > MAX_TAG_PAGE then
    return invalid('list takes a page size from 1 to ' .. MAX_TAG_PAGE)
  end
  local from = '-'
  if ARGV[4] ~= '' then from = '(' .. ARGV[4] end
  local names = redis.call('ZRANGEBYLEX', G.index_key(topic), from, '+', 'LIMIT', 0, limit)
  local last = ''
  if #names == limit then last = names[#names] end
  local reply = { DONE, last }
  for _, g in ipairs(names) do
    reply[#reply + 1] = g
    for _, v in ipairs(G.figures(topic, g, now_ms)) do reply[#reply + 1] = v end
  end
  return reply
end
if op ~= 'set' then return invalid('group takes get, set or list') end
local group, limit, paused = ARGV[4], ARGV[5], ARGV[6]
if group == '' or #group > G.MAX_BYTES or string.find(group, '%c') then
  return invalid('group must be 1 to ' .. G.MAX_BYTES .. ' bytes without control characters')
end
local n = tonumber(limit)
if limit ~= '' and limit ~= '-' and not (n and n >= 1 and n == math.floor(n)) then
  return invalid('concurrency must be a whole number of 1 or more')
end
if paused ~= '1' and paused ~= '0' and paused ~= '-' then
  return invalid('paused must be 1 or 0')
end
local rate, burst = ARGV[7], tonumber(ARGV[8])
local per_s = tonumber(rate)
if rate ~= '' and rate ~= '-' and not (per_s and per_s > 0 and per_s <= 1000000
  and burst and burst >= 1 and burst <= 1000000 and burst == math.floor(burst)) then
  return invalid('rate must be above 0 and at most 1000000 a second, burst 1 to 1000000')
end
local gkey = G.key(topic, group)
if n then
  redis.call('HSET', gkey, G.LIMIT, n)
elseif limit == '' then
  redis.call('HDEL', gkey, G.LIMIT)
end
if paused == '1' then
  redis.call('HSET', gkey, G.PAUSED, 1)
elseif paused == '0' then
  redis.call('HDEL', gkey, G.PAUSED)
end
if rate ~= '-' then
  -- A first rate starts with a full bucket; a changed one keeps the
  -- bucket's level (refilled at the old rate until now, capped at the new
  -- burst), so a PUT again refills nothing. A group waiting for a token of
  -- the old rate goes back to the rotation (it may go now).
  if per_s then
    local m = redis.call('HMGET', gkey, G.LIMIT, G.PAUSED, G.USED, G.RATE_PER_S, G.RATE_BURST,
      G.RATE_TOKENS, G.RATE_AT)
    local tokens = burst * 1000
    if m[4] then tokens = math.min(tokens, G.tokens(m, now_ms)) end
    redis.call('HSET', gkey, G.RATE_PER_S, per_s, G.RATE_BURST, burst, G.RATE_TOKENS, tokens,
      G.RATE_AT, now_ms)
  else
    redis.call('HDEL', gkey, G.RATE_PER_S, G.RATE_BURST, G.RATE_TOKENS, G.RATE_AT)
  end
  if redis.call('ZREM', G.wait_key(topic), group) == 1 then
    redis.call('LPUSH', G.turns_key(topic), group)
    redis.call('ZADD', P .. LEVELS_KEY .. topic, G.LEVEL, G.LEVEL)
    LISTS.notify(topic, 1)
  end
end
-- A group with settings is listed even with no jobs.
if redis.call('HEXISTS', gkey, G.LIMIT) == 1 or redis.call('HEXISTS', gkey, G.PAUSED) == 1
  or redis.call('HEXISTS', gkey, G.RATE_PER_S) == 1 then
  redis.call('ZADD', G.index_key(topic), 0, group)
end
if G.reopen(topic, group) then LISTS.notify(topic, 1) end
G.tidy(topic, group)
local reply = G.figures(topic, group, now_ms)
table.insert(reply, 1, DONE)
return reply
