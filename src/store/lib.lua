-- lib.lua: helpers shared by every delayq script.
--
-- delayq loads its scripts into Redis once, as one function library
-- (FUNCTION LOAD): a generated prelude first (key kinds, hash fields, states
-- and statuses, named once in src/store/layout.rs and src/store/mod.rs),
-- then this file, then each <transition>.lua registered as a function of
-- its own (see src/store/library.rs). Each call still runs as one atomic
-- unit; the helpers are compiled once, not on every call.
--
-- Every script replies with a table whose first element is a status
-- (DONE, MISSING, STALE, KEPT, REPLACED; see Status in src/store/mod.rs),
-- then what that script returns.
--
-- Conventions for every script:
--   KEYS[1] is the schedule zset "{p}:schedule". Every other key the script
--           touches is named from the prefix and carries the same hash tag
--           "{p}", so all of them live in KEYS[1]'s Redis Cluster slot.
--   ARGV[1] is the key prefix "{p}:".
--   The last two ARGV are the call's deadline, the Redis time (us) after
--           which its caller has stopped waiting for the reply (0: none),
--           and the events setting (EVENTS below). The wrapper that
--           src/store/library.rs puts around every script takes both off
--           (checking the deadline before the script runs), so each
--           script's own arguments are ARGV[2] on, and #ARGV counts them.
-- Errors a script returns: "DQLATE ..." (past the deadline) and
-- "DQINVALID ..." (an argument out of range); either comes before the
-- script's first write, so a refused call changes nothing.
-- Times are Unix milliseconds of the Redis clock (TIME), never the client's.

-- Set at the start of every call (Redis runs one call at a time).
local P, SCHEDULE

-- Job hash fields (TOPIC, BODY, ...) come from the prelude. STATE is
-- absent while delayed (most jobs, so it costs nothing); ATTEMPTS absent
-- means 0; DUE is absent while delayed, when the schedule's score is the
-- due time, and set when the job is handed over.

-- The name of a job's hash, trigger key, ready list, dead set.
local function job_key(id) return P .. JOB_KEY .. id end
local function trigger_key(id) return P .. TRIGGER_KEY .. id end
local function ready_key(topic) return P .. READY_KEY .. topic end
local function dead_key(topic) return P .. DEAD_KEY .. topic end

-- Priorities (H-prio). Level 0, the default, is the ready list above, as
-- before priorities; level n (1..MAX_PRIORITY) has a list of its own,
-- READY_LEVEL_KEY .. n .. ':' .. topic (the number first: no topic can
-- name another's list). LEVELS_KEY .. topic indexes the levels 1.. whose
-- list may hold jobs (member and score n): every non-empty list is in it,
-- and a level leaves it when its list is seen empty. Pops take level 0
-- first, then 1, 2, ...; FIFO within each. Every use of a ready list goes
-- through these helpers; a caller that has the job's PRIORITY field at hand
-- passes it (level_of), else (nil) it is read (one HGET).
local function level_of(stored) return tonumber(stored) or 0 end
local function level_key(topic, level)
  if level == 0 then return ready_key(topic) end
  return P .. READY_LEVEL_KEY .. level .. ':' .. topic
end
local function levels_key(topic) return P .. LEVELS_KEY .. topic end
local function known_level(id, level)
  return level or level_of(redis.call('HGET', job_key(id), PRIORITY))
end

-- Puts `id` at the back of its level's list, or at the front (`front`: it
-- was first in line). One LPUSH/RPUSH; a level's first job also one ZADD.
local function ready_push(id, topic, level, front)
  local cmd = front and 'RPUSH' or 'LPUSH'
  -- Level 0 (every job of a queue without priorities) the short way.
  if level == 0 then return redis.call(cmd, ready_key(topic), id) end
  if redis.call(cmd, level_key(topic, level), id) == 1 then
    redis.call('ZADD', levels_key(topic), level, level)
  end
end

