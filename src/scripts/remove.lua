-- remove.lua: finish or delete a job, from any state.
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  id
-- ARGV[3]  "any": remove whatever the state (delete, the compatible
--          /finish); "lease": only if ARGV[4] is the current lease token
-- ARGV[4]  lease token (with "lease")
--
-- Returns { status, topic }: status 1 removed, 0 no such job, -1 refused:
-- the token is not the job's current lease (it was delivered again to
-- someone else, or replaced).
--
-- Guarantees: the job leaves every structure at once (hash, schedule,
-- trigger, ready list, dead set, counts); a refused call changes nothing.
local id = ARGV[2]
local job = P .. 'j:' .. id
local f = redis.call('HMGET', job, STATE, TOPIC, TOKEN)
if not f[2] then return { 0, '' } end
-- A job that is not reserved has token '' (or none): no token, however
-- empty, matches it.
if ARGV[3] ~= 'any' and (f[1] ~= 'reserved' or f[3] ~= ARGV[4] or ARGV[4] == '') then
  return { -1, f[2] }
end
detach(id, f[1] or 'delayed', f[2])
redis.call('DEL', job)
return { 1, f[2] }
