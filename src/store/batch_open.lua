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
-- ARGV[10] flows: what a dead child does, "fail" or "ignore" ("": a batch)
-- ARGV[11] flows: the parent's delay after its release, ms
-- ARGV[12] flows: the parent's priority
-- ARGV[13] flows: the parent's tags, newline-separated ("" none)
-- ARGV[14] flows: the flow whose child the parent is ("" for a root)
-- ARGV[15] flows: the parent's traceparent ("" untraced)
-- ARGV[16] flows: the parent's tracestate ("" none)
--
-- A batch is created open: its pusher adds jobs, then closes it
-- (batch_close.lua); it fires only once closed.
--
-- Touches: the batch's hash `{p}:b:<batch>`. Publishes: nothing.
-- Helpers: BATCH.key, now_us, invalid.
--
-- A flow (its id the parent's after BATCH.FLOW_MARK, see lib/flows.lua):
-- its callback is the parent, whose id is refused while a job has it (a
-- finished job's kept record aside). Events: waiting (the parent's).
--
-- Returns { DONE } (created), or { KEPT, state } (the id names a batch
-- already, or one kept after it ended; a flow's parent id names a job:
-- state "job"; nothing changed).
--
-- Cost: one HGET, one HSET (a flow: one HGET and at most five HSETs
-- more, each of one to three fields). Guarantees: a batch is created
-- once; a refused call changes nothing.
local b, cid, topic = ARGV[2], ARGV[3], ARGV[4]
local on = ARGV[9]
if b == '' or cid == '' or topic == '' or not tonumber(ARGV[6]) or not tonumber(ARGV[8])
  or (on ~= BATCH.ON_FINISHED and on ~= BATCH.ON_SETTLED) then
  return invalid('batch_open takes an id, a callback id, topic, body, ttr, retries, most attempts, and on finished or settled')
end
local flow = BATCH.is_flow(b)
local dead = ARGV[10]
if flow ~= (dead == 'fail' or dead == 'ignore') or (flow and cid ~= string.sub(b, 2))
  or (flow and (not tonumber(ARGV[11]) or not tonumber(ARGV[12]) or not ARGV[16])) then
  return invalid('batch_open: a flow (and only one) names what a dead child does, its parent as callback, a delay, a priority, tags, its upper flow and trace context')
end
local key = BATCH.key(b)
local was = redis.call('HGET', key, BATCH.STATE)
if was then return { KEPT, was } end
if flow then
  local st = redis.call('HMGET', job_key(cid), TOPIC, STATE)
  if st[1] and st[2] ~= FINISHED then return { KEPT, 'job' } end
end
redis.call('HSET', key, BATCH.STATE, BATCH.OPEN, BATCH.ON, on, BATCH.CALLBACK_ID, cid,
  BATCH.CALLBACK_TOPIC, topic, BATCH.CALLBACK_BODY, ARGV[5], BATCH.CALLBACK_TTR, ARGV[6],
  BATCH.CALLBACK_RETRY, ARGV[7], BATCH.CALLBACK_MAX, ARGV[8], BATCH.JOBS, 0,
  BATCH.FINISHED, 0, BATCH.DEAD, 0, BATCH.DELETED, 0,
  BATCH.CREATED_AT, math.floor(now_us() / 1000))
if flow then
  redis.call('HSET', key, BATCH.CHILD_DEAD, dead, BATCH.CALLBACK_DELAY, ARGV[11],
    BATCH.CALLBACK_PRIORITY, ARGV[12])
  if ARGV[13] ~= '' then redis.call('HSET', key, BATCH.CALLBACK_TAGS, ARGV[13]) end
  if ARGV[14] ~= '' then redis.call('HSET', key, BATCH.UPPER, ARGV[14]) end
  if ARGV[15] ~= '' then redis.call('HSET', key, BATCH.CALLBACK_TRACEPARENT, ARGV[15]) end
  if ARGV[16] ~= '' then redis.call('HSET', key, BATCH.CALLBACK_TRACESTATE, ARGV[16]) end
  if EVENTS > 0 then EVENT.emit(BATCH.EV_WAITING, cid, topic, 0) end
end
return { DONE }
