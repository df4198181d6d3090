-- tag_reschedule.lua: move a page of a tag's jobs in one partition to a new
-- due time, those not handed out.
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  tag
-- ARGV[3]  cursor: the last id of the previous page ("" from the start)
-- ARGV[4]  most entries to look at (1..MAX_TAG_PAGE)
-- ARGV[5]  shift ms (may be negative), used when ARGV[6] is -1: each job's
--          new due time is its own plus the shift
-- ARGV[6]  absolute due time, Unix ms, or -1
-- ARGV[7]  "1": only check that every move is possible, change nothing
--          (a move over several partitions checks them all first)
--
-- Touches: the tag's index, the jobs' hashes, trigger keys, the schedule,
-- ready lists; count hash. Publishes: wake (when one of the jobs is the new
-- earliest; H.new_head). Events: rescheduled, per job moved. Helpers: TAG.page,
-- CALL.due_time, invalid, JOB.delay.
-- Groups: a ready or reserved job's group is read (one HGET) to leave its
-- group's line or give its slot back.
--
-- Returns { DONE, last id looked at ("" when the index ends in this page),
-- how many jobs were moved (checked: would be), new_head (1: one of them is now the earliest),
-- then id, state of each job left alone }.
-- Errors: DQINVALID for a due time past MAX_TIME_MS, before any write.
--
-- Cost: one ZRANGEBYLEX, one HMGET and one ZSCORE or HGET per entry; per
-- moved job what reschedule.lua does (JOB.delay: ZREM/ZADD on the schedule,
-- SET of the trigger, HDEL; a ready job's list entry stays, skipped by the
-- pop that reaches it); one ZRANGE for the head. Bounded by the page,
-- never by the backlog.
--
-- Guarantees: delayed and ready jobs become delayed until the new time,
-- keeping every invariant reschedule.lua keeps (the same JOB.delay); never
-- before Redis time (a time in the past means now). Reserved jobs (handed
-- out) and dead ones are left as they are and reported. The page is one
-- atomic step: all its moves, or, for a time out of range, none.
local limit = tonumber(ARGV[4])
if not limit or limit < 1 or limit > MAX_TAG_PAGE then
  return invalid('limit must be 1 to ' .. MAX_TAG_PAGE)
end
local shift, at = tonumber(ARGV[5]), tonumber(ARGV[6])
local live, last = TAG.page(ARGV[2], ARGV[3], limit)
local moves, skipped = {}, {}
for _, j in ipairs(live) do
  if j.state == DELAYED or j.state == READY then
    local due, bad
    if at >= 0 then
      due, bad = CALL.due_time(0, at)
    else
      local old
      if j.state == DELAYED then
        old = tonumber(H.due(j.id, j.topic))
      else
        old = tonumber(redis.call('HGET', job_key(j.id), DUE))
      end
      -- CALL.due_time takes a time in the past as now.
      due, bad = CALL.due_time(0, math.max(0, (old or 0) + shift))
    end
    if not due then return invalid('job ' .. j.id .. ': ' .. bad) end
    moves[#moves + 1] = { j = j, due = due }
  else
    skipped[#skipped + 1] = j.id
    skipped[#skipped + 1] = j.state
  end
end
if ARGV[7] == '1' then return { DONE, last, #moves, 0 } end
for _, m in ipairs(moves) do
  JOB.delay(m.j.id, m.j.state, m.j.topic, m.due)
end
-- One look at the head for the page, as push.lua does.
local head_moved = 0
local dues = {}
for _, m in ipairs(moves) do dues[m.j.id] = m.due end
local head = H.head_among(dues)
if head then
  H.new_head(dues[head])
  head_moved = 1
end
local reply = { DONE, last, #moves, head_moved }
for _, v in ipairs(skipped) do reply[#reply + 1] = v end
return reply
