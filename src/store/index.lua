-- index.lua: the topic schedules' backfill. A Redis that older builds
-- wrote to has delayed jobs in the schedule and none in their topics'
-- schedules ({p}:s:<topic>); older builds still running beside newer ones
-- keep writing so. A pass puts every delayed job of the schedule into its
-- topic's schedule at its due time, then drops every topic-schedule entry
-- whose job is not delayed at that time, then reads every topic's head
-- into the heads ({p}:heads), a bounded batch per call. A Redis whose
-- pass ended before the heads existed gets the last phase only.
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  most entries to look at in this call
-- ARGV[3]  1: begin a new pass if none is under way (an older build may
--          have written since the last); 0: only finish the one under way
--          or the first
--
-- Touches: {p}:indexed (fields phase, after, topic, rank, done, headed,
-- split, out: see below), the
-- topics' schedules, the heads; reads the schedule, job hashes, the count hash's names.
-- Publishes: nothing. Helpers: job_key, KEY.topic_schedule, H.rank_after, H.add,
-- H.remove, H.head.
--
-- Returns { DONE, entries looked at, 1 if no pass is under way after this
-- call (it ended one, or had none to do) else 0 }.
--
-- Guarantees: each call costs at most ARGV[2] entries (O(log N) each) and
-- one read of the count hash's names; nothing but topic schedules and
-- heads changes.
-- Phase 1 resumes after its last (due, id), so entries that stay put are
-- each looked at once; phase 2 resumes at a rank, so an entry that moved
-- ahead of it between calls waits for the next pass (a listing skips such
-- an entry anyway). `done` is set once the first pass ends: from then on a
-- topic's listing reads its topic schedule. `split` is set once a pass in
-- layout 3 took the delayed jobs out of the schedule; `out` once delayed
-- jobs may be missing from it (the flag's raise to 3 sets it, before any
-- writer sees 3): below 3 either one begins the way back (phase back), which
-- clears both.
local IX = P .. INDEXED_KEY
local budget = tonumber(ARGV[2])
local st = redis.call('HMGET', IX, 'phase', 'after', 'topic', 'rank', 'done', 'headed', 'split', 'out')
local phase, at, topic_at, rank, done = st[1], st[2] or '', st[3], tonumber(st[4]) or 0, st[5]
local split = H.split()
if not phase then
  if split and st[7] ~= '1' then
    -- Layout 3 came: a pass takes the delayed jobs out of the schedule.
    phase, at = '1', ''
    redis.call('HSET', IX, 'out', '1')
  elseif not split and (st[7] == '1' or st[8] == '1') then
    -- Back below 3: every topic schedule's jobs into the schedule again.
    phase, topic_at, at = 'back', '', ''
  elseif done == '1' and ARGV[3] ~= '1' then
    if st[6] == '1' then return { DONE, 0, 1 } end
    -- Topic schedules a build before the heads wrote: their heads only.
    phase, topic_at = '3', ''
  else
    phase, at = '1', ''
  end
end
local looked = 0

