-- dispatch.lua: hand due jobs over to their topic's ready list.
--
-- The one dispatch path. The expired-event subscriber calls it with the ids
-- whose trigger keys expired; the sweep calls it with no ids, meaning "every
-- job due now". Delayed jobs and reserved jobs whose lease ran out are both
-- just "due": both go (back) to ready.
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix      "{p}:"
-- ARGV[2]  most jobs to move in this call (bounds the script's run time)
-- ARGV[3..] ids to check (optional; none = sweep the schedule)
--
-- Returns { now_us (Redis TIME in microseconds), moved, next_due_ms or -1,
--           topic1, count1, topic2, count2, ... }.
--
-- Guarantees: a job moves only if its schedule entry exists and its score is
-- <= Redis TIME (never early). Moving removes the entry, so however many
-- callers race (events, sweeps, other delayq instances), each due time moves
-- the job exactly once. For each topic that got jobs, "<count> <topic>" is
-- published so waiting consumers in every instance wake up.
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now_us / 1000)
local limit = tonumber(ARGV[2])
local prefix = ARGV[1]

local ids
if #ARGV > 2 then
  ids = {}
  for i = 3, #ARGV do ids[#ids + 1] = ARGV[i] end
else
  ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms, 'LIMIT', 0, limit)
end

local moved = 0
local per_topic = {}
local topics = {}
for _, id in ipairs(ids) do
  if moved >= limit then break end
  local score = redis.call('ZSCORE', KEYS[1], id)
  if score and tonumber(score) <= now_ms then
    redis.call('ZREM', KEYS[1], id)
    local job = prefix .. 'job:' .. id
    local topic = redis.call('HGET', job, 'topic')
    if topic then
      redis.call('DEL', prefix .. 't:' .. id)
      redis.call('HSET', job, 'state', 'ready', 'token', '')
      redis.call('LPUSH', prefix .. 'ready:' .. topic, id)
      moved = moved + 1
      if not per_topic[topic] then
        per_topic[topic] = 0
        topics[#topics + 1] = topic
      end
      per_topic[topic] = per_topic[topic] + 1
    end
  end
end

local reply = { now_us, moved, -1 }
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if head[2] then reply[3] = tonumber(head[2]) end
for _, topic in ipairs(topics) do
  redis.call('PUBLISH', prefix .. 'ready', per_topic[topic] .. ' ' .. topic)
  reply[#reply + 1] = topic
  reply[#reply + 1] = per_topic[topic]
end
return reply
