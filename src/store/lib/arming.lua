-- lib/arming.lua: the trigger keys' watermark and the sweep's arming of
-- trigger keys within the horizon: through the shared schedule, or in
-- layout 3 through the heads and the topic schedules (after
-- lib/schedule.lua, whose H.rank_after it uses).
-- Fills: H (made in the prelude, with its names).

-- Trigger keys within a horizon: a job due far ahead gets its trigger key
-- only once it comes within the horizon, so Redis's active expiry does not
-- walk a TTL'd key per far-future job. `{p}:armed` is the watermark, "<ms>"
-- or "<ms>:<id>": every delayed job up to it in the schedule's order (due
-- time, then id) has its trigger key. Absent (a Redis that only older
-- builds wrote to): every job has one. Arming more than that is harmless;
-- a job left unarmed is still fired by the sweep, which is the clock.
-- A watermark an operator broke (another type of key, no finite time)
-- reads as absent: every push arms, and the sweep writes it again.
-- Read once per call (a push of many jobs asks for each): H.armed holds
-- what was read ({} for none) until the call ends (the wrapper resets it)
-- or moves the watermark (H.write_armed, the one place that writes it).
function H.armed_upto()
  local c = H.armed
  if not c then
    c = {}
    local w = redis.pcall('GET', P .. ARMED_KEY)
    if type(w) == 'string' then
      local colon = string.find(w, ':', 1, true)
      local ms, after = w, nil
      if colon then ms, after = string.sub(w, 1, colon - 1), string.sub(w, colon + 1) end
      ms = tonumber(ms)
      if ms and ms == ms and ms ~= math.huge and ms ~= -math.huge then c = { ms, after } end
    end
    H.armed = c
  end
  return c[1], c[2]
end

-- Moves the watermark to `w`: what this call read of it is void.
function H.write_armed(w)
  redis.call('SET', P .. ARMED_KEY, w)
  H.armed = nil
end

