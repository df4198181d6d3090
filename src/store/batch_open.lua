-- batch_open.lua: create a batch in its home partition.
--
-- KEYS[1]  schedule zset   {p}:schedule (names the slot of the batch's home)
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  batch id
-- ARGV[3]  the callback job's id (in this partition; its caller picked it)
-- ARGV[4]  the callback's topic
-- ARGV[5]  the callback's body given at creation ("" for none)
-- ARGV[6]  the callback's ttr, ms
-- ARGV[7]  the callback's retry intervals, ms, comma-separated ("": none)
-- ARGV[8]  the callback's most attempts (0: no limit beyond the intervals)
-- ARGV[9]  on: "finished" (every job finished) or "settled" (finished or dead)
--
-- A batch is created open: its pusher adds jobs, then closes it
-- (batch_close.lua); it fires only once closed.
--
-- Touches: the batch's hash `{p}:b:<batch>`. Publishes: nothing.
-- Helpers: BATCH.key, now_us, invalid.
--
-- Returns { DONE } (created), or { KEPT, state } (the id names a batch
-- already, or one kept after it ended: nothing changed).
--
-- Cost: one EXISTS, one HSET. Guarantees: a batch is created once; a
-- refused call changes nothing.
local b, cid, topic = ARGV[2], ARGV[3], ARGV[4]
local on = ARGV[9]
if b == '' or cid == '' or topic == '' or not tonumber(ARGV[6]) or not tonumber(ARGV[8])
  or (on ~= BATCH.ON_FINISHED and on ~= BATCH.ON_SETTLED) then
  return invalid('batch_open takes an id, a callback id, topic, body, ttr, retries, most attempts, and on finished or settled')
end
local key = BATCH.key(b)
local was = redis.call('HGET', key, BATCH.STATE)
if was then return { KEPT, was } end
redis.call('HSET', key, BATCH.STATE, BATCH.OPEN, BATCH.ON, on, BATCH.CALLBACK_ID, cid,
  BATCH.CALLBACK_TOPIC, topic, BATCH.CALLBACK_BODY, ARGV[5], BATCH.CALLBACK_TTR, ARGV[6],
  BATCH.CALLBACK_RETRY, ARGV[7], BATCH.CALLBACK_MAX, ARGV[8], BATCH.JOBS, 0,
  BATCH.FINISHED, 0, BATCH.DEAD, 0, BATCH.DELETED, 0,
  BATCH.CREATED_AT, math.floor(now_us() / 1000))
return { DONE }
