-- recur_put.lua: create, replace or delete a recurring schedule's state.
--
-- KEYS[1]  schedule zset   {p}:schedule (the partition of "{name}")
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  schedule name
-- ARGV[3]  "put", "delete", "pause" or "resume"
-- ARGV[4]  the definition (JSON, opaque here)   ARGV[5] its version
--
-- Touches: {p}:recur:<name> and its entry in the due index {p}:recur_due
-- (a put schedule is due at once: its first tick is pushed by the next
-- look); the job of the schedule's next tick, if still delayed.
-- Publishes: wake, "recur" (a put or resume: the recurring loops, idle
-- while no schedule is due, look now).
-- Helpers: now_us, JOB.drop_if_delayed.
--
-- Pause: the schedule leaves the due index (parked at MAX_TIME_MS: no
-- look reads it, and tick.lua refuses it meanwhile) and its next tick's job
-- is dropped if still delayed. Resume (of a paused schedule only) counts
-- ticks from now, like a put: the ticks missed while paused never fire.
-- A put keeps a pause (it is state, not part of the definition).
--
-- Returns { DONE } (or { MISSING } for an unknown name; nothing changed).
--
-- Guarantees: the next tick pushed under the old definition is dropped in
-- the same step (unless it was already handed over), and the new version
-- counts ticks from now: a changed schedule never fires by its old rule.
local rk = P .. RECUR_KEY .. ARGV[2]
local pending = redis.call('HGET', rk, RECUR_PENDING)
if ARGV[3] == 'delete' then
  if redis.call('EXISTS', rk) == 0 then return { MISSING } end
  JOB.drop_if_delayed(pending or '')
  redis.call('DEL', rk)
  redis.call('ZREM', P .. RECUR_DUE_KEY, ARGV[2])
  return { DONE }
end
local now = math.floor(now_us() / 1000)
if ARGV[3] == 'pause' or ARGV[3] == 'resume' then
  if redis.call('EXISTS', rk) == 0 then return { MISSING } end
  local paused = redis.call('HGET', rk, RECUR_PAUSED)
  if ARGV[3] == 'pause' then
    if not paused then
      JOB.drop_if_delayed(pending or '')
      redis.call('HSET', rk, RECUR_PAUSED, now, RECUR_PENDING, '')
      redis.call('ZADD', P .. RECUR_DUE_KEY, MAX_TIME_MS, ARGV[2])
    end
  elseif paused then
    redis.call('HDEL', rk, RECUR_PAUSED)
    redis.call('HSET', rk, RECUR_LAST, now, RECUR_PENDING, '')
    redis.call('ZADD', P .. RECUR_DUE_KEY, now, ARGV[2])
    redis.call('PUBLISH', P .. WAKE_CHANNEL, 'recur')
  end
  return { DONE }
end
local paused = redis.call('HGET', rk, RECUR_PAUSED)
JOB.drop_if_delayed(pending or '')
redis.call('DEL', rk)
redis.call('HSET', rk, RECUR_DEF, ARGV[4], RECUR_VERSION, ARGV[5], RECUR_LAST, now)
if paused then
  redis.call('HSET', rk, RECUR_PAUSED, paused)
  redis.call('ZADD', P .. RECUR_DUE_KEY, MAX_TIME_MS, ARGV[2])
else
  redis.call('ZADD', P .. RECUR_DUE_KEY, now, ARGV[2])
  redis.call('PUBLISH', P .. WAKE_CHANNEL, 'recur')
end
return { DONE }