-- The "\n"-separated fields of `s`.
function H.fields(s)
  local f, pos = {}, 1
  while true do
    local nl = string.find(s, '\n', pos, true)
    if not nl then f[#f + 1] = string.sub(s, pos); return f end
    f[#f + 1] = string.sub(s, pos, nl - 1)
    pos = nl + 1
  end
end

-- Where layout 3's arming walk is (see H.arm_topics), if one is among the
-- heads: its end, and the place (head, topic) it resumes at; nil if none
-- is (or it is past the heads). Read with the watermark, once a call.
function H.walk_place()
  local till, after = H.armed_upto()
  if not after or string.sub(after, 1, 1) ~= '\n' then return nil end
  local c = H.armed
  if c.place == nil then
    local f = H.fields(string.sub(after, 2))
    c.place = #f == 5 and tonumber(f[2]) and { tonumber(f[2]), f[3] } or false
  end
  if c.place then return till, c.place[1], c.place[2] end
  return nil
end

-- `topic`'s head moved from `old` to `due` (lower): if the walk had not
-- come to the topic and now would not (the head went from after its place
-- to before it), the topic is marked (in the set `{p}:heads:again`), and
-- the walk arms it whole at its end. A head that was beyond the walk's end leaves nothing else to arm
-- (the new entry arms itself); a topic already walked misses none.
function H.mark_passed(topic, due, old)
  local till, head, at = H.walk_place()
  if not till or not old then return end
  old, due = tonumber(old), tonumber(due)
  if old > till then return end
  local function ahead(s)
    return s > head or (s == head and H.bytes_before(at, topic))
  end
  if ahead(old) and not ahead(due) then
    redis.call('SADD', P .. HEADS_KEY .. ':again', topic)
  end
end

-- Layout 3's arming: the delayed jobs are in the topic schedules, so the
-- walk goes through the heads in their order (due time, then topic) from
-- where it is, up to those due by `till`, arming each topic's entries in
-- (`from`, `till`]. It reads the heads a batch at a time after its cursor
-- (ZRANGE by rank, O(log T) a batch), never all of them: a call costs what
-- it looks at, at most about `limit` entries, topics and batches of heads,
-- however many topics there are. A call that runs out of `limit` leaves
-- the watermark "<till>:\n<from>\n<head>\n<topic>\n<due>\n<id>" (no topic
-- or id holds a control character; due and id empty: the topic not begun):
-- the walk's end comes first, so a push due by it arms itself, and the
-- next call finishes `topic` after (due, id), also inside one millisecond,
-- then goes on with the heads after (head, topic). A topic whose head rose
-- past the cursor meanwhile is walked again (arming more is harmless); one
-- whose head a push moved from ahead of it to behind it is marked
-- (H.mark_passed), and after the heads the walk arms each marked topic
-- whole (the watermark's head then empty). `cursor` is that tail (after
-- the first "\n"), or nil; one of another shape (a build that walked the
-- topics in byte order) starts the heads again from the first, keeping
-- its `from` and `till`.
function H.arm_topics(now_ms, half, limit, from, till, cursor)
  local c_head, c_topic, c_due, c_id
  if cursor then
    local f = H.fields(cursor)
    from = tonumber(f[1]) or till
    if #f == 5 then
      -- No head: the walk is past the heads, in the marked topics.
      c_head, c_topic, c_due, c_id = tonumber(f[2]) or (f[2] == '' and ''), f[3], tonumber(f[4]), f[5]
    end
    if c_id == '' or not c_due then c_id = nil end
  end
  local budget, armed, reads = limit, 0, 0
  -- Arms `t`'s entries in (from, till] after (due_at, id_at) if given;
  -- false once the budget or the call's time (CALL.spent, looked at every
  -- fourth read, never before the first) ran out (the watermark then says
  -- where, `head` being t's place among the heads).
  local function walk(t, head, due_at, id_at)
    local key = KEY.topic_schedule(t)
    while true do
      reads = reads + 1
      if budget <= 0 or (reads % 4 == 0 and CALL.spent()) then
        H.write_armed(string.format('%d:\n%d\n%s\n%s\n%s\n%s', till, from,
          head and string.format('%.17g', head) or '', t, due_at or '', id_at or ''))
        return false
      end
      -- Each read counts, so many topics with nothing to arm still end a call.
      local n = math.min(budget, 100)
      budget = budget - 1
      local got
      if id_at then
        local start = H.rank_after(due_at, id_at, key)
        got = redis.call('ZRANGE', key, start, start + n - 1, 'WITHSCORES')
      else
        got = redis.call('ZRANGE', key, string.format('(%d', from), till, 'BYSCORE', 'LIMIT', 0, n, 'WITHSCORES')
      end
      local ended = #got < 2 * n
      for i = 1, #got, 2 do
        local due = tonumber(got[i + 1])
        if due > till then return true end
        local id = got[i]
        -- A stale entry (an older build moved its job) gets no key.
        if due > from and due > now_ms and not redis.call('HGET', job_key(id), STATE) then
          redis.call('SET', KEY.trigger(id), 1, 'PXAT', due)
        end
        due_at, id_at, armed, budget = due, id, armed + 1, budget - 1
      end
      if ended then return true end
    end
  end
  local heads, pos, again = P .. HEADS_KEY, 0, P .. HEADS_KEY .. ':again'
  local done = false
  if c_head then
    -- The cursor's topic first, wherever its head is now.
    if not walk(c_topic, c_head ~= '' and c_head or nil, c_due, c_id) then return armed, now_ms end
    if c_head == '' then
      redis.call('SREM', again, c_topic)
      done = true
    else
      pos = H.rank_after(c_head, c_topic, heads)
    end
  end
  while not done do
    -- At least one head: the next topic's place, if the budget ends there.
    local n = math.max(1, math.min(budget, 100))
    local got = redis.call('ZRANGE', heads, pos, pos + n - 1, 'WITHSCORES')
    done = #got < 2 * n
    for i = 1, #got, 2 do
      local head = tonumber(got[i + 1])
      if head > till then done = true break end
      if not walk(got[i], head, nil, nil) then return armed, now_ms end
    end
    pos = pos + n
  end
  -- Then each topic marked (see H.mark_passed), whole. A mark an abandoned
  -- walk left is walked too: arming more is harmless.
  while true do
    local t = redis.call('SRANDMEMBER', again)
    if not t then break end
    if not walk(t, nil, nil, nil) then return armed, now_ms end
    redis.call('SREM', again, t)
  end
  H.write_armed(string.format('%d', till))
  return armed, till - half
end

-- The sweep's arming, after it moved what is due. While the watermark is
-- at least half the horizon ahead, nothing: one GET, no write. Otherwise
-- trigger keys for the delayed jobs after the watermark due within the
-- horizon (`horizon` ms from `now_ms`), at most `limit` schedule entries
-- looked at (fewer once the call's time ran out, CALL.spent), then the
-- watermark moved past them. A watermark behind
-- `now_ms` restarts at now: what is due is the sweep's to move.
-- Returns the entries looked at and when (Redis ms) to arm again: once the
-- watermark is half the horizon away, or now if a batch was full or cut
-- short.
function H.arm_ahead(now_ms, horizon, limit)
  local half = math.floor(horizon / 2)
  local upto, after = H.armed_upto()
  -- No sweep writes one further ahead than its horizon (a day at most):
  -- beyond two days it is an operator's or a clock's jump, and restarts.
  if upto == nil or upto < now_ms or upto > now_ms + 2 * 86400000 then
    upto, after = now_ms, nil
  elseif not after and upto >= now_ms + half then
    return 0, upto - half
  end
  -- A walk of the other layout (the flag changed under it) starts again
  -- from now: what it armed stays armed, what it had not is walked.
  local topics_walk = after and string.sub(after, 1, 1) == '\n'
  if after and topics_walk ~= H.split() then upto, after = now_ms, nil end
  if H.split() then
    if after then return H.arm_topics(now_ms, half, limit, nil, upto, string.sub(after, 2)) end
    return H.arm_topics(now_ms, half, limit, upto, math.max(now_ms + horizon, upto), nil)
  end
  local till = math.max(now_ms + horizon, upto)
  local got
  if after then
    -- Resume after the last id armed (see H.rank_after).
    local start = H.rank_after(upto, after)
    got = redis.call('ZRANGE', SCHEDULE, start, start + limit - 1, 'WITHSCORES')
  else
    got = redis.call('ZRANGE', SCHEDULE, string.format('(%d', upto), till, 'BYSCORE', 'LIMIT', 0, limit, 'WITHSCORES')
  end
  local seen, last_id, last_due, stopped = 0, nil, nil, false
  for i = 1, #got, 2 do
    local due = tonumber(got[i + 1])
    if due > till then break end
    -- Out of time (CALL.spent, every 32 entries): the rest next call.
    if seen % 32 == 31 and CALL.spent() then stopped = true break end
    local id = got[i]
    -- A delayed job has no state field; a lease's end gets no key.
    if due > now_ms and not redis.call('HGET', job_key(id), STATE) then
      redis.call('SET', KEY.trigger(id), 1, 'PXAT', due)
    end
    seen, last_id, last_due = seen + 1, id, due
  end
  if seen == limit or stopped then
    H.write_armed(string.format('%d:%s', last_due, last_id))
    return seen, now_ms
  end
  H.write_armed(string.format('%d', till))
  return seen, till - half
end
