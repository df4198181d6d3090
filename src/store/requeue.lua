-- requeue.lua: bring dead jobs of a topic back, with fresh attempts.
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  topic
-- ARGV[3]  most jobs to requeue in this call
-- ARGV[4..] ids to requeue (optional; none = the oldest dead jobs)
--
-- Touches: the topic's dead set and ready list, job hashes, count hash.
-- Publishes: ready. Events: requeued, per job.
-- Helpers: JOB.make_ready, LISTS.notify, EVENT.emit.
-- Groups: each job's priority and group in one HMGET (as before: one
-- HGET); a grouped one goes to its group's line (G.push).
--
-- Returns { DONE, number of jobs requeued }.
--
-- Guarantees: each requeued job leaves the dead set and joins the ready
-- list in one step, attempts reset to 0 (its history is kept); ids that are
-- not dead jobs of this topic are skipped. Waiting consumers are woken.
local topic = ARGV[2]
local dead = KEY.dead(topic)
local ids
if #ARGV > 3 then
  ids = {}
  for i = 4, #ARGV do ids[#ids + 1] = ARGV[i] end
else
  ids = redis.call('ZRANGE', dead, 0, tonumber(ARGV[3]) - 1)
end
local now = math.ceil(now_us() / 1000)
local n = 0
for _, id in ipairs(ids) do
  if redis.call('ZREM', dead, id) == 1 then
    redis.call('HDEL', job_key(id), ATTEMPTS, DEAD_AT)
    JOB.make_ready(id, topic, DEAD, now)
    if EVENTS > 0 then EVENT.emit(EV_REQUEUED, id, topic, 0, now) end
    n = n + 1
  end
end
if n > 0 then LISTS.notify(topic, n) end
return { DONE, n }
