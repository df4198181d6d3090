-- batch_note.lua: the relay brings notes home: each batch job's outcome
-- counted once, and each batch whose last job this was fires its callback.
--
-- KEYS[1]  schedule zset   {p}:schedule (the batches' home)
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  how long a fired batch is kept, ms
-- ARGV[3..] quadruples: batch id, job id, outcome (f finished, d dead,
--          x deleted), result ("" none; a flow's child's), as the job's
--          partition wrote them (BATCH.left)
--
-- A note may come more than once (a relay that died before it deleted
-- it, two relays at once): BATCH.apply counts each member's outcome once.
-- A note for a batch that has fired or gone changes nothing.
--
-- Touches: the batches' hashes and members; firing, the callback jobs
-- (BATCH.fire_if_done). Publishes: a ready notice per callback fired.
-- Helpers: BATCH.apply, BATCH.write_counts, BATCH.fire_if_done.
--
-- Returns { DONE, how many counts changed, how many callbacks fired }.
--
-- Cost: per note one HGET and at most one HSET (two with a result); per
-- batch named one HGET (two for a flow with results),
-- and, if its counts changed, one HINCRBY per count that moved and one
-- HMGET, and a push's writes when it fires. Bounded by
-- the notes given. Guarantees: one atomic step.
local retention = tonumber(ARGV[2])
local n = (#ARGV - 2) / 4
if not retention or retention < 1 or n < 1 or n ~= math.floor(n) then
  return invalid('batch_note takes a retention and quadruples of batch, job id, outcome, result')
end
local changed, fired, calls, order = 0, 0, {}, {}
for i = 3, #ARGV, 4 do
  local b = ARGV[i]
  if BATCH.apply(b, ARGV[i + 1], ARGV[i + 2], calls, ARGV[i + 3]) then
    changed = changed + 1
    if not calls[b].changed then calls[b].changed = true; order[#order + 1] = b end
  end
end
local now_ms = math.floor(now_us() / 1000)
for _, b in ipairs(order) do
  BATCH.write_counts(b, calls)
  if BATCH.fire_if_done(b, now_ms, retention) then fired = fired + 1 end
end
return { DONE, changed, fired }
