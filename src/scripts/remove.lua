-- remove.lua: finish or delete a job, from any state.
--
-- KEYS[1]  job hash        {p}:job:<id>
-- KEYS[2]  schedule zset   {p}:schedule
-- KEYS[3]  trigger key     {p}:t:<id>
-- ARGV[1]  key prefix      "{p}:"
-- ARGV[2]  id
-- ARGV[3]  lease token, or "" to remove whatever the state
--
-- Returns 1 removed, 0 no such job, -1 refused: the token is not the job's
-- current lease (the job was re-delivered to someone else, or replaced).
--
-- Guarantees: the job leaves every structure at once (hash, schedule,
-- trigger, ready list); a refused call changes nothing.
local f = redis.call('HMGET', KEYS[1], 'state', 'topic', 'token')
if not f[1] then return 0 end
if ARGV[3] ~= '' and (f[1] ~= 'reserved' or f[3] ~= ARGV[3]) then
  return -1
end
if f[1] == 'ready' then
  redis.call('LREM', ARGV[1] .. 'ready:' .. f[2], 1, ARGV[2])
end
redis.call('DEL', KEYS[1], KEYS[3])
redis.call('ZREM', KEYS[2], ARGV[2])
return 1
