-- lib/finished.lua: finished jobs' kept records and their index.
-- Fills: RECORD (declared in lib/call.lua).

-- Finished jobs' kept records (keep_finished). A topic's index
-- FINISHED_KEY .. topic holds id -> MAX_TIME_MS - finished time, so its
-- score order is newest first (the order listings page in); the count
-- "finished:<topic>" is the index's size, changed only by what ZADD and
-- ZREM report. The record's hash expires when the window ends, so it
-- never outlives it even when no trim runs.
function RECORD.key(topic) return P .. FINISHED_KEY .. topic end

-- Whether `id`'s hash is the kept record of a job finished in `topic` (an
-- index entry may outlive its record: the hash expired, then maybe a new
-- job took the id).
function RECORD.is(id, topic)
  local f = redis.call('HMGET', job_key(id), STATE, TOPIC)
  return f[1] == FINISHED and f[2] == topic
end

-- Drops at most `limit` entries of a topic's index, oldest first: those
-- older than keep_ms (0: none by age; their record too), then those whose
-- record is gone (expired, or replaced by a new job), stopping at the first
-- that is still there. Costs O(log N) per entry looked at, at most `limit`
-- entries and one more. Returns how many were dropped.
function RECORD.trim(topic, now_ms, keep_ms, limit)
  local key = RECORD.key(topic)
  local drop = {}
  if keep_ms > 0 then
    -- finished at or before now - keep_ms: score at or above this.
    drop = redis.call('ZREVRANGEBYSCORE', key, '+inf', MAX_TIME_MS - now_ms + keep_ms,
      'LIMIT', 0, limit)
  end
  local aged = #drop
  for i = aged, limit - 1 do
    local id = redis.call('ZREVRANGE', key, i, i)[1]
    if not id or RECORD.is(id, topic) then break end
    drop[#drop + 1] = id
  end
  for k, id in ipairs(drop) do
    redis.call('ZREM', key, id)
    -- A record carries no tags nor dedup: only its keys go.
    if k <= aged and RECORD.is(id, topic) then JOB.forget(id) end
  end
  if #drop > 0 then COUNT.add(FINISHED, topic, -#drop) end
  return #drop
end

-- Replaces the job `id` (already detached from its state's structures) by
-- its finished record, kept for keep_ms: topic, ttr, due time, attempts
-- (the last is the one that finished it), retry policy, last error, the
-- last progress reported, when it finished and `result` (JSON; nil: none).
-- The body, lease and history go: a record costs the same whatever the
-- body was. `unlisted`: the record of a result in a topic that keeps none
-- (kept for the result retention): not in the index nor counted, so
-- listings and counts are those without it; it ends by expiring (or a
-- delete: JOB.detach finds no index entry and counts nothing). The job's log (if
-- any) stays as long as the record: one deadline, now_ms + keep_ms, set by
-- PEXPIREAT (a PEXPIRE in a script reads the moving clock on Redis 7.0, so
-- two of them can end a millisecond apart, the log outliving its record).
function RECORD.keep(id, topic, now_ms, keep_ms, result, unlisted)
  local job = job_key(id)
  local kept = { TTR, DUE, ATTEMPTS, RETRY, MAX, ERR, PROGRESS }
  local f = redis.call('HMGET', job, unpack(kept))
  local fields = { TOPIC, topic, STATE, FINISHED, FINISHED_AT, now_ms }
  for i, name in ipairs(kept) do
    if f[i] then fields[#fields + 1] = name; fields[#fields + 1] = f[i] end
  end
  if result then fields[#fields + 1] = RESULT; fields[#fields + 1] = result end
  -- A fresh hash: small fields only (a result aside), so Redis keeps it
  -- compact (listpack) even if the job's body had made it a hashtable.
  redis.call('DEL', job)
  redis.call('HSET', job, unpack(fields))
  local deadline = now_ms + keep_ms
  -- The record's keys are the job's (JOB.keys): each ends at the deadline.
  for _, key in ipairs(JOB.keys(id, {})) do redis.call('PEXPIREAT', key, deadline) end
  if unlisted then return end
  if redis.call('ZADD', RECORD.key(topic), MAX_TIME_MS - now_ms, id) == 1 then
    COUNT.add(FINISHED, topic, 1)
  end
end
