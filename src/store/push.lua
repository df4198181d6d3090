-- push.lua: create jobs, or replace (or keep) the jobs with the same ids.
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2..] one or more jobs, PUSH_ARGS (10) arguments each, in order:
--          id, topic, body, ttr ms,
--          delay ms from now (Redis TIME), used when the next is -1,
--          absolute due time (Unix ms) or -1,
--          retry intervals in ms, comma-separated ("" = none),
--          max attempts (0 = no limit beyond the intervals),
--          "replace" or "keep": what to do when the id exists,
--          extra: a JSON object of what the job asks beyond these (tags,
--          dedup, priority, trace context, group), "" for none: a plain job
--          costs no decoding
--
-- Cost per job: O(1) commands, plus O(log N) in the schedule, and one
-- ZADD of the heads for the call (each topic's earliest); a traced
-- job's trace context (extra.traceparent, extra.tracestate) is two more
-- fields in the job's one HSET, an untraced job's none.
-- Touches: job hashes (a replaced job's log and simple dedup record go:
-- JOB.forget), trigger keys, schedule,
-- count hash, the push order ({p}:seq, when a job ties); an existing
-- job's ready list (of its priority, and the topic's levels) or dead set;
-- the indexes of the jobs' tags, old and new (one ZADD per tag; none for a
-- job without tags). Publishes: wake (when one of the jobs is the
-- new earliest), ready (one notice per topic with jobs due already).
-- A job due already (no delay, or an absolute time now or past) is made
-- ready here, not scheduled: ready when the reply returns (issue 49), at
-- the back of its line. That costs make_ready's HSET, LPUSH (or G.push)
-- instead of the schedule's ZADDs and trigger key, and one PUBLISH a topic.
-- A scheduled job that ties (another of its topic due in that ms) takes
-- its push order in its HSET (H.tie_seq: one ZCOUNT per topic and due time
-- a call, one INCRBY a call, one field of about 9 bytes per tied job).
-- Helpers: CALL.due_time, invalid, JOB.upsert (JOB.detach, JOB.schedule, COUNT.add), DEDUPS.push,
-- H.new_head (which also ends the leader's term by the new due time).
--
-- Time: a call that has run 0.85 of CALL.BUDGET_US (CALL.elapsed in
-- lib/call.lua), with room kept for its tail, pushes no more jobs: it
-- replies PARTIAL in place of DONE, with the results of the jobs it
-- pushed (at least 4, the first ones in order); the rest are untouched,
-- for the caller's next call. Its checks, which decode each job's extra
-- before the first write, stop the same way at 0.3 of the budget: the
-- call pushes only the jobs it checked.
--
-- Returns { DONE, then per job: status, due_ms, new_head }: status DONE
-- (created), REPLACED, or KEPT (the id exists and mode is keep: nothing
-- changed, due_ms is its due time); new_head 1 for the job that is now the
-- earliest in the schedule, if one of these is. A push with a dedup key
-- may also get DEDUPLICATED (nothing changed) or DEBOUNCED (the key's
-- pending job took the push), and then a fourth field: that job's id.
--
-- Batches (extra.batch): the job's field BATCH.FIELD and an entry in its
-- partition's live index of the batch (one ZADD); a replaced job of a
-- batch leaves a note for its home (BATCH.left, lib/batches.lua). A job
-- of a batch (only created) is KEPT, nothing written, when its id names a
-- waiting flow's parent (BATCH.waiting_parent: one HGET more): were it
-- pushed, the parent would find its id taken at its release.
-- Cost: a plain job as before (extra "" is never decoded). A grouped job
-- (extra.group): one field more in its HSET, and a replaced job's HMGET
-- reads its old group (nothing is written to the group until the job is
-- ready). A dedup push
-- (DEDUPS.push in lib/dedup.lua): one GET of the key's record, at most one HMGET
-- (+ ZSCORE) of the job it names, then either nothing (deduplicated) or
-- the JOB.upsert plus one SET (simple: and one HSET). Its end (finish, delete,
-- death) costs a GET and a DEL more only for a simple-dedup job.
-- Errors: DQINVALID "job <n>: ..." for a due time past MAX_TIME_MS, or a
-- group while an instance of an older build runs (G.refusal), before any
-- write (a job after the checks' stop is checked in the next call).
--
-- Guarantees: each job is one JOB.upsert, applied in the order given (a later
-- job with the same id sees the earlier one), and the whole call is one
-- atomic step. An existing job is taken out of wherever it is (schedule,
-- ready list, lease, dead set) and rewritten in place, so there is never a
-- second copy, and a stale lease can no longer finish it. No due time is
-- before Redis time's millisecond (a past absolute time means now); jobs
-- of a topic due in the same millisecond become ready in the order pushed
-- (dispatch.lua). Many jobs per call is
-- how delayq pays Redis's cost of a call once for all the pushes that
-- arrive together.
local n = (#ARGV - 1) / PUSH_ARGS
if n < 1 or n ~= math.floor(n) then
  return invalid('push takes ' .. PUSH_ARGS .. ' arguments per job, got ' .. (#ARGV - 1))
end
local dues, extras = {}, {}
-- Groups: why this partition takes no grouped job now (G.refusal), once a
-- call; false: it takes them.
local refused
-- Every job pushed is checked before the first write, and only those:
-- decoding extras (groups, tags, dedup...) costs time, so once the
-- checks have run 0.3 of CALL.BUDGET_US (looked at every 4 decoded
-- jobs, after at least 4 jobs) the call checks and pushes no more and
-- replies PARTIAL; the jobs after it, a bad one among them, go in the
-- caller's next call. Plain jobs ("" extra) cost no look at the clock.
local sent, decoded, looked = n, 0, 0
for j = 1, n do
  if decoded >= looked + 4 and j > 4 then
    looked = decoded
    if CALL.spent(0.3) then
      n = j - 1
      break
    end
  end
  local a = 1 + (j - 1) * PUSH_ARGS
  local due, bad = CALL.due_time(ARGV[a + 5], ARGV[a + 6])
  if not due then return invalid('job ' .. j .. ': ' .. bad) end
  dues[j] = due
  local extra = ARGV[a + 10]
  if extra ~= '' then
    decoded = decoded + 1
    local ok, x = pcall(cjson.decode, extra)
    if not ok or type(x) ~= 'table' then
      return invalid('job ' .. j .. ': extra is not a JSON object')
    end
    -- Priorities: a whole number 0..MAX_PRIORITY (the caller checked it;
    -- this keeps a stored job's level sane whoever calls).
    local pr = x.priority
    if pr ~= nil and (type(pr) ~= 'number' or pr ~= math.floor(pr) or pr < 0 or pr > MAX_PRIORITY) then
      return invalid('job ' .. j .. ': priority must be a whole number from 0 to ' .. MAX_PRIORITY)
    end
    -- Groups: 1 to G.MAX_BYTES bytes, no control character (the
    -- caller checked it; this keeps the group's keys sane whoever calls).
    local g = x.group
    if g ~= nil and (type(g) ~= 'string' or #g < 1 or #g > G.MAX_BYTES or string.find(g, '%c')) then
      return invalid('job ' .. j .. ': group must be 1 to ' .. G.MAX_BYTES .. ' bytes without control characters')
    end
    if g ~= nil then
      if refused == nil then refused = G.refusal() or false end
      if refused then return invalid('job ' .. j .. ': ' .. refused) end
    end
    -- Batches: the batch's id as batch ids are checked (BATCH.valid_id: a
    -- flow's, or 1 to MAX_ID_BYTES, no control character); a job of a batch is only ever created (its
    -- batch's home took its id in first), never replaces nor dedups.
    local b = x.batch
    if b ~= nil and (not BATCH.valid_id(b) or ARGV[a + 9] ~= 'keep' or x.dedup ~= nil) then
      return invalid('job ' .. j .. ': batch must be 1 to ' .. BATCH.MAX_ID_BYTES .. ' bytes without control characters, pushed in keep mode without dedup')
    end
    extras[j] = x
    local d = x.dedup
    if d ~= nil then
      if type(d) ~= 'table' or type(d.key) ~= 'string' or d.key == ''
        or (d.mode ~= 'simple' and d.mode ~= 'throttle' and d.mode ~= 'debounce')
        or (d.mode ~= 'simple' and not (type(d.window_ms) == 'number' and d.window_ms >= 1))
        or (d.max_wait_ms ~= nil and not (type(d.max_wait_ms) == 'number' and d.max_wait_ms >= 1)) then
        return invalid('job ' .. j .. ': dedup needs a key, a mode simple, throttle or debounce, and window_ms >= 1 with throttle and debounce')
      end
    end
  end
end
local reply = { DONE }
local scheduled = {}
-- Jobs made ready at once, per topic (in the order first met): one notice each.
local readied, readied_topics = {}, {}
-- The topics' heads once at the end, not once a job; the push order of
-- ties reserved once for the whole call.
H.heads_later = {}
H.seq_room = n
-- Out of time (CALL.elapsed, looked at every 4 jobs), the call stops after
-- a whole job and replies PARTIAL with the results so far: its caller
-- sends the jobs after them again in a call of their own. Its tail (per
-- topic met: a count written, a head, a notice) is still to run then, so
-- it keeps room for it: a topic's tail costs about what a fifth of a job
-- does (one command of the five or more a job's push runs), measured by
-- this call's own jobs so far. And it stops at 0.85 of the budget: Redis
-- read its arguments before its first TIME (about 0.2 ms for 128 jobs).
local upto = n
local met, topics_met = {}, 0
for j = 1, n do
  if j % 4 == 1 and j > 1 then
    local e = CALL.elapsed()
    if e + e / (j - 1) * topics_met / 5 >= CALL.BUDGET_US * 0.85 then
      upto = j - 1
      break
    end
  end
  local a = 1 + (j - 1) * PUSH_ARGS
  local id, topic = ARGV[a + 1], ARGV[a + 2]
  if not met[topic] then met[topic], topics_met = true, topics_met + 1 end
  local x = extras[j]
  local status, due, put, jid
  if x and x.batch and BATCH.waiting_parent(id) then
    status, due, put = KEPT, dues[j], false
  elseif x and x.dedup then
    status, due, put, jid = DEDUPS.push(id, topic, ARGV[a + 3], ARGV[a + 4], dues[j],
      ARGV[a + 7], ARGV[a + 8], ARGV[a + 9], x, true)
  else
    status, due, put = JOB.upsert(id, topic, ARGV[a + 3], ARGV[a + 4], dues[j],
      ARGV[a + 7], ARGV[a + 8], ARGV[a + 9], x, true)
  end
  reply[#reply + 1] = status
  reply[#reply + 1] = due
  reply[#reply + 1] = 0
  local slot = #reply
  if status == DEDUPLICATED or status == DEBOUNCED then reply[#reply + 1] = jid end
  -- Due already: JOB.upsert made it ready (see CALL.due_time).
  local now_ready = put and H.due_now(due)
  if now_ready then
    if not readied[topic] then readied[topic] = 0; readied_topics[#readied_topics + 1] = topic end
    readied[topic] = readied[topic] + 1
  elseif put then
    scheduled[jid or id] = slot
  end
  if put and EVENTS > 0 then
    EVENT.emit(EV_PUSHED, jid or id, topic, 0, due)
    if now_ready then EVENT.emit(EV_FIRED, jid or id, topic, 0, due) end
  end
end
H.write_heads()
for _, topic in ipairs(readied_topics) do LISTS.notify(topic, readied[topic]) end
-- One look at the head for the whole call: the job that is the earliest now
-- was the earliest when it was scheduled, if it was scheduled here.
local dues = {}
for id, slot in pairs(scheduled) do dues[id] = reply[slot - 1] end
local head = H.head_among(dues)
if head then
  H.new_head(dues[head])
  reply[scheduled[head]] = 1
end
if upto < sent then reply[1] = PARTIAL end
return reply
