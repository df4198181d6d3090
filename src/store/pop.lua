-- pop.lua: reserve ready jobs for a consumer under a time-to-run lease.
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  most jobs to reserve
-- ARGV[3]  most body bytes to return: once the bodies reserved reach it, no
--          more are taken (the first job is always taken, whatever its size)
-- ARGV[4]  nonce: random, one per call; tokens are "<nonce>.<n>"
-- ARGV[5..] topics, tried in the order given
--
-- Touches: the topics' ready lists, job hashes, schedule (lease ends),
-- count hash. Publishes: nothing.
-- Helpers: now_us, lease, move_count.
--
-- Returns { DONE, now_us, then per job: id, topic, body, token, due_ms,
--           attempts, lease_until_ms }.
--
-- Guarantees: a job is taken from its ready list and leased in one step, so
-- it is never handed to two consumers at once. The lease's end goes into
-- the schedule (no trigger key: the sweep is the clock), so a consumer that
-- dies without finishing counts as a failed attempt after ttr, not before.
-- Every delivery carries a new token (the caller's random nonce and the
-- job's place in the reply: no counter in Redis, so a failover that loses
-- recent writes cannot re-issue a token someone holds); finish, nack and
-- touch with an older token are refused. The reply is bounded in jobs and
-- in bytes, so it reaches its caller well within the caller's timeout.
local now = now_us()
local lease_from = math.ceil(now / 1000)
local want = tonumber(ARGV[2])
local max_bytes = tonumber(ARGV[3])
local bytes = 0

local reply = { DONE, now }
local got = 0
local nonce = ARGV[4]
for i = 5, #ARGV do
  local topic = ARGV[i]
  local list = ready_key(topic)
  while got < want and bytes < max_bytes do
    local id = redis.call('RPOP', list)
    if not id then break end
    local job = job_key(id)
    local f = redis.call('HMGET', job, STATE, TOPIC, BODY, TTR, DUE, ATTEMPTS)
    -- An entry whose job is no longer ready here is stale: skip it.
    if f[1] == READY and f[2] == topic then
      local token = nonce .. '.' .. got
      local lease_until = lease_from + tonumber(f[4])
      local attempts = (tonumber(f[6]) or 0) + 1
      redis.call('HSET', job, STATE, RESERVED, TOKEN, token, LEASE, lease_until,
        ATTEMPTS, attempts)
      lease(id, lease_until)
      move_count(topic, READY, RESERVED)
      reply[#reply + 1] = id
      reply[#reply + 1] = topic
      reply[#reply + 1] = f[3]
      reply[#reply + 1] = tostring(token)
      reply[#reply + 1] = f[5]
      reply[#reply + 1] = attempts
      reply[#reply + 1] = lease_until
      got = got + 1
      bytes = bytes + #f[3]
    end
  end
  if got >= want or bytes >= max_bytes then break end
end
return reply
