-- lib/schedule.lua: scheduling and leases: a job into and out of the
-- schedule and its trigger key (within the watermark: lib/arming.lua), a
-- lease, ready and detached, the sweep's wake-up; creating, replacing,
-- delaying and giving back jobs.
-- Fills: JOB (declared in lib/call.lua) and H (made in the prelude).

-- A delayed job goes into the schedule and, within the watermark, gets a
-- trigger key: the sweep and the key's expiry both fire at due (one due
-- at the watermark's own time is armed whatever its id). The trigger's
-- value is 1: Redis shares small integers, so it costs no value object.
-- Every caller has taken the job out of the schedule first (a key it
-- had is gone). The job also goes into its topic's own schedule, which
-- holds exactly the topic's delayed jobs: a topic's listing reads it.
-- The heads, `{p}:heads` (topic -> the due time of its topic schedule's
-- head), lead the sweep to every topic's due jobs in O(log T) for T topics.
-- Each write to a topic schedule keeps its topic's head: an entry added
-- lowers it (ZADD LT), an entry removed reads the new head.
-- A call that schedules many jobs (a push) sets H.heads_later to a table:
-- each topic's lowest due time is kept there and written in one ZADD LT
-- by H.write_heads, instead of one per job (the wrapper resets it).
function H.add(topic, due, id)
  redis.call('ZADD', KEY.topic_schedule(topic), due, id)
  local later = H.heads_later
  if later then
    local was = later[topic]
    if not was or tonumber(due) < tonumber(was) then later[topic] = due end
  else
    -- While a walk is under way, the old head (one ZSCORE): see H.mark_passed.
    local old = H.walk_place() and redis.call('ZSCORE', P .. HEADS_KEY, topic)
    redis.call('ZADD', P .. HEADS_KEY, 'LT', due, topic)
    if old then H.mark_passed(topic, due, old) end
  end
end

-- The heads H.add kept back, written in one command.
function H.write_heads()
  local later, args = H.heads_later, {}
  H.heads_later = nil
  local topics = {}
  for topic, due in pairs(later or {}) do
    args[#args + 1] = due
    args[#args + 1] = topic
    topics[#topics + 1] = topic
  end
  if #args == 0 then return end
  -- While a walk is under way, the old heads (one ZMSCORE): see H.mark_passed.
  local old = H.walk_place() and redis.call('ZMSCORE', P .. HEADS_KEY, unpack(topics))
  redis.call('ZADD', P .. HEADS_KEY, 'LT', unpack(args))
  if old then
    for i, topic in ipairs(topics) do
      if old[i] then H.mark_passed(topic, later[topic], old[i]) end
    end
  end
end

-- `topic`'s head again from its schedule (gone with its last entry). It
-- reads every entry added so far, so a head kept back for it is void.
function H.head(topic)
  if H.heads_later then H.heads_later[topic] = nil end
  local h = redis.call('ZRANGE', KEY.topic_schedule(topic), 0, 0, 'WITHSCORES')
  if h[2] then
    redis.call('ZADD', P .. HEADS_KEY, h[2], topic)
  else
    redis.call('ZREM', P .. HEADS_KEY, topic)
  end
end

-- Only an entry removed can move the head: one ZRANGE then, a ZADD that
-- changes nothing unless it was the head.
function H.remove(topic, id)
  if redis.call('ZREM', KEY.topic_schedule(topic), id) == 1 then H.head(topic) end
end

-- Layout 3 (the split): delayed jobs are in their topic schedules only;
-- the shared schedule keeps leases' ends (and delayed entries an earlier
-- layout left, until they are moved or taken out).
function H.split() return BODIES.in_force() >= 3 end

-- A delayed job's due time (a string, or false): its topic schedule's
-- entry in layout 3 (the shared one's if an earlier layout left only
-- that), else the shared schedule's (the topic schedule's if the way back
-- from layout 3 has not put it back yet).
function H.due(id, topic)
  if topic and H.split() then
    local s = redis.call('ZSCORE', KEY.topic_schedule(topic), id)
    if s then return s end
  end
  local s = redis.call('ZSCORE', SCHEDULE, id)
  if s or not topic or H.split() then return s end
  return redis.call('ZSCORE', KEY.topic_schedule(topic), id)
end

-- `seq`: the job's SEQ is written already (nil: look for a tie here, and
-- write it when there is one).
function JOB.schedule(id, due, topic, seq)
  if seq == nil then
    seq = H.tie_seq(topic, due)
    if seq then redis.call('HSET', job_key(id), H.SEQ, seq) end
  end
  if not H.split() then redis.call('ZADD', SCHEDULE, due, id) end
  H.add(topic, due, id)
  local upto = H.armed_upto()
  if upto == nil or tonumber(due) <= upto then
    redis.call('SET', KEY.trigger(id), 1, 'PXAT', due)
  end
