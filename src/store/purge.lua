-- purge.lua: delete dead jobs of a topic for good.
--
-- KEYS[1]  schedule zset   {p}:schedule (unused; names the hash slot)
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  topic
-- ARGV[3]  most jobs to delete in this call (callers repeat until 0)
--
-- Touches: the topic's dead set, job hashes and logs, their tags' indexes (one HMGET
-- per job for its tags and dedup key), count hash. Publishes: nothing.
-- Events: deleted, per job. Helpers: JOB.delete.
-- Batches: a job of a batch leaves a note for its home (BATCH.left).
--
-- Returns { DONE, number of jobs deleted }.
--
-- Guarantees: only dead jobs go; each leaves the dead set, its hash and the
-- counts together.
local topic = ARGV[2]
local dead = KEY.dead(topic)
local ids = redis.call('ZRANGE', dead, 0, tonumber(ARGV[3]) - 1)
for _, id in ipairs(ids) do
  local f = redis.call('HMGET', job_key(id), TAGS, DEDUP, BATCH.FIELD)
  JOB.delete(id, DEAD, topic, f[1], f[2], nil, f[3])
end
return { DONE, #ids }
