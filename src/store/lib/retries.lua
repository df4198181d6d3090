-- lib/retries.lua: failed attempts and their retries, dead letters and
-- their retention.
-- Fills: RETRIES (declared in lib/call.lua).

-- Dead-letter retention: drop the oldest dead jobs of a topic beyond
-- max_count, and those dead for longer than max_age ms (at most 100 a call,
-- so a script's run time stays bounded; later calls finish the trim).
function RETRIES.trim_dead(topic, now_ms, max_count, max_age)
  local key = KEY.dead(topic)
  local drop = redis.call('ZRANGEBYSCORE', key, '-inf', now_ms - max_age, 'LIMIT', 0, 100)
  local excess = redis.call('ZCARD', key) - #drop - max_count
  if excess > 0 then
    local oldest = redis.call('ZRANGE', key, #drop, #drop + math.min(excess, 100) - 1)
    for _, id in ipairs(oldest) do drop[#drop + 1] = id end
  end
  for _, id in ipairs(drop) do
    local f = redis.call('HMGET', job_key(id), TAGS, DEDUP, BATCH.FIELD)
    JOB.delete(id, DEAD, topic, f[1], f[2], nil, f[3])
  end
end

-- A reserved job's attempt failed (nack, or its lease ran out). Records the
-- error, then applies the job's retry policy:
--   attempts used up          -> dead (kept for inspection, requeue, purge)
--   next interval (or override) > 0 -> delayed until now + interval
--   otherwise                 -> ready at once
-- Returns state, due_ms.
function RETRIES.fail(id, topic, now_ms, err, override, dead_max, dead_age, fallback)
  local job = job_key(id)
  local f = redis.call('HMGET', job, ATTEMPTS, RETRY, MAX, HIST, DEDUP, PRIORITY, GROUP, BATCH.FIELD)
  local attempts = tonumber(f[1]) or 0
  local intervals = {}
  for v in string.gmatch(f[2] or '', '[^,]+') do
    intervals[#intervals + 1] = tonumber(v)
  end
  local max = tonumber(f[3]) or 0
  if max == 0 and #intervals > 0 then max = #intervals + 1 end
  -- A job with no policy at all waits the fallback's intervals (a nack's
  -- built-in backoff); its attempts stay unbounded.
  if max == 0 and fallback then
    for v in string.gmatch(fallback, '[^,]+') do
      intervals[#intervals + 1] = tonumber(v)
    end
  end

  -- History: one line per failed attempt, "attempt<TAB>ms<TAB>error", last 20.
  local hist = attempts .. '\t' .. now_ms .. '\t' .. err
  if f[4] and f[4] ~= '' then hist = f[4] .. '\n' .. hist end
  local _, lines = string.gsub(hist, '\n', '')
  while lines >= 20 do
    hist = string.sub(hist, string.find(hist, '\n', 1, true) + 1)
    lines = lines - 1
  end
  redis.call('HSET', job, ERR, err, HIST, hist, TOKEN, '')
  JOB.unlease(id)
  -- Groups: the attempt's slot comes back whatever follows.
  if f[7] then G.free(topic, f[7]) end

  if max > 0 and attempts >= max then
    -- dedup: death ends a simple dedup (GET + DEL only for such jobs).
    DEDUPS.release(id, f[5])
    redis.call('HSET', job, STATE, DEAD, DEAD_AT, now_ms)
    redis.call('ZADD', KEY.dead(topic), now_ms, id)
    COUNT.move(topic, RESERVED, DEAD)
    -- Batches: a note for the batch's home (nothing for a job of none).
    BATCH.left(id, f[8], BATCH.O_DEAD)
    RETRIES.trim_dead(topic, now_ms, dead_max, dead_age)
    return DEAD, now_ms
  end
  local wait = override
  if not wait or wait < 0 then
    wait = intervals[math.min(attempts, #intervals)] or 0
  end
  -- Callers bound the override and intervals; this keeps the schedule sane
  -- whatever a stored job holds.
  wait = math.min(wait, MAX_TIME_MS - now_ms)
  if wait <= 0 then
    JOB.make_ready(id, topic, RESERVED, nil, LISTS.level_of(f[6]), f[7])
    return READY, now_ms
  end
  local due = now_ms + wait
  redis.call('HDEL', job, STATE, DUE)
  JOB.schedule(id, due, topic)
  COUNT.move(topic, RESERVED, DELAYED)
  return DELAYED, due
end
