-- remove.lua: finish or delete jobs, from any state.
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2..] one or more removals, 3 arguments each:
--          id;
--          "any": remove whatever the state (delete, the compatible
--          /finish), or "lease": only if the next is the current lease token;
--          lease token (with "lease"; "" with "any")
--
-- Touches: job hashes, and whichever of trigger key, schedule, ready list or
-- dead set holds each; count hash. Publishes: nothing.
-- Helpers: detach, state_of, invalid.
--
-- Returns { DONE, then per removal: status, topic }: status DONE, MISSING
-- (no such job), or STALE (the token is not the job's current lease: it was
-- delivered again to someone else, or replaced, or never delivered).
--
-- Guarantees: each job leaves every structure at once; a refused removal
-- changes nothing. Removals apply in the order given, the whole call as one
-- atomic step (many per call is how delayq batches finishes that arrive
-- together).
local n = (#ARGV - 1) / 3
if n < 1 or n ~= math.floor(n) then
  return invalid('remove takes 3 arguments per job, got ' .. (#ARGV - 1))
end
local reply = { DONE }
for j = 1, n do
  local a = 1 + (j - 1) * 3
  local id, mode, token = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local job = job_key(id)
  local f = redis.call('HMGET', job, STATE, TOPIC, TOKEN)
  if not f[2] then
    reply[#reply + 1] = MISSING
    reply[#reply + 1] = ''
  -- A job that is not reserved has token '' (or none): no token, however
  -- empty, matches it.
  elseif mode ~= 'any' and (f[1] ~= RESERVED or f[3] ~= token or token == '') then
    reply[#reply + 1] = STALE
    reply[#reply + 1] = f[2]
  else
    detach(id, state_of(f[1]), f[2])
    redis.call('DEL', job)
    reply[#reply + 1] = DONE
    reply[#reply + 1] = f[2]
  end
end
return reply
