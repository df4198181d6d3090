-- lib/running.lua: what a running job's holder reports while its lease
-- lasts (progress.lua, log.lua).
-- Fills: RUNNING (declared in lib/call.lua).

-- The fence of a report under lease `token`: one read of `id`'s hash.
-- Returns DONE and the job's topic when `token` is the current lease and
-- it has not ended by Redis time; otherwise CANCELLED (cancelled under
-- this lease), MISSING (no job, or a finished job's record) or STALE
-- (another lease, none, or this one ended), as touch answers. It writes
-- nothing, so a refused report cannot create a hash for a job that is gone.
function RUNNING.fence(id, token)
  local f = redis.call('HMGET', job_key(id), STATE, TOKEN, TOPIC, CANCELLED_AT, LEASE)
  if f[4] and f[2] == token then return CANCELLED end
  if not f[3] or f[1] == FINISHED then return MISSING end
  if f[1] ~= RESERVED or f[2] ~= token or token == '' then return STALE end
  -- A lease past its end is about to be a failed attempt: its holder no
  -- longer speaks for the job.
  if (tonumber(f[5]) or 0) * 1000 <= now_us() then return STALE end
  return DONE, f[3]
end
