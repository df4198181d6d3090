-- tick.lua: ticks of recurring schedules, many per call: push each tick's
-- job, exactly once, and keep the due index.
--
-- KEYS[1]  schedule zset   {p}:schedule (the partition of "{name}")
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2..] one or more ticks, TICK_ARGS (10) arguments each, in order:
--          schedule name, its version (from recur_put.lua),
--          tick, Unix ms: the job's due time,
--          mode: "push" (push the tick's job), "fire" (a tick missed while
--          no delayq ran: push its job unless the tick before it has one,
--          which then fires in its place), "skip" (a missed tick: drop the
--          job of the tick before it if still delayed, push nothing), or
--          "park" (the rule has no next tick: take the schedule out of the
--          due index until it is put again; the tick is ignored),
--          job id, topic, body, ttr ms, retry intervals, max attempts
--
-- Touches: each schedule's hash {p}:recur:<name> (its last tick, and the
-- tick before it as the last that fired once its job is due) and its
-- entry in the due index {p}:recur_due (name -> its last tick: when it
-- falls due, the next tick is pushed); with a push, what push.lua touches. Publishes: as
-- push.lua.
-- Helpers: CALL.due_time, invalid, JOB.upsert, H.wake_if_head, JOB.drop_if_delayed.
--
-- Returns { DONE, then per tick: status, pushed, due_ms, new_head }:
-- status STALE (the schedule was changed or deleted: nothing done; a
-- deleted one leaves the due index), KEPT (this tick, or a later one, is
-- done already, or the schedule is paused: it is parked), or DONE; pushed 1 when a job was upserted, status then
-- being the upsert's (DONE, REPLACED or KEPT) and due_ms and new_head as
-- push.lua's.
-- Errors: DQINVALID for a malformed call, or "job <n>: ..." for a tick
-- past MAX_TIME_MS, before any write.
--
-- Guarantees: a schedule's last tick only grows, and a tick's job is pushed
-- in the same step that records the tick (and moves the schedule in the due
-- index), so however many delayq instances tick at once, each tick is
-- pushed once. The job is due at the tick, so the engine never hands it out
-- before its time. Ticks are applied in the order given (a schedule may
-- have several in one call); each is checked on its own.
local n = (#ARGV - 1) / TICK_ARGS
if n < 1 or n ~= math.floor(n) then
  return invalid('tick takes ' .. TICK_ARGS .. ' arguments per tick, got ' .. (#ARGV - 1))
end
local dues = {}
for j = 1, n do
  local a = 1 + (j - 1) * TICK_ARGS
  if ARGV[a + 4] ~= 'park' then
    local due, bad = CALL.due_time('0', ARGV[a + 3])
    if not due then return invalid('job ' .. j .. ': ' .. bad) end
    dues[j] = due
  end
end
local index = P .. RECUR_DUE_KEY
local out = { DONE }
for j = 1, n do
  local a = 1 + (j - 1) * TICK_ARGS
  local name, mode = ARGV[a + 1], ARGV[a + 4]
  local rk = P .. RECUR_KEY .. name
  local st = redis.call('HMGET', rk, RECUR_VERSION, RECUR_LAST, RECUR_PENDING, RECUR_PAUSED)
  local tick = tonumber(ARGV[a + 3])
  local reply
  if st[1] ~= ARGV[a + 2] then
    if not st[1] then redis.call('ZREM', index, name) end
    reply = { STALE, 0, 0, 0 }
  elseif mode == 'park' then
    redis.call('ZADD', index, MAX_TIME_MS, name)
    reply = { DONE, 0, 0, 0 }
  elseif st[4] then
    -- Paused after the look read it: no tick until resumed.
    redis.call('ZADD', index, MAX_TIME_MS, name)
    reply = { KEPT, 0, 0, 0 }
  elseif tick <= (tonumber(st[2]) or 0) then
    reply = { KEPT, 0, 0, 0 }
  else
    local pending = st[3] or ''
    local dropped = mode == 'skip' and JOB.drop_if_delayed(pending) == 1
    -- The tick before has fired if it had a job, now due, still there.
    local last = tonumber(st[2]) or 0
    if pending ~= '' and not dropped and last <= math.floor(now_us() / 1000) then
      redis.call('HSET', rk, RECUR_FIRED, last)
    end
    redis.call('HSET', rk, RECUR_LAST, tick)
    redis.call('ZADD', index, tick, name)
    if mode == 'push' or (mode == 'fire' and pending == '') then
      local id = ARGV[a + 5]
      redis.call('HSET', rk, RECUR_PENDING, id)
      local status, due_ms, put = JOB.upsert(id, ARGV[a + 6], ARGV[a + 7],
        ARGV[a + 8], dues[j], ARGV[a + 9], ARGV[a + 10], 'keep')
      if put and EVENTS > 0 then EVENT.emit(EV_PUSHED, id, ARGV[a + 6], 0, due_ms) end
      reply = { status, 1, due_ms, put and H.wake_if_head(id, due_ms) or 0 }
    else
      reply = { DONE, 0, 0, 0 }
    end
  end
  for _, v in ipairs(reply) do out[#out + 1] = v end
end
return out
