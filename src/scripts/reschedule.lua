-- reschedule.lua: give an existing job a new due time (and maybe a new body).
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  id
-- ARGV[3]  delay ms from now, used when ARGV[4] is -1
-- ARGV[4]  absolute due time, Unix ms, or -1
-- ARGV[5]  "1" to replace the body with ARGV[6], "0" to keep it
--
-- Returns { status, due_ms, new_head }: status 1 done, 0 no such job.
--
-- Guarantees: from any state the job becomes delayed until the new due
-- time, atomically; a lease it had is void. Topic, ttr and retry policy stay;
-- so do attempts, except that a dead job starts its schedule afresh.
local id = ARGV[2]
local job = P .. 'j:' .. id
local f = redis.call('HMGET', job, STATE, TOPIC)
if not f[2] then return { 0, 0, 0 } end
local due, bad = due_time(ARGV[3], ARGV[4])
if not due then return bad end
detach(id, f[1] or 'delayed', f[2])
if f[1] == 'dead' then
  redis.call('HDEL', job, ATTEMPTS, DEAD_AT)
end
if ARGV[5] == '1' then redis.call('HSET', job, BODY, ARGV[6]) end
redis.call('HDEL', job, STATE, TOKEN, DUE)
schedule(id, due)
move_count(f[2], nil, 'delayed')
return { 1, due, wake_if_head(id, due) }
