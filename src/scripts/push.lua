-- push.lua: create a job, or replace the job with the same id, and schedule it.
--
-- KEYS[1]  job hash        {p}:job:<id>
-- KEYS[2]  schedule zset   {p}:schedule   (member id, score = due time in ms)
-- KEYS[3]  trigger key     {p}:t:<id>     (expires at the due time)
-- ARGV[1]  key prefix      "{p}:"  (to name the old topic's ready list)
-- ARGV[2]  id   ARGV[3] topic   ARGV[4] body   ARGV[5] ttr in ms
-- ARGV[6]  delay in ms (from Redis TIME at the moment the script runs)
--
-- Returns { due_ms, replaced (0|1), new_head (0|1) }.
--
-- Guarantees: one atomic upsert. An existing job with this id is replaced in
-- place (taken out of its ready list if it was ready, its lease voided if it
-- was reserved); there is never a second copy. The due time comes from the
-- Redis clock, rounded up to the next millisecond, so the job can never fire
-- before `delay` has passed. When the job becomes the earliest in the
-- schedule, a wake-up is published so every delayq instance re-arms its timer.
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local due = math.ceil(now_us / 1000) + tonumber(ARGV[6])

local old = redis.call('HMGET', KEYS[1], 'state', 'topic')
local replaced = 0
if old[1] then
  replaced = 1
  if old[1] == 'ready' then
    redis.call('LREM', ARGV[1] .. 'ready:' .. old[2], 1, ARGV[2])
  end
end

-- HSET (not DEL + HSET) keeps nothing of the old job that matters: every
-- field is rewritten, and the lease token is cleared so a stale finish fails.
redis.call('HSET', KEYS[1],
  'topic', ARGV[3], 'body', ARGV[4], 'ttr', ARGV[5], 'due', due,
  'state', 'delayed', 'attempts', 0, 'token', '')
redis.call('ZADD', KEYS[2], due, ARGV[2])
redis.call('SET', KEYS[3], '', 'PXAT', due)

local new_head = 0
local head = redis.call('ZRANGE', KEYS[2], 0, 0)
if head[1] == ARGV[2] then
  new_head = 1
  redis.call('PUBLISH', ARGV[1] .. 'wake', due)
end
return { due, replaced, new_head }
