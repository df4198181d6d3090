-- batch_add.lua: the batch's home takes job ids in, before they are pushed.
--
-- KEYS[1]  schedule zset   {p}:schedule (the batch's home)
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  batch id
-- ARGV[3..] one or more job ids
--
-- Why first: the callback must never fire before the last job's outcome,
-- also when a running job of the batch adds more. Its add is counted here
-- before the job exists and before the adder's own finish can be, so the
-- batch cannot look done in between. Each id taken in is a reservation
-- (`{p}:breserved`) until its pusher confirms the push (batch_settle.lua);
-- one whose pusher died first is found by the relay (no such job: dropped).
--
-- Touches: the batch's hash and members, the reservations. Publishes:
-- nothing. Helpers: BATCH.key, BATCH.members_key, now_us.
--
-- Returns { DONE, then per id 1 (taken in), 0 (a member with no outcome
-- yet: a push made again) or 2 (a member that had its outcome: a batch
-- takes an id once, so its new push is refused) }, { MISSING } (no such
-- batch), or { STALE, state } (fired or cancelled: it takes no job;
-- nothing changed).
--
-- Cost: per id one HSETNX, and a ZADD for each taken in or an HGET for
-- each a member already; one HINCRBY.
-- Guarantees: ids are taken in once; the whole call is one atomic step.
local b = ARGV[2]
if #ARGV < 3 then return invalid('batch_add takes a batch id and one or more job ids') end
local key = BATCH.key(b)
local st = redis.call('HGET', key, BATCH.STATE)
if not st then return { MISSING } end
if st == BATCH.FIRED or st == BATCH.CANCELLED then return { STALE, st } end
local now_ms = math.floor(now_us() / 1000)
local mk, reserved = BATCH.members_key(b), P .. BATCH.RESERVED_KEY
local reply, added = { DONE }, 0
for i = 3, #ARGV do
  local taken = redis.call('HSETNX', mk, ARGV[i], BATCH.O_PENDING)
  if taken == 1 then
    added = added + 1
    redis.call('ZADD', reserved, now_ms, b .. '\n' .. ARGV[i])
  elseif redis.call('HGET', mk, ARGV[i]) ~= BATCH.O_PENDING then
    taken = 2
  end
  reply[#reply + 1] = taken
end
if added > 0 then redis.call('HINCRBY', key, BATCH.JOBS, added) end
return reply