end

-- Byte order, as Redis orders members of equal score (Lua's `<` on strings
-- follows the locale).
function H.bytes_before(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- The rank in the schedule (or `key`, another zset) of the first entry
-- after a cursor (`score`, `id`; score a number or its string), found
-- without reading the entries before it: ZRANK when `id` is still at
-- `score`, else a binary search among the entries of that score (many
-- jobs, or topics' heads, may share one). Each step costs O(log N), so
-- O(log^2 N) however many share a score, and a forged cursor costs no
-- more than a real one.
function H.rank_after(score, id, key)
  key = key or SCHEDULE
  score = tonumber(score)
  local own = redis.call('ZSCORE', key, id)
  if own and tonumber(own) == score then
    return redis.call('ZRANK', key, id) + 1
  end
  local at = string.format('%.17g', score)
  local lo = redis.call('ZCOUNT', key, '-inf', '(' .. at)
  local hi = redis.call('ZCOUNT', key, '-inf', at)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local m = redis.call('ZRANGE', key, mid, mid)[1]
    if H.bytes_before(id, m) then hi = mid else lo = mid + 1 end
  end
  return lo
end

-- `topic` nil: no job behind the entry, so no topic schedule holds it.
function JOB.unschedule(id, topic)
  redis.call('ZREM', SCHEDULE, id)
  if topic then H.remove(topic, id) end
  redis.call('DEL', KEY.trigger(id))
end

-- A lease's end goes into the schedule only: the sweep is the clock, and a
-- trigger key per lease would cost two more writes per delivery.
function JOB.lease(id, until_ms)
  redis.call('ZADD', SCHEDULE, until_ms, id)
end

function JOB.unlease(id)
  redis.call('ZREM', SCHEDULE, id)
end

-- A job that is out of the schedule joins the back of its ready list (of
-- its priority `level`, or its group's line: `group` false for none; nil
-- reads both); `due` (if given) records when it fell due.
function JOB.make_ready(id, topic, from, due, level, group)
  if due then
    redis.call('HSET', job_key(id), STATE, READY, TOKEN, '', DUE, due)
  else
    redis.call('HSET', job_key(id), STATE, READY, TOKEN, '')
  end
  if level == nil or group == nil then
    local f = redis.call('HMGET', job_key(id), PRIORITY, GROUP)
    level, group = LISTS.level_of(f[1]), f[2]
  end
  LISTS.push(id, topic, level, false, group)
  COUNT.move(topic, from, READY)
end

-- Takes a job out of whatever structure its state keeps it in. `group`:
-- its GROUP field, false for none, nil to read it (one HGET, only for a
-- ready or reserved job): a grouped job leaves its group's line, or gives
-- its slot back.
function JOB.detach(id, state, topic, group)
  if group == nil and (state == READY or state == RESERVED) then
    group = redis.call('HGET', job_key(id), GROUP)
  end
  if group and state == READY then
    G.unready(id, topic, group)
  elseif state == READY then
    -- The list's entry stays, stale (see LISTS.take).
  elseif state == DEAD then
    redis.call('ZREM', KEY.dead(topic), id)
  elseif state == RESERVED then
    JOB.unlease(id)
    if group then G.free(topic, group) end
  elseif state == FINISHED then
    -- A kept record: its index entry is what counts it.
    if redis.call('ZREM', P .. FINISHED_KEY .. topic, id) == 0 then return end
  else
    JOB.unschedule(id, topic)
  end
  COUNT.move(topic, state, nil)
end

-- The earliest due time of the schedule (lease ends, and delayed jobs
-- while the layout keeps them there too) and of the heads (delayed jobs),
-- or nil: two O(log N) reads.
function H.earliest()
  local a = redis.call('ZRANGE', SCHEDULE, 0, 0, 'WITHSCORES')
  local b = redis.call('ZRANGE', P .. HEADS_KEY, 0, 0, 'WITHSCORES')
  a, b = tonumber(a[2]), tonumber(b[2])
  if a and b then return math.min(a, b) end
  return a or b
end

-- Of `dues` (id -> due time, just scheduled), the id that is the earliest
-- of all now, or nil: the shared schedule's head, or in layout 3 one due
-- at the earliest time (another job at the same time may be the head: a
-- wake notice more).
function H.head_among(dues)
  if H.split() then
    local e = H.earliest()
    for id, due in pairs(dues) do
      if tonumber(due) == e then return id end
    end
    return nil
  end
  local head = redis.call('ZRANGE', SCHEDULE, 0, 0)
  if head[1] and dues[head[1]] then return head[1] end
  return nil
end

-- The earliest due time, or -1.
function H.next_due()
  return H.earliest() or -1
end

-- A job (or a job lease's end) at `due` became the schedule's earliest:
-- every delayq instance re-arms its sweep (the wake notice), and the
-- partition leader's term, which an idle leader takes up to the earliest
-- due time, ends by `due` (never sooner than TERM_FLOOR_MS from now), so
-- that the standbys take over in time if the leader was killed.
function H.new_head(due)
  redis.call('PUBLISH', P .. WAKE_CHANNEL, due)
  local key = P .. DISPATCHER_KEY
  local left = redis.call('PTTL', key)
  if left > TERM_FLOOR_MS then
    local now_ms = math.floor(now_us() / 1000)
    local by = math.max(tonumber(due), now_ms + TERM_FLOOR_MS)
    if now_ms + left > by then redis.call('PEXPIREAT', key, by) end
  end
end

-- After scheduling `id` at `due`: if it is now the earliest job, see
-- H.new_head. Returns 1 if so.
function H.wake_if_head(id, due)
  local at = H.head_among({ [id] = due })
  if at then
    H.new_head(due)
    return 1
  end
  return 0
end

-- Creates `id`, due at `due` (from CALL.due_time, checked by the caller), or
-- replaces (mode 'replace') or keeps (mode 'keep') the job with that id:
-- the work of push.lua, per job, and of tick.lua. Returns status, due_ms
-- (for a kept job, its own), and whether the job went into the schedule.
-- `extra` (a table or nil) is what the job asks beyond the basics (push.lua's
-- extra argument): each feature reads its own field of it.
-- `at_once`: a job due already becomes ready here, not scheduled (a push:
-- the caller announces it).
function JOB.upsert(id, topic, body, ttr, due, retry, max, mode, extra, at_once)
  local job = job_key(id)
  -- A new id (the usual push) asks its absent hash for four fields only;
  -- a replace reads its tags and dedup key besides (JOB.forget).
  local old = redis.call('HMGET', job, STATE, TOPIC, DUE, GROUP)
  local status = DONE
  if old[2] then
    -- A finished job's kept record is no job: a push creates a new one.
    local record = old[1] == FINISHED
    if mode == 'keep' and not record then
      return KEPT, tonumber(old[3] or H.due(id, old[2])), false
    end
    if not record then status = REPLACED end
    JOB.detach(id, state_of(old[1]), old[2], old[4])
    -- The job it replaces ends: its tags' entries, its simple dedup (issue
    -- 51: the record was left naming the new job) and its keys go.
    local named = redis.call('HMGET', job, TAGS, DEDUP, BATCH.FIELD)
    JOB.forget(id, named[1], named[2], nil, job)
    -- A job of a batch replaced is a job of it deleted (BATCH.left).
    if not record then BATCH.left(id, named[3], BATCH.O_DELETED) end
  end
  local ready = at_once and H.due_now(due)
  -- Its push order, if it ties (false: none), in the same HSET.
  local seq = not ready and H.tie_seq(topic, due) or false
  -- One HSET whatever the fields: a policy's fields only when it has them.
  if retry == '' and max == '0' and not extra then
    -- A plain job, most of them: no table of fields to build and unpack.
    if seq then
      redis.call('HSET', job, TOPIC, topic, TTR, ttr, H.SEQ, seq, BODIES.fields(body))
    else
      redis.call('HSET', job, TOPIC, topic, TTR, ttr, BODIES.fields(body))
    end
  else
    local fields = { TOPIC, topic, TTR, ttr, BODIES.fields(body) }
    if seq then fields[#fields + 1] = H.SEQ; fields[#fields + 1] = seq end
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
      for _, tag in ipairs(extra.tags) do redis.call('ZADD', TAG.key(tag), 0, id) end
      fields[#fields + 1] = TAGS; fields[#fields + 1] = table.concat(extra.tags, '\n')
    end
    -- Groups: the group key, checked by push.lua.
    if extra and extra.group then
      fields[#fields + 1] = GROUP; fields[#fields + 1] = extra.group
    end
    -- Batches: the batch's id, and the job in its partition's live index.
    if extra and extra.batch then
      fields[#fields + 1] = BATCH.FIELD; fields[#fields + 1] = extra.batch
      BATCH.join(id, extra.batch)
    end
    -- Flows: a parent released carries its children's outcomes.
    if extra and extra.children then
      fields[#fields + 1] = BATCH.CHILDREN; fields[#fields + 1] = extra.children
    end
    redis.call('HSET', job, unpack(fields))
  end
  COUNT.add(DELAYED, topic, 1)
  if ready then
    JOB.make_ready(id, topic, DELAYED, due, LISTS.level_of(extra and extra.priority), extra and extra.group or false)
  else
    JOB.schedule(id, due, topic, seq)
  end
  return status, due, true
end

-- Gives back a reservation that never reached its consumer: the job goes
-- to the head of its ready list (of its priority `level`, or its group's
-- line, `group` false for none; nil reads both: it was first in line), its
-- group's slot back, the attempt uncounted, and waiting consumers are woken.
function JOB.unreserve(id, topic, level, group)
  JOB.unlease(id)
  redis.call('HSET', job_key(id), STATE, READY, TOKEN, '')
  local attempts = redis.call('HINCRBY', job_key(id), ATTEMPTS, -1)
  if level == nil or group == nil then
    local f = redis.call('HMGET', job_key(id), PRIORITY, GROUP)
    level, group = LISTS.level_of(f[1]), f[2]
  end
  if group then G.free(topic, group) end
  LISTS.push(id, topic, level, true, group)
  COUNT.move(topic, RESERVED, READY)
  LISTS.notify(topic, 1)
  if EVENTS > 0 then EVENT.emit(EV_RELEASED, id, topic, attempts) end
end

-- Makes job `id` (in `state`, of `topic`; not a finished record) delayed
-- until `due`, from any state: out of wherever it is (a lease it had is
-- void), into the schedule with its trigger key, counted. Topic, ttr, retry
-- policy, tags and attempts stay, except that a dead job starts its
-- schedule afresh. The caller wakes the sweeps if it is the new head. The
-- work of reschedule.lua and tag_reschedule.lua.
function JOB.delay(id, state, topic, due)
  local job = job_key(id)
  JOB.detach(id, state, topic)
  if state == DEAD then
    redis.call('HDEL', job, ATTEMPTS, DEAD_AT)
  end
  redis.call('HDEL', job, STATE, TOKEN, DUE)
  JOB.schedule(id, due, topic)
  COUNT.move(topic, nil, DELAYED)
  if EVENTS > 0 then EVENT.emit(EV_RESCHEDULED, id, topic, nil, due) end
end
