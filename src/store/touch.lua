-- touch.lua: extend a lease (the consumer needs more time).
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  id    ARGV[3] lease token
-- ARGV[4]  new lease length in ms from now, or -1 for the job's ttr
--
-- Touches: job hash, schedule (the lease end), the partition leader's term
-- expiry (see H.new_head). Publishes: wake (when the lease end is the new
-- earliest). Helpers: now_us, JOB.lease, H.wake_if_head.
--
-- Returns { status, lease_until_ms }: DONE, MISSING (no job, or a
-- finished job's record), STALE (the token is not the job's current
-- lease; nothing changed) or CANCELLED (the job was cancelled under this
-- lease; nothing changed).
--
-- Guarantees: only the current lease holder can extend it; the lease then
-- ends at now + length (Redis time), and not before.
local id = ARGV[2]
local job = job_key(id)
local f = redis.call('HMGET', job, STATE, TOKEN, TTR, TOPIC, CANCELLED_AT)
if f[5] and f[2] == ARGV[3] then return { CANCELLED, 0 } end
if not f[4] or f[1] == FINISHED then return { MISSING, 0 } end
if f[1] ~= RESERVED or f[2] ~= ARGV[3] then return { STALE, 0 } end
local length = tonumber(ARGV[4])
if length < 0 then length = tonumber(f[3]) end
local lease_until = math.ceil(now_us() / 1000) + length
redis.call('HSET', job, LEASE, lease_until)
JOB.lease(id, lease_until)
-- A shorter lease may be the schedule's earliest now: the dispatcher, idle
-- until its old earliest, hears of it.
H.wake_if_head(id, lease_until)
return { DONE, lease_until }
