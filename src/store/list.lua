-- list.lua: a page of job ids from a sorted set, in score order, after a
-- cursor: the schedule (delayed jobs by due time, reserved ones by lease
-- end) or a topic's dead set (by time of death). Reads only.
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  "schedule" or "dead-letters"
-- ARGV[3]  topic ("" with schedule: every topic)
-- ARGV[4]  state wanted in the schedule: "delayed" or "reserved"
-- ARGV[5]  cursor score ("-inf" from the start)   ARGV[6] cursor id ("")
-- ARGV[7]  most ids to return   ARGV[8] most entries to look at
--
-- Touches: reads the schedule or dead set and job hashes. Publishes:
-- nothing. Helpers: job_key, dead_key.
--
-- Returns { DONE, exhausted (1: nothing after the last entry looked at),
--           last score looked at, last id looked at, then id, score ... }.
--
-- Guarantees: costs Redis time in proportion to what it looks at (at most
-- ARGV[8] entries), never to the size of the queue; a page resumes exactly
-- after the entry where the last stopped (score, then id), so no entry is
-- listed twice or skipped while it stays put.
local from_dead = ARGV[2] == 'dead-letters'
local topic, want_state = ARGV[3], ARGV[4]
local key = SCHEDULE
if from_dead then key = dead_key(topic) end
local after_score, after_id = ARGV[5], ARGV[6]
local limit, cap = tonumber(ARGV[7]), tonumber(ARGV[8])
local start = after_score
local found, seen = {}, 0
local last_score, last_id = after_score, after_id
local exhausted = 0
local offset = 0
while #found < limit * 2 and seen < cap do
  local batch = redis.call('ZRANGE', key, start, '+inf', 'BYSCORE', 'LIMIT', offset, 100, 'WITHSCORES')
  if #batch == 0 then exhausted = 1 break end
  offset = offset + #batch / 2
  for i = 1, #batch, 2 do
    local id, score = batch[i], batch[i + 1]
    local s = tonumber(score)
    if not (after_id ~= '' and s == tonumber(after_score) and id <= after_id) then
      seen = seen + 1
      last_score, last_id = score, id
      local take = from_dead
      if not from_dead then
        local f = redis.call('HMGET', job_key(id), STATE, TOPIC)
        local st = f[1] or DELAYED
        take = f[2] and st == want_state and (topic == '' or f[2] == topic)
      end
      if take then
        found[#found + 1] = id
        found[#found + 1] = score
      end
      if #found >= limit * 2 or seen >= cap then break end
    end
  end
end
local reply = { DONE, exhausted, last_score, last_id }
for _, v in ipairs(found) do reply[#reply + 1] = v end
return reply