-- A ready job that leaves ready any other way than by a pop (deleted,
-- rescheduled, cancelled, replaced) keeps its entry in the list: taking it
-- out would be an LREM, O(length of the list), and a cancel of a thousand
-- jobs behind a long backlog would hold Redis for seconds. The entry is
-- stale from then on; the pop that reaches it skips it (ready_take checks
-- the job, see there), so the cost is one RPOP and one HMGET, paid once, by
-- a pop. A job that comes back to ready before its stale entry is reached
-- may be handed out from the earlier place in line: never early, never
-- twice (the hand-over changes its state), only sooner than its new place.

-- The next entry of `topic`'s ready lists, or nil when none is left. `at`
-- ({ level = 0 } at the start of a pop) remembers the level reached. Cost:
-- one RPOP per entry; once the default list is empty, per level looked at
-- one ZRANGE (O(log levels)), one RPOP and, for a level found empty, one
-- ZREM: bounded by MAX_PRIORITY, never by the backlog. An entry may be
-- stale (see above): the caller checks it with ready_entry_live.
local function ready_take(topic, at)
  while at.level do
    local id = redis.call('RPOP', level_key(topic, at.level))
    if id then return id end
    if at.level ~= 0 then redis.call('ZREM', levels_key(topic), at.level) end
    at.level = tonumber(redis.call('ZRANGE', levels_key(topic), 0, 0)[1])
  end
  return nil
end

-- Whether an entry taken from `topic`'s list of level `at.level` names a job
-- that is ready there now: `state`, `job_topic` and `priority` are the
-- job's STATE, TOPIC and PRIORITY fields (nil for a job that is gone).
local function ready_entry_live(at, state, job_topic, topic, priority)
  return state == READY and job_topic == topic and level_of(priority) == at.level
end

-- The most stale entries one pop skips before it stops (and tells its
-- caller to look again at once): after a cancel of many ready jobs at the
-- front of a list, no single call holds Redis for long.
local STALE_SKIP_MAX = 1000

-- After a pop's last ready_take of `topic`: a level other than 0 that it
-- emptied leaves the index now, not at the next pop (one LLEN).
local function ready_taken(topic, at)
  if at.level and at.level ~= 0 and redis.call('LLEN', level_key(topic, at.level)) == 0 then
    redis.call('ZREM', levels_key(topic), at.level)
  end
end

-- A job's state as stored: absent means delayed.
local function state_of(stored) return stored or DELAYED end

-- Redis time in microseconds (exact: below 2^53), read once per call: a
-- script is one atomic step, so one instant serves all of it, and TIME is
-- a command like any other.
local NOW
local function now_us()
  if not NOW then
    local t = redis.call('TIME')
    NOW = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return NOW
end

-- A call that reaches Redis after its caller gave up must not act: the
-- caller has already reported failure (and may be retrying). Returns the
-- error reply to give, or nil to go on.
local function past_deadline(deadline_us)
  local deadline = tonumber(deadline_us) or 0
  if deadline > 0 and now_us() > deadline then
    return redis.error_reply('DQLATE the call reached redis after its caller stopped waiting; nothing was changed')
  end
  return nil
end

-- MAX_TIME_MS (in the prelude, from job::MAX_DUE_AT_MS) is the latest time
-- (Unix ms) a job may be due, 9999-12-31T23:59:59.999Z. Times stay far from
-- where milliseconds times 1000 overflow a 64-bit integer, and SET PXAT
-- accepts them all.

local function invalid(message)
  return redis.error_reply('DQINVALID ' .. message)
end

-- The due time (ms) for an absolute time `at_ms` (if >= 0) or a delay from
-- now, rounded up to the next millisecond of Redis time: never early, and a
-- past absolute time means now. Returns nil and what is wrong for a time
-- beyond MAX_TIME_MS, for the caller to refuse before its first write.
local function due_time(delay_ms, at_ms)
  local now = math.ceil(now_us() / 1000)
  at_ms = tonumber(at_ms)
  local due
  if at_ms >= 0 then due = math.max(at_ms, now) else due = now + tonumber(delay_ms) end
  if due > MAX_TIME_MS then
    return nil, 'due time ' .. string.format('%.0f', due) .. ' ms is after the latest allowed, ' .. string.format('%.0f', MAX_TIME_MS) .. ' ms (year 9999-12-31)'
  end
  return due
end

