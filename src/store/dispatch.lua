-- dispatch.lua: hand due jobs over. The one dispatch path.
--
-- The expired-event subscriber calls it with the ids whose trigger keys
-- expired; the sweep calls it with no ids, meaning "every job due now".
-- A due delayed job becomes ready. A due reserved job's lease has run out:
-- that attempt failed, and its retry policy decides (ready again at once,
-- delayed, or dead).
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  most jobs to move in this call (bounds the script's run time)
-- ARGV[3]  dead-letter retention: most dead jobs per topic
-- ARGV[4]  dead-letter retention: longest age, ms
-- ARGV[5]  trigger horizon, ms: a sweep arms the trigger keys of the jobs
--          due within it (0: arms none)
-- ARGV[6]  m: topics the caller has idle waiters on, then m pairs
--          (topic, how many): jobs made ready on them are the caller's to
--          wake its own waiters for, up to that many, and not announced
-- ARGV[7+2m..] ids to check (optional; none = sweep the schedule)
--
-- Touches: schedule, topic schedules and heads ({p}:s:<topic>,
-- {p}:heads), trigger keys, the watermark ({p}:armed), job hashes, ready
-- lists, dead sets, count hash. Publishes: ready (one notice per
-- topic).
-- Helpers: JOB.unschedule, H.remove, H.head, H.in_push_order, JOB.make_ready,
-- COUNT.flush, CALL.elapsed, CALL.spent, RETRIES.fail,
-- LISTS.notify, H.next_due, H.arm_ahead, CALL.in_chunks.
-- Cost per delayed job moved: HMGET, HSET, LPUSH (JOB.make_ready); a call of
-- more than one job removes them from the schedules once (one ZREM of the
-- shared schedule, per topic one ZREM and one head update, one DEL of the
-- trigger keys), a call of one job per job (ZREM, ZREM and a head update,
-- DEL).
-- Groups: a grouped job due goes to its group's line (G.push: HINCRBY,
-- ZADD, HMGET, and HSETNX, LPUSH, ZADD when its group enters the
-- rotation); a grouped lease that ran out gives its slot back (G.free:
-- HINCRBY, HMGET, EXISTS, at most HSETNX, LPUSH, ZADD, PUBLISH). A plain
-- job: one field more in its HMGET, nothing else.
--
-- Time: the clock a call looks at (CALL.spent in lib/call.lua) counts all
-- it does. It reads the due entries up to 0.3 of CALL.BUDGET_US (an
-- event call its named ids up to 0.15), reads the jobs behind them while
-- there is time to move them, then makes them ready topic by topic, each
-- topic's tail with it, up to 0.9; at most `limit` jobs either way. Out
-- of time, it stops at a safe point, the rest left due for the next call,
-- and arms nothing. So a call stays about as short whether its jobs are
-- in one topic or in a thousand topics or groups.
--
-- Returns { DONE, now_us, moved, next_due_ms or -1 (a call with ids does
--           not look: -1, or now if it left due jobs for lack of time, for
--           its caller to wake the sweep), armed (schedule entries
--           the sweep's arming looked at, at most ARGV[2]), next_arm_ms
--           (Redis time at which the sweep should arm again, or -1: a call
--           with ids), #topics,
--           then per topic: topic, moved, retried, died, local (ready
--           jobs left to the caller's waiters, not announced),
--           then per moved job: lateness in us (now - due), grouped by
--           topic in the order above (each topic's "moved" of them) }.
-- ("retried" and "died" count reserved jobs whose lease ran out.)
--
-- Guarantees: a job moves only if its schedule entry exists and its score is
-- <= Redis TIME (never early). Moving removes or replaces the entry, so
-- however many callers race (events, sweeps, other delayq instances), each
-- due time moves the job exactly once. Each topic that got more ready jobs
-- than the caller's idle waiters take gets one "<count> <topic>" notice on
-- {p}:ready for the rest.
local now = now_us()
local now_ms = math.floor(now / 1000)
local limit = tonumber(ARGV[2])
local dead_max, dead_age = tonumber(ARGV[3]), tonumber(ARGV[4])

-- The sweep reads the due entries with their scores; ids from expired
-- events are looked up together.
local horizon = tonumber(ARGV[5])
local waiting = {}
local m = tonumber(ARGV[6])
for i = 7, 6 + 2 * m, 2 do waiting[ARGV[i]] = tonumber(ARGV[i + 1]) end
local first_id = 7 + 2 * m
local ids, scores, from_topic = {}, {}, {}
-- Event path, layout 3: the job fields read to find a job's topic
-- schedule (by place in ids), used again by the move below; and the
-- places whose score the shared schedule gave (only those have an entry
-- there to remove).
local fields, shared, unread = {}, {}, {}
local sweeping = #ARGV < first_id
local split = H.split()
-- Ties (issue 49): jobs of a topic due in the same millisecond become
-- ready in push order (their SEQ, lib/order.lua), so a call moves a
-- millisecond's due jobs of a topic all together or none of them: of a
-- read that filled its limit (`got`, id and score pairs), how many elements
-- to keep: all but the entries of its last due time, unless every entry
-- has that time (then a millisecond with more jobs than the limit goes
-- over several calls, and its order holds within each: the second value,
-- true, says so).
local function whole_ms(got, full)
  if not full then return #got, false end
  if #got < 4 then return #got, true end
  local last, i = got[#got], #got - 2
  while i >= 2 and got[i] == last do i = i - 2 end
  if i < 2 then return #got, true end
  return i, false
end
-- Topics whose due jobs from this time (ms) on wait for the next call,
-- their millisecond cut by the limit (or every due job: -math.huge).
local cut = {}
-- Topics whose read was one millisecond that filled the room: it may
-- hold more jobs than this call reads, so it goes over several calls, its
-- push order held within each (whole_ms); out of time, the first step
-- stops taking it part-way too, not reading what the second has no time
-- to move (a burst due at one instant).
local spill = {}
-- Whether the call ran out of time (CALL.spent) and left due jobs.
local left = false
-- Ids (by place) that are not the caller's: their trigger keys go too.
local extra = {}
-- Admits entries of topic schedules ({ id, topic, due }) not in `seen`.
-- While the schedule holds delayed jobs too (layouts 1 and 2) it decides:
-- an entry found here moves at the schedule's time, once whichever set
-- listed it; one that disagrees (an older build, which keeps no topic
-- schedule, moved the job) is put right here, so that no stale head stays
-- due. An entry the shared schedule lacks is the job's time if the job is
-- delayed in this topic: layout 3 keeps delayed jobs there only, and the
-- way back from it puts them into the shared schedule a batch at a time.
-- (An older build writes the shared entry of every job it delays: one it
-- lacks that decides was moved by it.) In layout 3 the entry is trusted
-- without the HMGET: the move below checks the state. `extras`: the
-- entries are not the caller's ids (the event path).
local function admit(found, seen, extras)
  for from = 1, #found, 500 do
    local part = {}
    for j = from, math.min(from + 499, #found) do part[#part + 1] = found[j][1] end
    local got = redis.call('ZMSCORE', SCHEDULE, unpack(part))
    for j = 1, #part do
      local id, t, own = found[from + j - 1][1], found[from + j - 1][2], found[from + j - 1][3]
      local s = got[j]
      if not s then
        if split then
          s = own
        else
          local f = redis.call('HMGET', job_key(id), STATE, TOPIC)
          if not f[1] and f[2] == t then s = own end
        end
      end
      if s and tonumber(s) == tonumber(own) then
        if not seen[id] then
          seen[id] = true
          ids[#ids + 1] = id
          scores[#ids] = s
          from_topic[id] = t
          if extras then
            extra[#ids] = true
            shared[#ids] = got[j] and true
          end
        end
      else
        local f = s and redis.call('HMGET', job_key(id), STATE, TOPIC)
        if f and not f[1] and f[2] == t then
          redis.call('ZADD', KEY.topic_schedule(t), s, id)
          H.head(t)
        else
          H.remove(t, id)
        end
      end
    end
  end
end
if not sweeping then
  for i = first_id, #ARGV do ids[#ids + 1] = ARGV[i] end
  -- One ZMSCORE per 500 ids, not a ZSCORE each: after a burst the sweep
  -- has moved most of them already, and a command per id was most of
  -- what their late events cost. (A missing entry reads as false.)
  for from = 1, #ids, 500 do
    local got = redis.call('ZMSCORE', SCHEDULE, unpack(ids, from, math.min(from + 499, #ids)))
    for j = 1, #got do
      scores[from + j - 1] = got[j]
      shared[from + j - 1] = got[j] and true
    end
  end
  -- Layout 3: a delayed job's time is in its topic schedule only. The
  -- ids the schedule lacks: only a delayed job's is looked up, one
  -- ZMSCORE per topic and 500 ids (a late event's job has mostly moved).
  -- Out of time (CALL.spent at 0.15 of the budget, every 8 reads), the
  -- ids not read wait for the sweep (`unread`; the reply wakes it): the
  -- ties read below may still take them, as any job of their millisecond.
  if split then
    local by_topic, order, reads = {}, {}, 0
    for k, id in ipairs(ids) do
      if not scores[k] and (left or (reads % 8 == 7 and CALL.spent(0.15))) then
        left, unread[k] = true, true
      elseif not scores[k] then
        reads = reads + 1
        local f = redis.call('HMGET', job_key(id), STATE, TOPIC, TTR, PRIORITY, GROUP, H.SEQ)
        fields[k] = f
        if f[2] and not f[1] then
          if not by_topic[f[2]] then by_topic[f[2]] = {}; order[#order + 1] = f[2] end
          local l = by_topic[f[2]]
          l[#l + 1] = k
        end
      end
    end
    for _, t in ipairs(order) do
      local l = by_topic[t]
      for from = 1, #l, 500 do
        local part = {}
        for j = from, math.min(from + 499, #l) do part[#part + 1] = ids[l[j]] end
        local got = redis.call('ZMSCORE', KEY.topic_schedule(t), unpack(part))
        for j = 1, #got do scores[l[from + j - 1]] = got[j] end
      end
    end
  end
  -- Ties: an expired event may name one job of a millisecond before the
  -- others. Each topic of a due delayed job named here moves its due jobs
  -- up to the latest named (the others' events then find nothing): one
  -- HMGET per due id (the move's own, read here), and per topic one ZRANGE
  -- of at most the limit's room, one ZMSCORE per 500 found.
  local bound, order = {}, {}
  for k, id in ipairs(ids) do
    local sc = scores[k] and tonumber(scores[k])
    if sc and sc <= now_ms then
      local f = fields[k]
      if not f then
        f = redis.call('HMGET', job_key(id), STATE, TOPIC, TTR, PRIORITY, GROUP, H.SEQ)
        fields[k] = f
      end
      local t = f[2]
      if t and not f[1] then
        if not bound[t] then order[#order + 1] = t end
        bound[t] = math.max(bound[t] or sc, sc)
      end
    end
  end
  -- The ties read: as many more as the call was named ids, and 64 (a
  -- burst's others are the sweep's).
  local seen, found, room = {}, {}, math.min(limit - #ids, #ids + 64)
  for k, id in ipairs(ids) do
    if not unread[k] then seen[id] = true end
  end
  local held = false
  for n, t in ipairs(order) do
    if room <= 0 then break end
    -- Out of time: this topic's due jobs, named or not, wait whole for the
    -- sweep (woken by the reply), so none moves before an earlier one of
    -- its millisecond that was not read.
    if held or (n % 16 == 0 and CALL.spent(0.3)) then
      held, left, cut[t] = true, true, -math.huge
    else
      local got = redis.call('ZRANGE', KEY.topic_schedule(t), '-inf', bound[t], 'BYSCORE', 'LIMIT', 0, room, 'WITHSCORES')
      local keep, spills = whole_ms(got, #got / 2 >= room)
      if keep < #got then cut[t] = tonumber(got[keep + 2]) end
      spill[t] = spills
      room = room - #got / 2
      for i = 1, keep, 2 do
        if not seen[got[i]] then found[#found + 1] = { got[i], t, got[i + 1] } end
      end
    end
  end
  admit(found, seen, true)
else
  local due = redis.call('ZRANGEBYSCORE', SCHEDULE, '-inf', now_ms, 'WITHSCORES', 'LIMIT', 0, limit)
  local seen = {}
  for i = 1, whole_ms(due, #due / 2 >= limit), 2 do
    ids[#ids + 1] = due[i]
    scores[#ids] = due[i + 1]
    seen[due[i]] = true
  end
  -- The delayed jobs due, through the heads: the topics whose earliest job
  -- is due, then each one's due entries (see admit). The schedule's due
  -- entries count against `limit`: a call looks at `limit` entries at
  -- most, whichever sets list them.
  local room = limit - #due / 2
  local found = {}
  for n, t in ipairs(redis.call('ZRANGE', P .. HEADS_KEY, '-inf', now_ms, 'BYSCORE', 'LIMIT', 0, limit)) do
    if room <= 0 then break end
    -- Out of time: the topics after this one wait for the next call.
    if n % 16 == 0 and CALL.spent(0.3) then left = true break end
    local got = redis.call('ZRANGE', KEY.topic_schedule(t), '-inf', now_ms, 'BYSCORE', 'LIMIT', 0, room, 'WITHSCORES')
    -- A head with nothing due behind it: read again.
    if #got == 0 then H.head(t) end
    local keep, spills = whole_ms(got, #got / 2 >= room)
    spill[t] = spills
    room = room - #got / 2
    for i = 1, keep, 2 do found[#found + 1] = { got[i], t, got[i + 1] } end
  end
  admit(found, seen, false)
end

-- Two steps. The first reads each due job (HMGET) and decides: a lease
-- that ran out is failed at once (RETRIES.fail), a delayed job is put
-- among the movers, nothing written yet. The second makes the movers
-- ready topic by topic, each topic's whole tail with it (its schedule
-- entries out, its head, its notice, its counts), so the clock it looks
-- at counts everything the call does: out of time, it stops at a safe
-- point and the movers after it stay as they are, due, for the next call.
local taken, moved = 0, 0
local topics = {}
local per = {}
-- A call moving many jobs takes them out of the shared schedule and
-- deletes their trigger keys once at its end (one ZREM, one DEL, each
-- O(the jobs moved)); a topic schedule once per topic. A call of one job
-- writes as it goes.
local out, out_triggers
if #ids > 1 then out, out_triggers = {}, {} end
-- An id named twice is handled once: its first handling took or replaced
-- its entry (a lease that ran out may even have been delayed again).
local handled = {}
-- The first step takes no more than the second has time to move: making
-- a job ready costs about twice reading it (four times a grouped job's),
-- so it stops once it has used a third (a fifth) of the time left before
-- 0.9 of the budget when it began (`from`; looked at every 8 jobs, once
-- it took one). Then it takes no new work: a millisecond of a topic it
-- began taking (`begun`: topic -> due ms) is still taken whole, its ties
-- in push order, unless it spills over calls anyway (`spill`); any other
-- job waits for the next call. A shared schedule
-- entry's topic is not known before its HMGET: its millisecond
-- (`shared_ms`, the entries being in due order) is taken whole across
-- topics.
local from = CALL.elapsed()
local share = 1 / 3
local function read_enough()
  return CALL.elapsed() >= from + (CALL.BUDGET_US * 0.9 - from) * share
end
local stopping, since, begun, shared_ms = false, 0, {}, nil
-- The delayed jobs to make ready, per topic in the order topics were met:
-- { due, SEQ (0: none), place, id, topic, level, group }.
local movers, mover_topics = {}, {}
local function add_to(t)
  if not per[t] then
    per[t] = { 0, 0, 0, {}, 0 }
    topics[#topics + 1] = t
  end
  return per[t]
end
for k, id in ipairs(ids) do
  if taken >= limit then break end
  local score = scores[k]
  local hold = false
  if score and tonumber(score) <= now_ms and not handled[id] then
    score = tonumber(score)
    if not stopping and since >= 8 and taken > 0 then since, stopping = 0, read_enough() end
    if stopping then
      local t = (fields[k] and fields[k][2]) or from_topic[id]
      if t then hold = begun[t] ~= score or spill[t] else hold = shared_ms ~= score end
      left = left or hold
    end
  end
  if hold then
    -- Left for the next call, untouched.
  elseif score and tonumber(score) <= now_ms and not handled[id] then
    score = tonumber(score)
    since = since + 1
    if not fields[k] and not from_topic[id] then shared_ms = score end
    local f = fields[k] or redis.call('HMGET', job_key(id), STATE, TOPIC, TTR, PRIORITY, GROUP, H.SEQ)
    handled[id] = true
    local topic = f[2]
    local state = topic and state_of(f[1])
    if state == DELAYED and cut[topic] and score >= cut[topic] then
      -- Its millisecond was cut by the limit: the next call moves it.
      left = true
    elseif state == DELAYED then
      taken = taken + 1
      local l = movers[topic]
      if not l then
        l = {}
        movers[topic] = l
        mover_topics[#mover_topics + 1] = topic
      end
      l[#l + 1] = { score, tonumber(f[6]) or 0, k, id, topic, LISTS.level_of(f[4]), f[5] }
      if f[5] then share = 1 / 5 end
      begun[topic] = score
    elseif state == RESERVED then
      taken = taken + 1
      moved = moved + 1
      -- A failed attempt's writes: a few times a read's.
      since = since + 3
      -- RETRIES.fail takes it out of the schedule.
      local became = RETRIES.fail(id, topic, math.ceil(now / 1000),
        'lease expired (ttr ' .. f[3] .. ' ms)', nil, dead_max, dead_age)
      EVENT.failed(id, topic, became)
      local p = add_to(topic)
      p[1] = p[1] + 1
      if became == DEAD then p[3] = p[3] + 1 else p[2] = p[2] + 1 end
      if became == READY then p[5] = p[5] + 1 end
      p[4][#p[4] + 1] = now - score * 1000
    else
      -- No job behind the entry: nothing to hand over. (Its topic is
      -- unknown unless a topic schedule listed it; the topic's listing
      -- skips an entry whose job is gone.)
      JOB.unschedule(id, topic or from_topic[id])
    end
    -- Listed by another topic's schedule than the job's own: stale there.
    local via = from_topic[id]
    if via and topic and via ~= topic then H.remove(via, id) end
  end
end

-- The second step. Into their lines in (due, push order), a topic's
-- movers sorted only when out of that order (H.in_push_order).
-- Out of time (CALL.spent at 0.9 of the budget, looked at every 8 units
-- of work: a plain job 1, a grouped one 3, a topic's tail 4), the call
-- makes no more movers ready: the rest keep their schedule entries and
-- trigger keys, due, and `left` says so. A topic's movers go in order, so
-- what stays of a millisecond comes after what moved in push order too
-- (the first step took the millisecond whole, for the order to be
-- known). The first topic's first job always moves: every call makes
-- progress.
local late, work = false, 0
-- A topic's ready jobs beyond those its caller's idle waiters take: one
-- notice, once (p[6]: how many the caller's waiters take).
local function tell(topic)
  local p = per[topic]
  if p[6] then return end
  p[6] = math.min(p[5], waiting[topic] or 0)
  if p[5] > p[6] then LISTS.notify(topic, p[5] - p[6]) end
end
for n, topic in ipairs(mover_topics) do
  if not late and n > 1 and work >= 8 then work, late = 0, CALL.spent(0.9) end
  if late then
    left = true
  else
    local l = H.in_push_order(movers[topic])
    local p, gone = add_to(topic), {}
    for i, m in ipairs(l) do
      if not late and work >= 8 then work, late = 0, CALL.spent(0.9) end
      if late then
        left = true
        break
      end
      -- A grouped job's move (G.push) runs about three times a plain one's
      -- commands.
      work = work + (m[7] and 3 or 1)
      local id, k = m[4], m[3]
      if not out then
        if sweeping then
          JOB.unschedule(id, topic)
        else
          -- Called with the ids of expired triggers: there is no trigger
          -- key left to delete, and a shared schedule's entry only if it
          -- gave the score.
          if shared[k] then redis.call('ZREM', SCHEDULE, id) end
          H.remove(topic, id)
        end
      else
        if sweeping or shared[k] then out[#out + 1] = id end
        if sweeping or extra[k] then out_triggers[#out_triggers + 1] = KEY.trigger(id) end
        gone[#gone + 1] = id
      end
      JOB.make_ready(id, topic, DELAYED, m[1], m[6], m[7])
      if EVENTS > 0 then EVENT.emit(EV_FIRED, id, topic, nil, m[1]) end
      moved = moved + 1
      p[1] = p[1] + 1
      p[5] = p[5] + 1
      p[4][#p[4] + 1] = now - m[1] * 1000
    end
    -- The topic's tail: its schedule's entries and head, its notice, its
    -- counts (COUNT.flush writes what the call gathered so far).
    local key, removed = KEY.topic_schedule(topic), 0
    CALL.in_chunks(gone, function(...) removed = removed + redis.call('ZREM', key, ...) end)
    if removed > 0 then H.head(topic) end
    tell(topic)
    COUNT.flush()
    work = work + 4
  end
end
if out then
  CALL.in_chunks(out, function(...) redis.call('ZREM', SCHEDULE, ...) end)
  CALL.in_chunks(out_triggers, function(...) redis.call('DEL', ...) end)
end

-- The sweep arms the jobs that came within the horizon (bounded like the
-- moves); the event path arms nothing.
-- A call that ran out of time arms nothing: the next comes at once.
local armed, next_arm = 0, -1
if sweeping and horizon > 0 and not left then
  armed, next_arm = H.arm_ahead(now_ms, horizon, limit)
end

-- The next due time is the sweep's to sleep on; a call with ids (the
-- event path) has no use for it and does not look.
-- A call with ids that left due jobs says now, for its caller to wake the
-- sweep: their trigger keys have expired.
local next_due = -1
if sweeping then next_due = H.next_due() elseif left then next_due = now_ms end
local reply = { DONE, now, moved, next_due, armed, next_arm, #topics }
for _, topic in ipairs(topics) do
  local p = per[topic]
  tell(topic)
  reply[#reply + 1] = topic
  reply[#reply + 1] = p[1]
  reply[#reply + 1] = p[2]
  reply[#reply + 1] = p[3]
  reply[#reply + 1] = p[6]
end
for _, topic in ipairs(topics) do
  for _, l in ipairs(per[topic][4]) do reply[#reply + 1] = l end
end
return reply
