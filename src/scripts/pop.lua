-- pop.lua: reserve ready jobs for a consumer under a time-to-run lease.
--
-- KEYS[1]  schedule zset   {p}:schedule
-- KEYS[2]  lease sequence  {p}:seq       (source of unique lease tokens)
-- ARGV[1]  key prefix      "{p}:"
-- ARGV[2]  most jobs to reserve
-- ARGV[3..] topics, tried in the order given
--
-- Returns { now_us (Redis TIME in microseconds), then per job: id, topic, body, token, due_ms, attempts }.
--
-- Guarantees: a job is taken from its ready list and leased in one step, so
-- it is never handed to two consumers at once. Its lease expiry goes into the
-- schedule (and a trigger key), so a consumer that dies without finishing
-- gets the job re-delivered after ttr, not before. Every delivery carries a
-- new token; a finish with an older token is refused.
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local lease_from = math.ceil(now_us / 1000)
local prefix = ARGV[1]
local want = tonumber(ARGV[2])

local reply = { now_us }
local got = 0
for i = 3, #ARGV do
  local topic = ARGV[i]
  local list = prefix .. 'ready:' .. topic
  while got < want do
    local id = redis.call('RPOP', list)
    if not id then break end
    local job = prefix .. 'job:' .. id
    local f = redis.call('HMGET', job, 'state', 'topic', 'body', 'ttr', 'due')
    -- An entry whose job is no longer ready here is stale: skip it.
    if f[1] == 'ready' and f[2] == topic then
      local token = redis.call('INCR', KEYS[2])
      local lease_until = lease_from + tonumber(f[4])
      redis.call('HSET', job, 'state', 'reserved', 'token', token)
      local attempts = redis.call('HINCRBY', job, 'attempts', 1)
      redis.call('ZADD', KEYS[1], lease_until, id)
      redis.call('SET', prefix .. 't:' .. id, '', 'PXAT', lease_until)
      reply[#reply + 1] = id
      reply[#reply + 1] = topic
      reply[#reply + 1] = f[3]
      reply[#reply + 1] = tostring(token)
      reply[#reply + 1] = f[5]
      reply[#reply + 1] = attempts
      got = got + 1
    end
  end
  if got >= want then break end
end
return reply
