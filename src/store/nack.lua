-- nack.lua: a consumer reports that its attempt failed.
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  dead-letter retention: most dead jobs per topic
-- ARGV[3]  dead-letter retention: longest age, ms
-- ARGV[4]  id    ARGV[5] lease token
-- ARGV[6]  delay override in ms before the next attempt, or -1 for the
--          job's retry schedule
-- ARGV[7]  error text (one line)
-- ARGV[8]  the waits of a job with no retry policy (ms, comma-separated:
--          the built-in backoff), used when no override is given
--
-- Touches: job hash, schedule, trigger key, the topic's ready list or dead
-- set, count hash. Publishes: ready or wake.
-- Helpers: RETRIES.fail (and what it uses), LISTS.notify, H.wake_if_head.
-- Groups: in RETRIES.fail: a grouped job's slot back (G.free) and, if
-- ready again, into its group's line (G.push); a plain job: one field more
-- in its HMGET.
--
-- Returns { status, state, due_ms, topic }: DONE, MISSING (no job, or a
-- finished job's record), STALE (the token is not the job's current
-- lease; nothing changed) or CANCELLED (the job was cancelled under this
-- lease: no attempt counted, no retry).
--
-- Guarantees: only the current lease holder can fail an attempt; the job
-- then goes exactly where its retry policy says (see RETRIES.fail in
-- lib/retries.lua), atomically, with the error and attempt kept in its
-- history.
local id = ARGV[4]
local f = redis.call('HMGET', job_key(id), STATE, TOPIC, TOKEN, CANCELLED_AT)
if f[4] and f[3] == ARGV[5] then return { CANCELLED, '', 0, f[2] } end
-- A finished job's kept record is no job to fail.
if not f[2] or f[1] == FINISHED then return { MISSING, '', 0, '' } end
if f[1] ~= RESERVED or f[3] ~= ARGV[5] then return { STALE, state_of(f[1]), 0, f[2] } end
local override = tonumber(ARGV[6])
if override < 0 then override = nil end
local state, due = RETRIES.fail(id, f[2], math.ceil(now_us() / 1000), ARGV[7],
  override, tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[8])
EVENT.failed(id, f[2], state)
if state == READY then LISTS.notify(f[2], 1) end
if state == DELAYED then H.wake_if_head(id, due) end
return { DONE, state, due, f[2] }
