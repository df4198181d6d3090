-- list.lua: a page of job ids from a sorted set, in score order, after a
-- cursor: the schedule (delayed jobs by due time, reserved ones by lease
-- end) or a topic's dead set (by time of death); or a page of a topic's
-- ready list, next to be handed out first. Reads only.
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  "schedule", "dead-letters", "history" (a topic's kept records of
--          finished jobs), "ready-list" or "next-dues" (each topic's earliest
--          due time: ARGV[3..] are topics)
-- ARGV[3]  topic ("" with schedule: every topic)
-- With "schedule", "dead-letters" and "history":
-- ARGV[4]  state wanted: "delayed" or "reserved" (schedule), "finished"
--          (history)
-- ARGV[5]  cursor score ("-inf" from the start)   ARGV[6] cursor id ("")
-- ARGV[7]  most ids to return   ARGV[8] most entries to look at
-- With "ready-list":
-- ARGV[4]  where the cursor's job was (index from the push end)
-- ARGV[5]  cursor's job id ("": from the front)
-- ARGV[6]  most ids to return   ARGV[7] how far from ARGV[4] to look for it
-- ARGV[8]  the priority level to list (0: the default list; G.LEVEL: the
--          topic's groups, see below)
--
-- A topic's delayed jobs are read from its own schedule ({p}:s:<topic>),
-- once index.lua has ended a pass ({p}:indexed), else from the schedule.
--
-- Touches: reads the schedule, a topic's schedule, a dead set or a
-- finished index and job hashes, or a ready list and the topic's levels
-- index; in layout 3 every topic's delayed jobs through the heads and the
-- topic schedules. Publishes: nothing.
-- Helpers: job_key, KEY.dead, LISTS.key, LISTS.levels_key, G.line_key, G.index_key.
--
-- Returns, for sorted sets: { DONE, exhausted (1: nothing after the last
-- entry looked at), last score looked at, last id looked at, then id,
-- score ... }; for ready-list: { DONE, index of the last id (from the push end),
-- the next level with jobs after this one (-1: none), then ids, next to be
-- handed out first }. Levels are listed in the order pops take them.
--
-- Guarantees: costs Redis time in proportion to what it looks at (at most
-- ARGV[8] entries, or the page and 2 * ARGV[7] list entries), never to the
-- size of the queue; a page resumes exactly after the entry where the last
-- stopped (score, then id), so no entry is listed twice or skipped while it
-- stays put. Ready lists are pushed at one end and popped at the other, so
-- a page resumes after the cursor's job, found near where it was (pushes
-- and removals move it): a job that stays ready is never skipped. If that
-- job has gone, pops took it and every job before it, and the page starts
-- again at the front; only if it was deleted, or more than ARGV[7] jobs
-- came or went before it, are jobs listed again.
-- Groups (level G.LEVEL): the topic's groups by name, each one's line in
-- hand-out order; ARGV[5] is then the position "<group>\n<last id>" ("": from
-- the first group), ARGV[7] the most groups looked at. Returns { DONE,
-- more (0: the last group was reached), position, then ids }. A position
-- whose job has left its line resumes at the head of that group's line.
if ARGV[2] == 'ready-list' and tonumber(ARGV[8]) == G.LEVEL then
  local topic, pos, want, cap = ARGV[3], ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
  local reply = { DONE, 1, '' }
  local got = 0
  local function take(g, from)
    local ids = redis.call('ZRANGE', G.line_key(topic, g), from, from + want - got - 1)
    for _, id in ipairs(ids) do reply[#reply + 1] = id end
    got = got + #ids
    reply[3] = g .. '\n' .. (ids[#ids] or '')
  end
  local after = '-'
  local nl = string.find(pos, '\n', 1, true)
  if nl then
    local g, last = string.sub(pos, 1, nl - 1), string.sub(pos, nl + 1)
    local rank = last ~= '' and redis.call('ZRANK', G.line_key(topic, g), last)
    take(g, rank and rank + 1 or 0)
    after = '(' .. g
  end
  local looked = 0
  while got < want and looked < cap do
    local names = redis.call('ZRANGEBYLEX', G.index_key(topic), after, '+', 'LIMIT', 0,
      math.min(100, cap - looked))
    if #names == 0 then reply[2] = 0 break end
    for _, g in ipairs(names) do
      looked = looked + 1
      take(g, 0)
      after = '(' .. g
      if got >= want then break end
    end
  end
  return reply
end
if ARGV[2] == 'ready-list' then
  local level = tonumber(ARGV[8]) or 0
  local list = LISTS.key(ARGV[3], level)
  -- One ZRANGEBYSCORE of at most one entry, O(log levels).
  local after_level = redis.call('ZRANGEBYSCORE', LISTS.levels_key(ARGV[3]), '(' .. level, '+inf',
    'LIMIT', 0, 1)[1]
  -- The groups' level, also when a build from before groups dropped it.
  if not after_level and level < G.LEVEL and redis.call('EXISTS', G.index_key(ARGV[3])) == 1 then
    after_level = G.LEVEL
  end
  local at, after = tonumber(ARGV[4]), ARGV[5]
  local limit, near = tonumber(ARGV[6]), tonumber(ARGV[7])
  -- The highest index still to list: the front unless the cursor's job is
  -- found.
  local top = redis.call('LLEN', list) - 1
  if after ~= '' then
    local lo = math.max(0, at - near)
    local around = redis.call('LRANGE', list, lo, at + near)
    local best
    for i, id in ipairs(around) do
      local pos = lo + i - 1
      if id == after and (not best or math.abs(pos - at) < math.abs(best - at)) then
        best = pos
      end
    end
    if best then top = best - 1 end
  end
  local from = math.max(0, top - limit + 1)
  local reply = { DONE, from, tonumber(after_level) or -1 }
  if top >= 0 then
    local ids = redis.call('LRANGE', list, from, top)
    for i = #ids, 1, -1 do reply[#reply + 1] = ids[i] end
  end
  return reply
end

-- A topic's own schedule holds exactly its delayed jobs once the backfill
-- (index.lua) has ended a pass; before, the schedule is walked, unless the
-- layout is 3 (it holds no delayed job this layout wrote).
local indexed = redis.call('HGET', P .. INDEXED_KEY, 'done') == '1' or H.split()

-- Whether `id` is a delayed job of `topic` due at `due`: an entry an older
-- build left in the topic's schedule may not be (its job gone, handed
-- over, or due at another time).
local function delayed_at(id, topic, due)
  local f = redis.call('HMGET', job_key(id), STATE, TOPIC)
  if f[2] ~= topic or f[1] then return false end
  local s = H.due(id, topic)
  return s ~= false and tonumber(s) == tonumber(due)
end

if ARGV[2] == 'next-dues' then
  -- Each topic's (ARGV[3..]) earliest due time, -1 if it has no delayed
  -- job, -2 if unknown here (not indexed yet, or its first 8 entries
  -- stale): O(log N) per topic.
  local reply = { DONE }
  for i = 3, #ARGV do
    local due = -2
    if indexed then
      local got = redis.call('ZRANGE', KEY.topic_schedule(ARGV[i]), 0, 7, 'WITHSCORES')
      if #got == 0 then due = -1 end
      for j = 1, #got, 2 do
        if delayed_at(got[j], ARGV[i], got[j + 1]) then due = tonumber(got[j + 1]) break end
      end
    end
    reply[#reply + 1] = due
  end
  return reply
end

local from_dead = ARGV[2] == 'dead-letters'
local topic, want_state = ARGV[3], ARGV[4]
local key = SCHEDULE
if from_dead then key = KEY.dead(topic) end
-- A topic's delayed jobs: its own schedule, in due order, whatever other
-- topics hold; each entry is checked against the job.
local own = indexed and key == SCHEDULE and ARGV[2] ~= 'history' and topic ~= ''
  and want_state == DELAYED
if own then key = KEY.topic_schedule(topic) end
-- A topic's finished index (newest first): entries whose record expired
-- or was taken by a new job are skipped, as the schedule's of another
-- state are.
if ARGV[2] == 'history' then key = P .. FINISHED_KEY .. topic end
local after_score, after_id = ARGV[5], ARGV[6]
local limit, cap = tonumber(ARGV[7]), tonumber(ARGV[8])

local bytes_before = H.bytes_before

-- The rank in `k` of the first entry after the cursor, found without
-- reading the entries before it (H.rank_after in lib/schedule.lua: a topic
-- schedule in the merge below holds entries of the cursor's score before
-- and after its id): a page starts in O(log^2 N) however many entries
-- share a score, and a forged cursor costs no more than the server's own.
local function exact_rank_after(k)
  if after_score == '-inf' then return 0 end
  return H.rank_after(after_score, after_id, k)
end

-- Every topic's delayed jobs in layout 3: they are in the topic schedules
-- only (an earlier layout wrote them to both). A merge led by the heads: the topics in head order,
-- each one's entries after the cursor (once the page is full, only those
-- not after its last), until a head comes after the page's last; each
-- entry is checked against the job. O(log N) a topic whose head is before
-- the page's end (those listed before the cursor, and those due with the
-- page), and about limit x ln(topics) entries read; the heads after the
-- page's end are never read.
if key == SCHEDULE and topic == '' and want_state == DELAYED and H.split() then
  local after = function(s, id)
    if after_score == '-inf' then return true end
    local c = tonumber(after_score)
    return s > c or (s == c and bytes_before(after_id, id))
  end
  local cands, seen_ids = {}, {}
  local function page_end()
    if #cands < limit then return nil end
    return cands[limit][1]
  end
  local function consider(id, s, t)
    if seen_ids[id] or not after(s, id) then return end
    if delayed_at(id, t, s) then
      seen_ids[id] = true
      cands[#cands + 1] = { s, id }
    end
  end
  local function from(k, t)
    local pos = exact_rank_after(k)
    -- A full page takes from this topic only what is not after its end,
    -- and the end falls as topics come in: a page reads about
    -- limit x ln(topics) entries, not limit a topic.
    local n, e = limit, page_end()
    if e then n = math.min(n, redis.call('ZCOUNT', k, '-inf', string.format('%.17g', e)) - pos) end
    if n <= 0 then return end
    local got = redis.call('ZRANGE', k, pos, pos + n - 1, 'WITHSCORES')
    for i = 1, #got, 2 do
      local id, s = got[i], tonumber(got[i + 1])
      consider(id, s, t)
    end
    table.sort(cands, function(a, b)
      if a[1] ~= b[1] then return a[1] < b[1] end
      return bytes_before(a[2], b[2])
    end)
    for i = #cands, limit + 1, -1 do seen_ids[cands[i][2]] = nil; cands[i] = nil end
  end
  -- The heads in order, a batch at a time (by rank, O(log T) a batch),
  -- only as far as the page's end: never every topic's.
  local n, at, done = math.min(limit, 99) + 1, 0, false
  while not done do
    local heads = redis.call('ZRANGE', P .. HEADS_KEY, at, at + n - 1, 'WITHSCORES')
    done = #heads < 2 * n
    for i = 1, #heads, 2 do
      local e = page_end()
      if e and tonumber(heads[i + 1]) > e then done = true break end
      from(KEY.topic_schedule(heads[i]), heads[i])
    end
    at = at + n
  end
  local reply = { DONE, #cands < limit and 1 or 0, after_score, after_id }
  if #cands > 0 then reply[3], reply[4] = cands[#cands][1], cands[#cands][2] end
  for _, c in ipairs(cands) do
    reply[#reply + 1] = c[2]
    reply[#reply + 1] = c[1]
  end
  return reply
end

local pos = exact_rank_after(key)

-- Then entries by rank, each read once, at most `cap` of them.
local found, seen = {}, 0
local last_score, last_id = after_score, after_id
local exhausted = 0
while #found < limit * 2 and seen < cap do
  local n = math.min(100, cap - seen)
  local batch = redis.call('ZRANGE', key, pos, pos + n - 1, 'WITHSCORES')
  if #batch == 0 then exhausted = 1 break end
  pos = pos + #batch / 2
  for i = 1, #batch, 2 do
    local id, score = batch[i], batch[i + 1]
    seen = seen + 1
    last_score, last_id = score, id
    local take = from_dead
    if own then
      take = delayed_at(id, topic, score)
    elseif not from_dead then
      local f = redis.call('HMGET', job_key(id), STATE, TOPIC)
      local st = f[1] or DELAYED
      take = f[2] and st == want_state and (topic == '' or f[2] == topic)
    end
    if take then
      found[#found + 1] = id
      found[#found + 1] = score
    end
    if #found >= limit * 2 then break end
  end
  -- A short batch read to the end: nothing comes after its last entry.
  if #batch / 2 < n and last_id == batch[#batch - 1] then exhausted = 1 break end
end
local reply = { DONE, exhausted, last_score, last_id }
for _, v in ipairs(found) do reply[#reply + 1] = v end
return reply
