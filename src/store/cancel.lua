-- cancel.lua: cancel a job, whatever its state. One that runs (reserved)
-- stops being its holder's: its lease ends now, and what is left of it
-- answers the holder's touch, nack and finish "cancelled" until the lease
-- would have ended (and `grace` after), so that a consumer stops its work
-- and does not retry it.
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  id
-- ARGV[3]  grace, ms: how much longer than the lease what is left of a
--          running job stays
--
-- Touches: the job hash and its log, whichever of trigger key, schedule, ready list or
-- dead set holds it, its tags' indexes, its simple dedup record, the count
-- hash. Events: cancelled. Helpers: now_us, JOB.detach, JOB.forget (its
-- tags' entries, its dedup record, its keys), EVENT.emit, state_of.
-- Groups: as remove.lua (G.free or the line's ZREM); a plain job: one
-- field more in its HMGET.
-- Batches: a job of a batch leaves a note for its home (BATCH.left,
-- deleted); a job of none: one field more in its HMGET.
--
-- Returns { status, state }: DONE and the state the job was in, or
-- MISSING (no job; a finished job's record is none either).
--
-- Guarantees: the job leaves every structure at once and is never handed
-- out again; a running job's lease end leaves the schedule, so the lease
-- does not run out into a retry. What is left is a finished job's record
-- (no body, not counted, not listed), so a push of the same id creates a
-- new job.
local id = ARGV[2]
local grace = tonumber(ARGV[3])
if not grace or grace < 0 then return invalid('cancel takes a grace in ms') end
local job = job_key(id)
local f = redis.call('HMGET', job, STATE, TOPIC, TOKEN, DEDUP, TAGS, LEASE, GROUP, BATCH.FIELD)
if not f[2] or f[1] == FINISHED then return { MISSING, '' } end
local state, topic = state_of(f[1]), f[2]
if EVENTS > 0 then EVENT.emit(EV_CANCELLED, id, topic) end
JOB.detach(id, state, topic, f[7])
JOB.forget(id, f[5], f[4], nil, job)
-- Batches: a note for the batch's home (nothing for a job of none).
BATCH.left(id, f[8], BATCH.O_DELETED)
if state == RESERVED then
  local now_ms = math.floor(now_us() / 1000)
  local left = math.max((tonumber(f[6]) or now_ms) - now_ms, 0) + grace
  redis.call('HSET', job, TOPIC, topic, STATE, FINISHED, TOKEN, f[3], CANCELLED_AT, now_ms)
  redis.call('PEXPIRE', job, math.max(left, 1))
end
return { DONE, state }
