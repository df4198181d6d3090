-- lib/dedup.lua: dedup keys' records and the push that reads them.
-- Fills: DEDUPS (declared in lib/call.lua).

-- Dedup (issue 26): a push whose extra carries dedup = { key, mode,
-- window_ms, max_wait_ms } (checked by push.lua). The key's record
-- DEDUP_KEY .. key is the string "<mode><n> <id>": the job the key names,
-- the mode's letter (none for simple, T, D) and n:
--   simple   0; no TTL; deleted when the job finishes, is deleted or dies
--            (DEDUPS.release), and taken as stale if that job is gone,
--            finished or dead all the same;
--   throttle the winner's due time; PX window_ms from the winning push;
--   debounce the series' first push (ms, Redis time); PX window_ms,
--            renewed by every push of the series (the window slides).
-- A simple job carries the key in its hash (DEDUP) for its end to find
-- (DEDUPS.release, below, which JOB.delete and RETRIES.fail call).

-- A dedup key's record.
function DEDUPS.record(key) return P .. DEDUP_KEY .. key end

-- A simple-dedup job `id` (its DEDUP field: `key`, nil for any other job)
-- ended: its record goes if it still names it. Nothing for other jobs.
function DEDUPS.release(id, key)
  if not key then return end
  local rkey = DEDUPS.record(key)
  if redis.call('GET', rkey) == '0 ' .. id then redis.call('DEL', rkey) end
end

-- A record's mode ('simple', 'throttle' or 'debounce'), number and job id,
-- or nil. Throttle and debounce records start with their mode's letter (T,
-- D); a simple one is "0 <id>" (as older delayq wrote every mode: there a
-- number other than 0 is taken to be of the mode `mode` of the push that
-- reads it).
DEDUPS.LETTER = { throttle = 'T', debounce = 'D' }
function DEDUPS.parse(rec, mode)
  if not rec then return nil end
  local m, n, id = string.match(rec, '^([TD]?)(%d+) (.*)$')
  if not n then return nil end
  if m == DEDUPS.LETTER.throttle then
    m = 'throttle'
  elseif m == DEDUPS.LETTER.debounce then
    m = 'debounce'
  elseif n == '0' then
    m = 'simple'
  else
    m = mode
  end
  return m, tonumber(n), id
end

-- The job `id` if dedup still counts it (not gone, finished or dead):
-- state, due time, attempts. One HMGET (and a ZSCORE while delayed).
function DEDUPS.live(id)
  local f = redis.call('HMGET', job_key(id), STATE, TOPIC, DUE, ATTEMPTS)
  if not f[2] or f[1] == FINISHED or f[1] == DEAD then return nil end
  return state_of(f[1]), tonumber(f[3] or H.due(id, f[2])),
    tonumber(f[4]) or 0
end

-- upsert's work for a push with a dedup key. Returns status (upsert's, or
-- DEDUPLICATED, DEBOUNCED), due_ms, whether a job went into the schedule,
-- and the id of the job the push created or met. `at_once`: upsert's. Commands: a GET, then at
-- most one DEDUPS.live, one JOB.upsert, one SET (and one HSET for simple): O(1)
-- beyond what JOB.upsert costs.
function DEDUPS.push(id, topic, body, ttr, due, retry, max, mode, extra, at_once)
  local d = extra.dedup
  local rkey = DEDUPS.record(d.key)
  local m, n, old = DEDUPS.parse(redis.call('GET', rkey), d.mode)
  -- A record another mode wrote counts only while its job lives, and
  -- speaks only of that job: its number means something else.
  local foreign = old and m ~= d.mode
  if d.mode == 'throttle' then
    if old and not foreign then return DEDUPLICATED, n, false, old end
    if foreign then
      local state, at = DEDUPS.live(old)
      if state then return DEDUPLICATED, at or 0, false, old end
    end
    local status, at, put = JOB.upsert(id, topic, body, ttr, due, retry, max, mode, extra, at_once)
    if status ~= KEPT then
      redis.call('SET', rkey, DEDUPS.LETTER.throttle .. string.format('%.0f', at) .. ' ' .. id, 'PX', d.window_ms)
    end
    return status, at, put, id
  end
  if d.mode == 'simple' then
    if old then
      local state, at = DEDUPS.live(old)
      if state then return DEDUPLICATED, at or 0, false, old end
    end
    local status, at, put = JOB.upsert(id, topic, body, ttr, due, retry, max, mode, extra, at_once)
    if status ~= KEPT then
      redis.call('SET', rkey, '0 ' .. id)
      redis.call('HSET', job_key(id), DEDUP, d.key)
    end
    return status, at, put, id
  end
  -- debounce: only a job still waiting for its first delivery is moved; one
  -- that fell due or was handed out has fired, and the push starts a series.
  -- A job another mode's record names is moved the same way, its series
  -- starting now (its record's number is no series' start).
  local now = math.ceil(now_us() / 1000)
  if old then
    local state, _, attempts = DEDUPS.live(old)
    if state == DELAYED and attempts == 0 then
      local start = n
      if foreign then start = now end
      if d.max_wait_ms then due = math.max(math.min(due, start + d.max_wait_ms), now) end
      local _, at, put = JOB.upsert(old, topic, body, ttr, due, retry, max, 'replace', extra, at_once)
      redis.call('SET', rkey, DEDUPS.LETTER.debounce .. string.format('%.0f', start) .. ' ' .. old, 'PX', d.window_ms)
      return DEBOUNCED, at, put, old
    end
  end
  if d.max_wait_ms then due = math.min(due, now + d.max_wait_ms) end
  local status, at, put = JOB.upsert(id, topic, body, ttr, due, retry, max, mode, extra, at_once)
  if status ~= KEPT then
    redis.call('SET', rkey, DEDUPS.LETTER.debounce .. string.format('%.0f', now) .. ' ' .. id, 'PX', d.window_ms)
  end
  return status, at, put, id
end
