-- trim.lua: apply dead-letter retention to one topic.
--
-- KEYS[1]  schedule zset   {p}:schedule (unused; names the hash slot)
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  topic
-- ARGV[3]  most dead jobs to keep
-- ARGV[4]  longest age of a dead job, ms
--
-- Touches: the topic's dead set, job hashes and logs, count hash. Publishes: nothing.
-- Helpers: RETRIES.trim_dead.
--
-- Returns { DONE, number of dead jobs dropped } (at most 200 a call;
-- callers repeat until 0).
--
-- Guarantees: only dead jobs go, oldest first: those dead for longer than
-- the age limit, then the oldest beyond the count limit. Each leaves the
-- dead set, its hash and the counts together. Deaths trim their own topic
-- too; this call is for topics where nothing dies any more.
local key = KEY.dead(ARGV[2])
local before = redis.call('ZCARD', key)
if before == 0 then return { DONE, 0 } end
RETRIES.trim_dead(ARGV[2], math.floor(now_us() / 1000), tonumber(ARGV[3]), tonumber(ARGV[4]))
return { DONE, before - redis.call('ZCARD', key) }
