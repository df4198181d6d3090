-- release.lua: give back a job whose reservation never reached a consumer
-- (its caller went away or stopped waiting, or its lease had ended by the
-- time the reply arrived).
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  id
-- ARGV[3]  lease token of the reservation to undo
--
-- Touches: job hash, schedule (the lease end), the topic's ready list,
-- count hash. Publishes: ready. Events:
-- released, per job.
-- Helpers: JOB.unreserve.
-- Groups: a grouped job's slot back (G.free) and to the head of its
-- group's line (G.push); a plain job: one field more in its HMGET.
--
-- Returns { status }: DONE (released) or STALE (finished, replaced or
-- leased again: nothing to do).
--
-- Guarantees: only the named lease is undone; the job goes back to the head
-- of its ready list (it was first in line) with the attempt uncounted, and
-- waiting consumers are woken.
local id = ARGV[2]
local job = job_key(id)
local f = redis.call('HMGET', job, STATE, TOPIC, TOKEN, PRIORITY, GROUP)
if f[1] ~= RESERVED or f[3] ~= ARGV[3] then return { STALE } end
JOB.unreserve(id, f[2], LISTS.level_of(f[4]), f[5])
return { DONE }