-- The topics the count hash names, in byte order.
local function named()
  local seen, topics = {}, {}
  for _, field in ipairs(redis.call('HKEYS', P .. COUNT_KEY)) do
    local colon = string.find(field, ':', 1, true)
    if colon then
      local t = string.sub(field, colon + 1)
      if not seen[t] then seen[t] = true; topics[#topics + 1] = t end
    end
  end
  table.sort(topics)
  return topics
end

if phase == 'back' then
  -- Each topic's delayed jobs (its schedule's entries whose job is
  -- delayed in it) into the schedule at their time, resumed after the
  -- last (topic, due, id): entries that leave meanwhile shift no one past
  -- the cursor, and those added meanwhile are written to both.
  for _, t in ipairs(named()) do
    if t >= topic_at then
      if t ~= topic_at then at = '' end
      local key = KEY.topic_schedule(t)
      while true do
        if budget <= 0 then
          redis.call('HSET', IX, 'phase', 'back', 'topic', t, 'after', at)
          return { DONE, looked, 0 }
        end
        local pos = 0
        if at ~= '' then
          local sp = string.find(at, ' ', 1, true)
          pos = H.rank_after(tonumber(string.sub(at, 1, sp - 1)), string.sub(at, sp + 1), key)
        end
        local got = redis.call('ZRANGE', key, pos, pos + math.min(budget, 100) - 1, 'WITHSCORES')
        if #got == 0 then break end
        for i = 1, #got, 2 do
          local f = redis.call('HMGET', job_key(got[i]), STATE, TOPIC)
          if f[2] == t and not f[1] then redis.call('ZADD', SCHEDULE, got[i + 1], got[i]) end
        end
        at = got[#got] .. ' ' .. got[#got - 1]
        looked, budget = looked + #got / 2, budget - #got / 2
      end
    end
  end
  if split then
    -- Raised to 3 again meanwhile: the pass out of the schedule next.
    redis.call('HSET', IX, 'phase', '1', 'after', '', 'out', '1')
    redis.call('HDEL', IX, 'split')
    return { DONE, looked, 0 }
  end
  redis.call('HDEL', IX, 'phase', 'after', 'topic', 'rank', 'split', 'out')
  return { DONE, looked, 1 }
end

if phase == '1' then
  -- Delayed jobs of the schedule into their topics' schedules; a leased
  -- job's entry out of its topic's (an older build popped it).
  local pos = 0
  if at ~= '' then
    local sp = string.find(at, ' ', 1, true)
    pos = H.rank_after(tonumber(string.sub(at, 1, sp - 1)), string.sub(at, sp + 1))
  end
  local got = redis.call('ZRANGE', SCHEDULE, pos, pos + budget - 1, 'WITHSCORES')
  for i = 1, #got, 2 do
    local id = got[i]
    local f = redis.call('HMGET', job_key(id), STATE, TOPIC)
    if f[2] then
      if not f[1] then
        H.add(f[2], got[i + 1], id)
        -- Layout 3: its topic schedule is where it lives.
        if split then redis.call('ZREM', SCHEDULE, id) end
      else
        H.remove(f[2], id)
      end
    end
  end
  looked = #got / 2
  if looked == budget then
    redis.call('HSET', IX, 'phase', '1', 'after', got[#got] .. ' ' .. got[#got - 1])
    return { DONE, looked, 0 }
  end
  budget = budget - looked
  phase, topic_at, rank = '2', '', 0
end

-- Phase 2: every topic's schedule (the topics the count hash names, in
-- byte order) loses the entries whose job is not delayed at that time.
local topics = named()
for _, t in ipairs(phase == '2' and topics or {}) do
  if t >= topic_at then
    if t ~= topic_at then rank = 0 end
    local key = KEY.topic_schedule(t)
    while true do
      if budget <= 0 then
        redis.call('HSET', IX, 'phase', '2', 'topic', t, 'rank', rank)
        return { DONE, looked, 0 }
      end
      local got = redis.call('ZRANGE', key, rank, rank + math.min(budget, 100) - 1, 'WITHSCORES')
      if #got == 0 then break end
      for i = 1, #got, 2 do
        local id, due = got[i], tonumber(got[i + 1])
        local f = redis.call('HMGET', job_key(id), STATE, TOPIC)
        -- Layout 3: the entry is the job's time; else the schedule's is,
        -- unless it lacks the job: the way back from layout 3 has not put
        -- it there yet (an older build writes the schedule's entry of every
        -- job it delays).
        local s = split and due or redis.call('ZSCORE', SCHEDULE, id) or due
        if f[2] == t and not f[1] and tonumber(s) == due then
          rank = rank + 1
        else
          H.remove(t, id)
        end
        looked, budget = looked + 1, budget - 1
      end
    end
  end
end

-- Phase 3: each topic's head read again from its schedule, a topic per
-- entry of the budget. The scripts keep the heads from then on; a build
-- before them wrote topic schedules and no heads, so every pass ends so.
if phase == '2' then phase, topic_at = '3', '' end
for _, t in ipairs(topics) do
  if t > topic_at then
    if budget <= 0 then
      redis.call('HSET', IX, 'phase', '3', 'topic', topic_at)
      return { DONE, looked, 0 }
    end
    H.head(t)
    topic_at, looked, budget = t, looked + 1, budget - 1
  end
end
redis.call('HDEL', IX, 'phase', 'after', 'topic', 'rank')
redis.call('HSET', IX, 'done', '1', 'headed', '1')
if split then
  redis.call('HSET', IX, 'split', '1')
elseif st[7] == '1' or st[8] == '1' then
  -- Below 3 again meanwhile: the way back next.
  redis.call('HSET', IX, 'phase', 'back', 'topic', '', 'after', '')
  return { DONE, looked, 0 }
end
return { DONE, looked, 1 }