-- Per-topic job counts by state live in one hash (COUNT_KEY), field
-- "<state>:<topic>". A call gathers its changes and writes each field once,
-- at its end (flush_counts, which the wrapper in library.rs calls): a
-- dispatch of a hundred jobs of one topic is two writes, not two hundred.
-- Set at the start of every call.
local COUNTS
local function count(state, topic, by)
  local field = state .. ':' .. topic
  COUNTS[field] = (COUNTS[field] or 0) + by
end

local function flush_counts()
  local key = P .. COUNT_KEY
  for field, by in pairs(COUNTS) do
    if by ~= 0 and redis.call('HINCRBY', key, field, by) <= 0 then
      redis.call('HDEL', key, field)
    end
  end
end

-- How many of `topic`'s jobs are ready in this partition, exactly: the
-- count hash with this call's changes not yet written. One HGET.
local function ready_count(topic)
  local field = READY .. ':' .. topic
  return (tonumber(redis.call('HGET', P .. COUNT_KEY, field)) or 0) + (COUNTS[field] or 0)
end

local function move_count(topic, from, to)
  if from then count(from, topic, -1) end
  if to then count(to, topic, 1) end
end

-- Events (the event stream; off unless configured). EVENTS is how many
-- entries a partition's stream {p}:events keeps, about (0: off): every
-- call gets it from the wrapper in library.rs, so with events off no call
-- reads or writes anything more. Each event is one XADD, O(1) (MAXLEN ~
-- trims whole stream nodes, amortised O(1)). An `attempt` left out is read
-- from the job: one HGET, only with events on. Every entry has all fields,
-- in one order ("" where none applies): Redis then stores their names once
-- per stream node. The entry's id (Redis time) is the event's time. The
-- scripts that emit once per job test EVENTS > 0 before calling: a Lua
-- call costs even when it returns at once.
local EVENTS = 0
local function emit(kind, id, topic, attempt, due, err)
  if EVENTS == 0 then return end
  attempt = attempt or tonumber(redis.call('HGET', job_key(id), ATTEMPTS)) or 0
  redis.call('XADD', P .. EVENTS_KEY, 'MAXLEN', '~', EVENTS, '*', EV_KIND, kind,
    EV_ID, id, EV_TOPIC, topic, EV_ATTEMPT, attempt, EV_DUE, due or '', EV_ERROR, err or '')
end

-- After fail_attempt put `id` in `state`: failed (with its error), then
-- retried (with when it is due again) or dead. Two XADDs, one HMGET.
local function emit_failed(id, topic, state)
  if EVENTS == 0 then return end
  local f = redis.call('HMGET', job_key(id), ATTEMPTS, ERR)
  local attempt = tonumber(f[1]) or 0
  emit(EV_FAILED, id, topic, attempt, nil, f[2])
  if state == DEAD then
    emit(EV_DEAD, id, topic, attempt)
  else
    local due = state == DELAYED and redis.call('ZSCORE', SCHEDULE, id)
    emit(EV_RETRIED, id, topic, attempt, due or math.ceil(now_us() / 1000))
  end
end

-- A delayed job goes into the schedule and gets a trigger key: the sweep
-- and the key's expiry both fire at due. The trigger's value is 1: Redis
-- shares small integers, so it costs no value object.
local function schedule(id, due)
  redis.call('ZADD', SCHEDULE, due, id)
  redis.call('SET', trigger_key(id), 1, 'PXAT', due)
end

local function unschedule(id)
  redis.call('ZREM', SCHEDULE, id)
  redis.call('DEL', trigger_key(id))
end

-- A lease's end goes into the schedule only: the sweep is the clock, and a
-- trigger key per lease would cost two more writes per delivery.
local function lease(id, until_ms)
  redis.call('ZADD', SCHEDULE, until_ms, id)
end

local function unlease(id)
  redis.call('ZREM', SCHEDULE, id)
end

-- A job that is out of the schedule joins the back of its ready list (of
-- its priority `level`: nil reads it); `due` (if given) records when it
-- fell due.
local function make_ready(id, topic, from, due, level)
  if due then
    redis.call('HSET', job_key(id), STATE, READY, TOKEN, '', DUE, due)
  else
    redis.call('HSET', job_key(id), STATE, READY, TOKEN, '')
  end
  if level ~= 0 then level = known_level(id, level) end
  ready_push(id, topic, level, false)
  move_count(topic, from, READY)
