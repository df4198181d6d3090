-- batch_close.lua: a batch's pusher is done adding: close it, or cancel it.
--
-- KEYS[1]  schedule zset   {p}:schedule (the batch's home)
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  batch id
-- ARGV[3]  "close" or "cancel"
-- ARGV[4]  how long a fired or cancelled batch is kept, ms
--
-- Close: an open batch becomes closed, and fires at once if every job it
-- took in has its outcome (an empty batch fires at its close). Running
-- jobs of a closed batch may still add jobs to it (batch_add.lua).
-- Cancel: the batch never fires; it takes no more jobs and is kept for
-- the retention with its counts. Its jobs not handed out yet are deleted
-- by the caller, partition by partition (batch_cancel_jobs.lua).
--
-- Touches: the batch's hash (firing: its members, the callback job).
-- Publishes: a ready notice, firing. Helpers: BATCH.fire_if_done.
-- A flow (lib/flows.lua) cancelled: its parent's cancelled event, and a
-- note (deleted) for the flow its parent is a child of; its children's
-- results go (its parent never runs: kept, they would stay for ever);
-- closed, no event.
-- Events: batch_closed (an open batch closed), batch_cancelled; firing,
-- batch_fired.
--
-- Returns { DONE, state after } or { MISSING }; { STALE, state } when the
-- batch has fired (or, closing, was cancelled): nothing changed.
-- Cost: one HGET and one HMGET (a flow's cancel: an HGET and a DEL
-- more, the DEL bounded by its results, at most MAX_RESULTS_BYTES); then
-- at most a push's writes.
-- Guarantees: one atomic step; a batch fires once, never while open; a
-- refused call changes nothing.
local b, what, retention = ARGV[2], ARGV[3], tonumber(ARGV[4])
if (what ~= 'close' and what ~= 'cancel') or not retention or retention < 1 then
  return invalid('batch_close takes a batch id, close or cancel, and a retention')
end
local key = BATCH.key(b)
local st = redis.call('HGET', key, BATCH.STATE)
if not st then return { MISSING } end
local now_ms = math.floor(now_us() / 1000)
if st == BATCH.FIRED or st == BATCH.CANCELLED then
  if (what == 'cancel') == (st == BATCH.CANCELLED) then return { DONE, st } end
  return { STALE, st }
end
local flow = BATCH.is_flow(b)
local topic = redis.call('HGET', key, BATCH.CALLBACK_TOPIC)
if what == 'cancel' then
  if flow then
    -- A waiting parent cancelled: its event, and the flow it is a child
    -- of (if any) counts it deleted.
    local parent = string.sub(b, 2)
    if EVENTS > 0 then EVENT.emit(EV_CANCELLED, parent, topic, 0) end
    BATCH.left(parent, redis.call('HGET', key, BATCH.UPPER) or nil, BATCH.O_DELETED)
    redis.call('DEL', BATCH.results_key(b))
  elseif EVENTS > 0 then
    EVENT.emit(BATCH.EV_CANCELLED, b, topic, 0)
  end
  redis.call('HSET', key, BATCH.STATE, BATCH.CANCELLED, BATCH.ENDED_AT, now_ms)
  redis.call('PEXPIRE', key, retention)
  redis.call('PEXPIRE', BATCH.members_key(b), retention)
  return { DONE, BATCH.CANCELLED }
end
if st == BATCH.OPEN and EVENTS > 0 and not flow then EVENT.emit(BATCH.EV_CLOSED, b, topic, 0) end
redis.call('HSET', key, BATCH.STATE, BATCH.CLOSED)
if BATCH.fire_if_done(b, now_ms, retention) then return { DONE, BATCH.FIRED } end
return { DONE, BATCH.CLOSED }
