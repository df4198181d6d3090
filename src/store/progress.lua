-- progress.lua: a running job's holder reports how far it got.
--
-- KEYS[1]  schedule zset   {p}:schedule (the partition's slot; not touched)
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  id    ARGV[3] lease token
-- ARGV[4]  the progress, JSON text of 1 to MAX_PROGRESS_BYTES bytes (the
--          caller checked it is JSON)
--
-- Touches: the job hash (its PROGRESS field). Events: progress (the value
-- as `e`). Helpers: invalid, RUNNING.fence, EVENT.emit.
-- Cost: O(1): one HMGET, one HSET.
--
-- Returns { status }: DONE, MISSING (no job, or a finished job's record),
-- STALE (the token is not the job's current lease, or the lease ended) or
-- CANCELLED (the job was cancelled under this lease). Only DONE wrote.
--
-- Guarantees: only the current lease holder sets it; the value replaces
-- the last one and stays across attempts (a retry sees what the last
-- attempt reported) and in a finished job's kept record.
local id, token, value = ARGV[2], ARGV[3], ARGV[4]
if not value or #value == 0 or #value > MAX_PROGRESS_BYTES then
  return invalid('progress takes 1 to ' .. MAX_PROGRESS_BYTES .. ' bytes of JSON')
end
local status, topic = RUNNING.fence(id, token)
if status ~= DONE then return { status } end
redis.call('HSET', job_key(id), PROGRESS, value)
if EVENTS > 0 then EVENT.emit(EV_PROGRESS, id, topic, nil, nil, value) end
return { DONE }