end

-- Takes a job out of whatever structure its state keeps it in.
local function detach(id, state, topic)
  if state == READY then
    -- The list's entry stays, stale (see ready_take).
  elseif state == DEAD then
    redis.call('ZREM', dead_key(topic), id)
  elseif state == RESERVED then
    unlease(id)
  elseif state == FINISHED then
    -- A kept record: its index entry is what counts it.
    if redis.call('ZREM', P .. FINISHED_KEY .. topic, id) == 0 then return end
  else
    unschedule(id)
  end
  move_count(topic, state, nil)
end

-- The format is layout::ready_notice's.
local function notify_ready(topic, n)
  redis.call('PUBLISH', P .. READY_CHANNEL, n .. ' ' .. topic)
end

-- Tags (issue 26): a job's tags are one hash field, TAGS, one tag per line
-- (a tag holds no control character), and an entry in one index per tag
-- and partition, TAG_KEY .. tag: a zset id -> 0, paged by id (ZRANGEBYLEX),
-- so a page resumes after the last id whatever changed before it. Every
-- place that deletes or replaces a job's hash drops its entries (untag),
-- so an index holds only live jobs (and pages drop any stale entry they
-- meet). A job without tags has no field: untag of nil costs nothing.
local function tag_key(tag) return P .. TAG_KEY .. tag end

-- Drops `id` from the indexes of `stored` (its TAGS field, or nil).
local function untag(id, stored)
  if not stored then return end
  for tag in string.gmatch(stored, '[^\n]+') do
    redis.call('ZREM', tag_key(tag), id)
  end
end

-- A dedup key's record (see Dedup below).
local function dedup_record(key) return P .. DEDUP_KEY .. key end

-- A simple-dedup job `id` (its DEDUP field: `key`, nil for any other job)
-- ended: its record goes if it still names it. Nothing for other jobs.
local function dedup_release(id, key)
  if not key then return end
  local rkey = dedup_record(key)
  if redis.call('GET', rkey) == '0 ' .. id then redis.call('DEL', rkey) end
end

-- Deletes job `id` (in `state`, of `topic`; `tags` and `dedup` its TAGS
-- and DEDUP fields) for good, keeping no record: out of the structure its
-- state keeps it in, its tags' indexes and its simple dedup record, then
-- the hash; the event "deleted". The one way a job is deleted: DELETE, a
-- tag cancel, a dead-letter purge, dead-letter retention, and a recurring
-- schedule's pending tick dropped (drop_if_delayed).
local function delete_job(id, state, topic, tags, dedup)
  -- A finished job's kept record going is no change of a job.
  if EVENTS > 0 and state ~= FINISHED then emit(EV_DELETED, id, topic) end
  detach(id, state, topic)
  untag(id, tags)
  dedup_release(id, dedup)
  redis.call('DEL', job_key(id))
end

