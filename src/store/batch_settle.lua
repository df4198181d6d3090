-- batch_settle.lua: the batch's home learns how its reserved ids' pushes
-- went: pushed (the reservation ends), or never to be (the id leaves the
-- batch, as if never taken in), then fires the callback if that was all
-- it waited for.
--
-- KEYS[1]  schedule zset   {p}:schedule (the batch's home)
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  batch id
-- ARGV[3]  how long a fired batch is kept, ms
-- ARGV[4..] pairs: job id, "landed" or "lost"
--
-- "lost" comes from the pusher (the id named another job: nothing was
-- pushed) or from the relay (a reservation older than any push's deadline
-- whose job does not exist: its pusher died before the push). A member
-- that has an outcome already is left as it is.
--
-- Touches: the reservations, the batch's hash and members; firing, the
-- callback job (BATCH.fire_if_done). Publishes: a ready notice, firing.
-- Helpers: BATCH.fire_if_done (JOB.upsert, LISTS.notify).
--
-- Returns { DONE, fired (1 or 0) }.
--
-- Cost: per id a ZREM, and per dropped id an HGET, HDEL and HINCRBY; then
-- one HMGET. Guarantees: one atomic step; made again, it changes nothing.
local b, retention = ARGV[2], tonumber(ARGV[3])
local n = (#ARGV - 3) / 2
if not retention or retention < 1 or n < 1 or n ~= math.floor(n) then
  return invalid('batch_settle takes a batch id, a retention and pairs of id, landed or lost')
end
for i = 4, #ARGV, 2 do
  if ARGV[i + 1] ~= 'landed' and ARGV[i + 1] ~= 'lost' then
    return invalid('batch_settle: ' .. ARGV[i + 1] .. ' is neither landed nor lost')
  end
end
local key, mk, reserved = BATCH.key(b), BATCH.members_key(b), P .. BATCH.RESERVED_KEY
local dropped = 0
for i = 4, #ARGV, 2 do
  local id = ARGV[i]
  if redis.call('ZREM', reserved, b .. '\n' .. id) == 1 and ARGV[i + 1] == 'lost'
    and redis.call('HGET', mk, id) == BATCH.O_PENDING then
    redis.call('HDEL', mk, id)
    dropped = dropped + 1
  end
end
if dropped > 0 and redis.call('EXISTS', key) == 1 then
  redis.call('HINCRBY', key, BATCH.JOBS, -dropped)
end
local fired = BATCH.fire_if_done(b, math.floor(now_us() / 1000), retention)
return { DONE, fired and 1 or 0 }
