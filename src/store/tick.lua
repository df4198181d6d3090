-- tick.lua: one tick of a recurring schedule: push its job, exactly once.
--
-- KEYS[1]  schedule zset   {p}:schedule (the partition of "{name}")
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  schedule name     ARGV[3] its version (from recur_put.lua)
-- ARGV[4]  tick, Unix ms: the job's due time
-- ARGV[5]  "push": push the tick's job; "advance": only mark the tick done
--          (a missed tick that is skipped)
-- ARGV[6]  id of a job to drop if it is still delayed ("" = none): a
--          missed tick's job, in skip mode
-- ARGV[7]  job id   ARGV[8] topic   ARGV[9] body   ARGV[10] ttr ms
-- ARGV[11] retry intervals   ARGV[12] max attempts
--
-- Touches: the schedule's hash {p}:recur:<name>; with push, what push.lua
-- touches. Publishes: as push.lua.
-- Helpers: due_time, invalid, upsert, wake_if_head, drop_if_delayed.
--
-- Returns { STALE } (the schedule was changed or deleted: nothing done),
-- { KEPT } (this tick, or a later one, is done already), or push.lua's
-- reply for its one job ({ DONE, 0, 0 } for advance).
--
-- Guarantees: the schedule's last tick only grows, and a tick's job is
-- pushed in the same step that records the tick, so however many delayq
-- instances tick at once, each tick is pushed once. The job is due at the
-- tick, so the engine never hands it out before its time.
local rk = P .. RECUR_KEY .. ARGV[2]
local st = redis.call('HMGET', rk, RECUR_VERSION, RECUR_LAST)
if st[1] ~= ARGV[3] then return { STALE } end
local tick = tonumber(ARGV[4])
if tick <= (tonumber(st[2]) or 0) then return { KEPT } end
local due, bad = due_time('0', ARGV[4])
if not due then return invalid(bad) end
drop_if_delayed(ARGV[6])
redis.call('HSET', rk, RECUR_LAST, tick)
if ARGV[5] ~= 'push' then return { DONE, 0, 0 } end
redis.call('HSET', rk, RECUR_PENDING, ARGV[7])
local status, due_ms, put = upsert(ARGV[7], ARGV[8], ARGV[9], ARGV[10], due,
  ARGV[11], ARGV[12], 'keep')
return { status, due_ms, put and wake_if_head(ARGV[7], due_ms) or 0 }
