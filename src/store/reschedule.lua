-- reschedule.lua: give an existing job a new due time (and maybe a new body).
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  id
-- ARGV[3]  delay ms from now, used when ARGV[4] is -1
-- ARGV[4]  absolute due time, Unix ms, or -1
-- ARGV[5]  "1" to replace the body with ARGV[6], "0" to keep it
--
-- Touches: job hash, trigger key, schedule, and the ready list or dead set
-- it leaves; count hash. Publishes: wake (when it is the new earliest).
-- Events: rescheduled.
-- Helpers: CALL.due_time, invalid, BODIES.set, JOB.delay, H.wake_if_head.
-- Groups: a ready or reserved job's group is read (one HGET) to leave its
-- group's line or give its slot back.
--
-- Returns { status, due_ms, new_head }: DONE or MISSING (no job, or a
-- finished job's record).
-- Errors: DQINVALID for a due time past MAX_TIME_MS, before any write.
--
-- Guarantees: from any state the job becomes delayed until the new due
-- time, atomically; a lease it had is void. Topic, ttr and retry policy stay;
-- so do attempts, except that a dead job starts its schedule afresh.
local id = ARGV[2]
local job = job_key(id)
local f = redis.call('HMGET', job, STATE, TOPIC)
-- A finished job's kept record is no job: push its id again instead.
if not f[2] or f[1] == FINISHED then return { MISSING, 0, 0 } end
local due, bad = CALL.due_time(ARGV[3], ARGV[4])
if not due then return invalid(bad) end
if ARGV[5] == '1' then BODIES.set(job, ARGV[6]) end
JOB.delay(id, state_of(f[1]), f[2], due)
return { DONE, due, H.wake_if_head(id, due) }
