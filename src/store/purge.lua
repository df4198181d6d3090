-- purge.lua: delete dead jobs of a topic for good.
--
-- KEYS[1]  schedule zset   {p}:schedule (unused; names the hash slot)
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  topic
-- ARGV[3]  most jobs to delete in this call (callers repeat until 0)
--
-- Touches: the topic's dead set, job hashes, their tags' indexes (one HGET
-- per job for its tags), count hash. Publishes: nothing.
-- Helpers: count, untag.
--
-- Returns { DONE, number of jobs deleted }.
--
-- Guarantees: only dead jobs go; each leaves the dead set, its hash and the
-- counts together.
local topic = ARGV[2]
local dead = dead_key(topic)
local ids = redis.call('ZRANGE', dead, 0, tonumber(ARGV[3]) - 1)
for _, id in ipairs(ids) do
  redis.call('ZREM', dead, id)
  untag(id, redis.call('HGET', job_key(id), TAGS) or nil) -- tags
  redis.call('DEL', job_key(id))
end
if #ids > 0 then count(DEAD, topic, -#ids) end
return { DONE, #ids }
