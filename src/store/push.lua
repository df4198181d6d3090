-- push.lua: create a job, or replace (or keep) the job with the same id.
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  id     ARGV[3] topic     ARGV[4] body     ARGV[5] ttr ms
-- ARGV[6]  delay ms from now (Redis TIME), used when ARGV[7] is -1
-- ARGV[7]  absolute due time, Unix ms, or -1
-- ARGV[8]  retry intervals in ms, comma-separated ("" = none)
-- ARGV[9]  max attempts (0 = no limit beyond the intervals)
-- ARGV[10] "replace" or "keep": what to do when the id exists
--
-- Touches: job hash, trigger key, schedule, count hash; an existing job's
-- ready list or dead set. Publishes: wake (when it is the new earliest).
-- Helpers: due_time, detach, schedule, move_count, wake_if_head.
--
-- Returns { status, due_ms, new_head }: DONE (created), REPLACED, or KEPT
-- (the id exists and mode is keep: nothing changed, due_ms is its due time).
-- Errors: DQINVALID for a due time past MAX_TIME_MS, before any write.
--
-- Guarantees: one atomic upsert. An existing job is taken out of wherever
-- it is (schedule, ready list, lease, dead set) and rewritten in place, so
-- there is never a second copy, and a stale lease can no longer finish it.
-- The due time is never before Redis time (a past absolute time means now).
local id, topic = ARGV[2], ARGV[3]
local job = job_key(id)
local due, bad = due_time(ARGV[6], ARGV[7])
if not due then return bad end

local old = redis.call('HMGET', job, STATE, TOPIC, DUE)
local status = DONE
if old[2] then
  if ARGV[10] == 'keep' then
    return { KEPT, tonumber(old[3] or redis.call('ZSCORE', SCHEDULE, id)), 0 }
  end
  status = REPLACED
  detach(id, state_of(old[1]), old[2])
  redis.call('DEL', job)
end

redis.call('HSET', job, TOPIC, topic, BODY, ARGV[4], TTR, ARGV[5])
if ARGV[8] ~= '' then redis.call('HSET', job, RETRY, ARGV[8]) end
if ARGV[9] ~= '0' then redis.call('HSET', job, MAX, ARGV[9]) end
schedule(id, due)
move_count(topic, nil, DELAYED)
return { status, due, wake_if_head(id, due) }
