-- recur_put.lua: create, replace or delete a recurring schedule's state.
--
-- KEYS[1]  schedule zset   {p}:schedule (the partition of "{name}")
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  schedule name
-- ARGV[3]  "put" or "delete"
-- ARGV[4]  the definition (JSON, opaque here)   ARGV[5] its version
--
-- Touches: {p}:recur:<name> and its entry in the due index {p}:recur_due
-- (a put schedule is due at once: its first tick is pushed by the next
-- look); the job of the schedule's next tick, if still delayed.
-- Publishes: nothing.
-- Helpers: now_us, drop_if_delayed.
--
-- Returns { DONE } (or { MISSING } for delete of an unknown name).
--
-- Guarantees: the next tick pushed under the old definition is dropped in
-- the same step (unless it was already handed over), and the new version
-- counts ticks from now: a changed schedule never fires by its old rule.
local rk = P .. RECUR_KEY .. ARGV[2]
local pending = redis.call('HGET', rk, RECUR_PENDING)
if ARGV[3] == 'delete' then
  if redis.call('EXISTS', rk) == 0 then return { MISSING } end
  drop_if_delayed(pending or '')
  redis.call('DEL', rk)
  redis.call('ZREM', P .. RECUR_DUE_KEY, ARGV[2])
  return { DONE }
end
drop_if_delayed(pending or '')
redis.call('DEL', rk)
local now = math.floor(now_us() / 1000)
redis.call('HSET', rk, RECUR_DEF, ARGV[4], RECUR_VERSION, ARGV[5], RECUR_LAST, now)
redis.call('ZADD', P .. RECUR_DUE_KEY, now, ARGV[2])
return { DONE }
