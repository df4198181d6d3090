-- lib/job.lua: a job's own keys, and the ends that forget it.
-- Fills: JOB (declared in lib/call.lua).

-- A job's own keys: its hash (the body is in it, whole or in pieces:
-- lib/body.lua) and its log (log.lua). This is the one list of them: a new
-- per-job key goes here, and every way a job ends (JOB.forget) or is kept
-- as a finished record (RECORD.keep) follows it.
-- Not here, and why: its trigger key belongs to its delayed state, as its
-- schedule entries do (JOB.detach takes it out with them: JOB.unschedule;
-- the sweep deletes it when it moves the job); its place in a ready list,
-- lease, dead set, finished index or group line is its state's, taken out
-- by JOB.detach; its tags' index entries and its simple dedup record are
-- named by fields of its hash, so JOB.unindex drops them given those.
-- Returns the keys, or with `into` (a list) adds them to it. `job`: the
-- hash's key, if the caller has it (a string made again costs a finish
-- of many about 2% more).
function JOB.keys(id, into, job)
  local job, log = job or P .. JOB_KEY .. id, P .. LOG_KEY .. id
  if not into then return job, log end
  into[#into + 1] = job
  into[#into + 1] = log
  return into
end

-- Drops what names job `id` from elsewhere: its entries in its tags'
-- indexes (`tags`, its TAGS field) and its simple dedup record (`dedup`,
-- its DEDUP field); nil for either costs nothing. A finished record keeps
-- neither, so a finish does this whether or not it keeps one.
function JOB.unindex(id, tags, dedup)
  TAG.untag(id, tags)
  DEDUPS.release(id, dedup)
end

-- Forgets job `id` for good: JOB.unindex, then its own keys (JOB.keys;
-- `job` as there) deleted, or added to `dels` (a list) for the caller to
-- delete in one DEL with others. The caller has taken it out of its
-- state's structure (JOB.detach) first. The one way a job's keys go: a delete (JOB.delete),
-- a replace (JOB.upsert), a cancel, a finish without a record, a finished
-- record's end (RECORD.trim; it carries no tags nor dedup).
function JOB.forget(id, tags, dedup, dels, job)
  -- Most jobs have neither: no call then (a finish of many is hot).
  if tags or dedup then JOB.unindex(id, tags, dedup) end
  if dels then
    JOB.keys(id, dels, job)
  else
    redis.call('DEL', JOB.keys(id, nil, job))
  end
end

-- Deletes job `id` (in `state`, of `topic`; `tags` and `dedup` its TAGS
-- and DEDUP fields; `group` its GROUP field, nil: read if needed; `batch`
-- its BATCH.FIELD, whose home hears of it: BATCH.left) for
-- good, keeping no record: out of the structure its state keeps it in,
-- then forgotten; the event "deleted". The one way a job is deleted:
-- DELETE, a tag cancel, a dead-letter purge, dead-letter retention, and a
-- recurring schedule's pending tick dropped (JOB.drop_if_delayed).
function JOB.delete(id, state, topic, tags, dedup, group, batch)
  -- A finished job's kept record going is no change of a job.
  if EVENTS > 0 and state ~= FINISHED then EVENT.emit(EV_DELETED, id, topic) end
  if batch and state ~= FINISHED then BATCH.left(id, batch, BATCH.O_DELETED) end
  JOB.detach(id, state, topic, group)
  JOB.forget(id, tags, dedup)
end

-- Removes `id` if it is still delayed (never handed over). 1 if removed.
function JOB.drop_if_delayed(id)
  if id == '' then return 0 end
  local f = redis.call('HMGET', job_key(id), STATE, TOPIC, TAGS, DEDUP, BATCH.FIELD)
  if not f[2] or f[1] then return 0 end
  JOB.delete(id, DELAYED, f[2], f[3], f[4], nil, f[5])
  return 1
end