-- Dead-letter retention: drop the oldest dead jobs of a topic beyond
-- max_count, and those dead for longer than max_age ms (at most 100 a call,
-- so a script's run time stays bounded; later calls finish the trim).
local function trim_dead(topic, now_ms, max_count, max_age)
  local key = dead_key(topic)
  local drop = redis.call('ZRANGEBYSCORE', key, '-inf', now_ms - max_age, 'LIMIT', 0, 100)
  local excess = redis.call('ZCARD', key) - #drop - max_count
  if excess > 0 then
    local oldest = redis.call('ZRANGE', key, #drop, #drop + math.min(excess, 100) - 1)
    for _, id in ipairs(oldest) do drop[#drop + 1] = id end
  end
  for _, id in ipairs(drop) do
    local f = redis.call('HMGET', job_key(id), TAGS, DEDUP)
    delete_job(id, DEAD, topic, f[1], f[2])
  end
end

-- A reserved job's attempt failed (nack, or its lease ran out). Records the
-- error, then applies the job's retry policy:
--   attempts used up          -> dead (kept for inspection, requeue, purge)
--   next interval (or override) > 0 -> delayed until now + interval
--   otherwise                 -> ready at once
-- Returns state, due_ms.
local function fail_attempt(id, topic, now_ms, err, override, dead_max, dead_age, fallback)
  local job = job_key(id)
  local f = redis.call('HMGET', job, ATTEMPTS, RETRY, MAX, HIST, DEDUP, PRIORITY)
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
  unlease(id)

  if max > 0 and attempts >= max then
    -- dedup: death ends a simple dedup (GET + DEL only for such jobs).
    dedup_release(id, f[5])
    redis.call('HSET', job, STATE, DEAD, DEAD_AT, now_ms)
    redis.call('ZADD', dead_key(topic), now_ms, id)
    move_count(topic, RESERVED, DEAD)
    trim_dead(topic, now_ms, dead_max, dead_age)
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
    make_ready(id, topic, RESERVED, nil, level_of(f[6]))
    return READY, now_ms
  end
  local due = now_ms + wait
  redis.call('HDEL', job, STATE, DUE)
  schedule(id, due)
  move_count(topic, RESERVED, DELAYED)
  return DELAYED, due
end

-- The earliest due time in the schedule, or -1.
local function next_due()
  local head = redis.call('ZRANGE', SCHEDULE, 0, 0, 'WITHSCORES')
  if head[2] then return tonumber(head[2]) end
  return -1
end

-- After scheduling `id` at `due`: if it is now the earliest job, tell every
-- delayq instance to re-arm its sweep. Returns 1 if so.
local function wake_if_head(id, due)
  local head = redis.call('ZRANGE', SCHEDULE, 0, 0)
  if head[1] == id then
    redis.call('PUBLISH', P .. WAKE_CHANNEL, due)
    return 1
  end
  return 0
end

-- Creates `id`, due at `due` (from due_time, checked by the caller), or
-- replaces (mode 'replace') or keeps (mode 'keep') the job with that id:
-- the work of push.lua, per job, and of tick.lua. Returns status, due_ms
-- (for a kept job, its own), and whether the job went into the schedule.
-- `extra` (a table or nil) is what the job asks beyond the basics (push.lua's
-- extra argument): each feature reads its own field of it.
local function upsert(id, topic, body, ttr, due, retry, max, mode, extra)
  local job = job_key(id)
  -- A new id (the usual push) asks its absent hash for three fields only;
  -- a replace reads the priority (detach, if ready) and tags besides.
  local old = redis.call('HMGET', job, STATE, TOPIC, DUE)
  local status = DONE
  if old[2] then
    -- A finished job's kept record is no job: a push creates a new one.
    local record = old[1] == FINISHED
    if mode == 'keep' and not record then
      return KEPT, tonumber(old[3] or redis.call('ZSCORE', SCHEDULE, id)), false
    end
    if not record then status = REPLACED end
    detach(id, state_of(old[1]), old[2])
    untag(id, redis.call('HGET', job, TAGS))
    redis.call('DEL', job)
  end
  -- One HSET whatever the fields: a policy's fields only when it has them.
  if retry == '' and max == '0' and not extra then
    -- A plain job, most of them: no table of fields to build and unpack.
    redis.call('HSET', job, TOPIC, topic, BODY, body, TTR, ttr)
  else
    local fields = { TOPIC, topic, BODY, body, TTR, ttr }
    if retry ~= '' then fields[#fields + 1] = RETRY; fields[#fields + 1] = retry end
    if max ~= '0' then fields[#fields + 1] = MAX; fields[#fields + 1] = max end
    -- Priorities: stored only when not the default (push.lua checked it).
    if extra and extra.priority and extra.priority ~= 0 then
      fields[#fields + 1] = PRIORITY; fields[#fields + 1] = extra.priority
    end
    -- Trace context: two fields, only on a traced job.
    if extra and extra.traceparent then
      fields[#fields + 1] = TRACEPARENT; fields[#fields + 1] = extra.traceparent
      if extra.tracestate then fields[#fields + 1] = TRACESTATE; fields[#fields + 1] = extra.tracestate end
    end
    -- tags: checked by the caller (at most 8, no control characters).
    if extra and type(extra.tags) == 'table' and #extra.tags > 0 then
      for _, tag in ipairs(extra.tags) do redis.call('ZADD', tag_key(tag), 0, id) end
      fields[#fields + 1] = TAGS; fields[#fields + 1] = table.concat(extra.tags, '\n')
    end
    redis.call('HSET', job, unpack(fields))
  end
  schedule(id, due)
  count(DELAYED, topic, 1)
  return status, due, true
end

-- Removes `id` if it is still delayed (never handed over). 1 if removed.
local function drop_if_delayed(id)
  if id == '' then return 0 end
  local f = redis.call('HMGET', job_key(id), STATE, TOPIC, TAGS, DEDUP)
  if not f[2] or f[1] then return 0 end
  delete_job(id, DELAYED, f[2], f[3], f[4])
  return 1
end

-- The rate limit of `topic` at time `now_ms`, if it has one: { key,
-- tokens (thousandths, refilled for the time passed), per_s, burst }.
local function rate_bucket(topic, now_ms)
  local key = P .. RATE_KEY .. topic
  local b = redis.call('HMGET', key, RATE_PER_S, RATE_BURST, RATE_TOKENS, RATE_AT)
  if not b[1] then return nil end
  local per_s, burst = tonumber(b[1]), tonumber(b[2])
  local tokens = tonumber(b[3]) or burst * 1000
  local at = tonumber(b[4]) or now_ms
  if now_ms > at then
    tokens = math.min(burst * 1000, tokens + (now_ms - at) * per_s)
  end
  return { key = key, tokens = tokens, per_s = per_s, burst = burst }
end

-- How many jobs the bucket lets out now.
local function rate_allows(bucket)
  if not bucket then return math.huge end
  return math.floor(bucket.tokens / 1000)
end

-- Books `used` jobs against the bucket (fewer than 0: gives tokens back,
-- up to the burst); returns the ms until the next token.
local function rate_use(bucket, used, now_ms)
  if not bucket then return 0 end
  local left = math.min(bucket.tokens - used * 1000, bucket.burst * 1000)
  redis.call('HSET', bucket.key, RATE_TOKENS, left, RATE_AT, now_ms)
  if left >= 1000 then return 0 end
  return math.ceil((1000 - left) / bucket.per_s)
end

-- Gives back a reservation that never reached its consumer: the job goes
-- to the head of its ready list (of its priority `level`, nil reads it: it
-- was first in line), the attempt uncounted, and waiting consumers are woken.
local function unreserve(id, topic, level)
  unlease(id)
  redis.call('HSET', job_key(id), STATE, READY, TOKEN, '')
  local attempts = redis.call('HINCRBY', job_key(id), ATTEMPTS, -1)
  ready_push(id, topic, known_level(id, level), true)
  move_count(topic, RESERVED, READY)
  notify_ready(topic, 1)
  if EVENTS > 0 then emit(EV_RELEASED, id, topic, attempts) end
end

-- Finished jobs' kept records (keep_finished). A topic's index
-- FINISHED_KEY .. topic holds id -> MAX_TIME_MS - finished time, so its
-- score order is newest first (the order listings page in); the count
-- "finished:<topic>" is the index's size, changed only by what ZADD and
-- ZREM report. The record's hash carries a PEXPIRE of the window, so it
-- never outlives it even when no trim runs.
local function finished_key(topic) return P .. FINISHED_KEY .. topic end

-- Whether `id`'s hash is the kept record of a job finished in `topic` (an
-- index entry may outlive its record: the hash expired, then maybe a new
-- job took the id).
local function is_record(id, topic)
  local f = redis.call('HMGET', job_key(id), STATE, TOPIC)
  return f[1] == FINISHED and f[2] == topic
end

-- Drops at most `limit` entries of a topic's index, oldest first: those
-- older than keep_ms (0: none by age; their record too), then those whose
-- record is gone (expired, or replaced by a new job), stopping at the first
-- that is still there. Costs O(log N) per entry looked at, at most `limit`
-- entries and one more. Returns how many were dropped.
local function trim_finished(topic, now_ms, keep_ms, limit)
  local key = finished_key(topic)
  local drop = {}
  if keep_ms > 0 then
    -- finished at or before now - keep_ms: score at or above this.
    drop = redis.call('ZREVRANGEBYSCORE', key, '+inf', MAX_TIME_MS - now_ms + keep_ms,
      'LIMIT', 0, limit)
  end
  local aged = #drop
  for i = aged, limit - 1 do
    local id = redis.call('ZREVRANGE', key, i, i)[1]
    if not id or is_record(id, topic) then break end
    drop[#drop + 1] = id
  end
  for k, id in ipairs(drop) do
    redis.call('ZREM', key, id)
    if k <= aged and is_record(id, topic) then redis.call('DEL', job_key(id)) end
  end
  if #drop > 0 then count(FINISHED, topic, -#drop) end
  return #drop
end

-- Replaces the job `id` (already detached from its state's structures) by
-- its finished record, kept for keep_ms: topic, ttr, due time, attempts
-- (the last is the one that finished it), retry policy, last error and when
-- it finished. The body, lease and history go: a record costs the same
-- whatever the body was.
local function keep_record(id, topic, now_ms, keep_ms)
  local job = job_key(id)
  local kept = { TTR, DUE, ATTEMPTS, RETRY, MAX, ERR }
  local f = redis.call('HMGET', job, unpack(kept))
  local fields = { TOPIC, topic, STATE, FINISHED, FINISHED_AT, now_ms }
  for i, name in ipairs(kept) do
    if f[i] then fields[#fields + 1] = name; fields[#fields + 1] = f[i] end
  end
  -- A fresh hash: small fields only, so Redis keeps it compact (listpack)
  -- even if the job's body had made it a hashtable.
  redis.call('DEL', job)
  redis.call('HSET', job, unpack(fields))
  redis.call('PEXPIRE', job, keep_ms)
  if redis.call('ZADD', finished_key(topic), MAX_TIME_MS - now_ms, id) == 1 then
    count(FINISHED, topic, 1)
  end
end

-- Dedup (issue 26): a push whose extra carries dedup = { key, mode,
-- window_ms, max_wait_ms } (checked by push.lua). The key's record
-- DEDUP_KEY .. key is the string "<mode><n> <id>": the job the key names,
-- the mode's letter (none for simple, T, D) and n:
--   simple   0; no TTL; deleted when the job finishes, is deleted or dies
--            (dedup_release), and taken as stale if that job is gone,
--            finished or dead all the same;
--   throttle the winner's due time; PX window_ms from the winning push;
--   debounce the series' first push (ms, Redis time); PX window_ms,
--            renewed by every push of the series (the window slides).
-- A simple job carries the key in its hash (DEDUP) for its end to find
-- (dedup_record and dedup_release are above, with delete_job).
-- A record's mode ('simple', 'throttle' or 'debounce'), number and job id,
-- or nil. Throttle and debounce records start with their mode's letter (T,
-- D); a simple one is "0 <id>" (as older delayq wrote every mode: there a
-- number other than 0 is taken to be of the mode `mode` of the push that
-- reads it).
local DEDUP_LETTER = { throttle = 'T', debounce = 'D' }
local function dedup_parse(rec, mode)
  if not rec then return nil end
  local m, n, id = string.match(rec, '^([TD]?)(%d+) (.*)$')
  if not n then return nil end
  if m == DEDUP_LETTER.throttle then
    m = 'throttle'
  elseif m == DEDUP_LETTER.debounce then
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
local function dedup_live(id)
  local f = redis.call('HMGET', job_key(id), STATE, TOPIC, DUE, ATTEMPTS)
  if not f[2] or f[1] == FINISHED or f[1] == DEAD then return nil end
  return state_of(f[1]), tonumber(f[3] or redis.call('ZSCORE', SCHEDULE, id)),
    tonumber(f[4]) or 0
end

-- upsert's work for a push with a dedup key. Returns status (upsert's, or
-- DEDUPLICATED, DEBOUNCED), due_ms, whether a job went into the schedule,
-- and the id of the job the push created or met. Commands: a GET, then at
-- most one dedup_live, one upsert, one SET (and one HSET for simple): O(1)
-- beyond what upsert costs.
local function dedup_push(id, topic, body, ttr, due, retry, max, mode, extra)
  local d = extra.dedup
  local rkey = dedup_record(d.key)
  local m, n, old = dedup_parse(redis.call('GET', rkey), d.mode)
  -- A record another mode wrote counts only while its job lives, and
  -- speaks only of that job: its number means something else.
  local foreign = old and m ~= d.mode
  if d.mode == 'throttle' then
    if old and not foreign then return DEDUPLICATED, n, false, old end
    if foreign then
      local state, at = dedup_live(old)
      if state then return DEDUPLICATED, at or 0, false, old end
    end
    local status, at, put = upsert(id, topic, body, ttr, due, retry, max, mode, extra)
    if status ~= KEPT then
      redis.call('SET', rkey, DEDUP_LETTER.throttle .. string.format('%.0f', at) .. ' ' .. id, 'PX', d.window_ms)
    end
    return status, at, put, id
  end
  if d.mode == 'simple' then
    if old then
      local state, at = dedup_live(old)
      if state then return DEDUPLICATED, at or 0, false, old end
    end
    local status, at, put = upsert(id, topic, body, ttr, due, retry, max, mode, extra)
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
    local state, _, attempts = dedup_live(old)
    if state == DELAYED and attempts == 0 then
      local start = n
      if foreign then start = now end
      if d.max_wait_ms then due = math.max(math.min(due, start + d.max_wait_ms), now) end
      local _, at, put = upsert(old, topic, body, ttr, due, retry, max, 'replace', extra)
      redis.call('SET', rkey, DEDUP_LETTER.debounce .. string.format('%.0f', start) .. ' ' .. old, 'PX', d.window_ms)
      return DEBOUNCED, at, put, old
    end
  end
  if d.max_wait_ms then due = math.min(due, now + d.max_wait_ms) end
  local status, at, put = upsert(id, topic, body, ttr, due, retry, max, mode, extra)
  if status ~= KEPT then
    redis.call('SET', rkey, DEDUP_LETTER.debounce .. string.format('%.0f', now) .. ' ' .. id, 'PX', d.window_ms)
  end
  return status, at, put, id
end

-- Makes job `id` (in `state`, of `topic`; not a finished record) delayed
-- until `due`, from any state: out of wherever it is (a lease it had is
-- void), into the schedule with its trigger key, counted. Topic, ttr, retry
-- policy, tags and attempts stay, except that a dead job starts its
-- schedule afresh. The caller wakes the sweeps if it is the new head. The
-- work of reschedule.lua and tag_reschedule.lua.
local function delay_job(id, state, topic, due)
  local job = job_key(id)
  detach(id, state, topic)
  if state == DEAD then
    redis.call('HDEL', job, ATTEMPTS, DEAD_AT)
  end
  redis.call('HDEL', job, STATE, TOKEN, DUE)
  schedule(id, due)
  move_count(topic, nil, DELAYED)
  if EVENTS > 0 then emit(EV_RESCHEDULED, id, topic, nil, due) end
end

-- Tags: a page of the index of `tag` after id `after` ('' from the start),
-- at most `limit` ids in byte order, and each one's STATE, TOPIC, TAGS,
-- DEDUP.
-- Entries whose job is gone or no longer carries the tag are dropped here
-- (none should be: see untag) and not returned. Costs O(log N + limit).
-- Returns the live entries { id, state, topic, tags, dedup } and the last id looked at
-- ('' when the index ends within this page).
local function tag_page(tag, after, limit)
  local key = tag_key(tag)
  local from = '-'
  if after ~= '' then from = '(' .. after end
  local ids = redis.call('ZRANGEBYLEX', key, from, '+', 'LIMIT', 0, limit)
  local live = {}
  for _, id in ipairs(ids) do
    local f = redis.call('HMGET', job_key(id), STATE, TOPIC, TAGS, DEDUP)
    local has = false
    if f[2] and f[3] then
      for t in string.gmatch(f[3], '[^\n]+') do
        if t == tag then has = true break end
      end
    end
    if has and f[1] ~= FINISHED then
      live[#live + 1] = { id = id, state = state_of(f[1]), topic = f[2], tags = f[3], dedup = f[4] }
    else
      redis.call('ZREM', key, id)
    end
  end
  local last = ''
  if #ids == limit then last = ids[#ids] end
  return live, last
end
