-- remove.lua: finish or delete a job, from any state.
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  id
-- ARGV[3]  "any": remove whatever the state (delete, the compatible
--          /finish); "lease": only if ARGV[4] is the current lease token
-- ARGV[4]  lease token (with "lease")
--
-- Touches: job hash, and whichever of trigger key, schedule, ready list or
-- dead set holds it; count hash. Publishes: nothing.
-- Helpers: detach, state_of.
--
-- Returns { status, topic }: DONE, MISSING (no such job), or STALE (the
-- token is not the job's current lease: it was delivered again to someone
-- else, or replaced, or never delivered).
--
-- Guarantees: the job leaves every structure at once; a refused call
-- changes nothing.
local id = ARGV[2]
local job = job_key(id)
local f = redis.call('HMGET', job, STATE, TOPIC, TOKEN)
if not f[2] then return { MISSING, '' } end
-- A job that is not reserved has token '' (or none): no token, however
-- empty, matches it.
if ARGV[3] ~= 'any' and (f[1] ~= RESERVED or f[3] ~= ARGV[4] or ARGV[4] == '') then
  return { STALE, f[2] }
end
detach(id, state_of(f[1]), f[2])
redis.call('DEL', job)
return { DONE, f[2] }
