-- lib/batches.lua: batches (issue 53): what a job of a batch leaves when it
-- ends, and what its batch's home does with it.
-- Fills: BATCH (from the prelude, with the names of src/store/layout/batch.rs).
--
-- A batch lives in its home partition (its id's): its hash (counts, the
-- callback to push) and its members (id -> outcome). Its jobs live where
-- their ids put them, each with the batch's id in its field BATCH.FIELD
-- and in its partition's live index. A job's end cannot reach another
-- partition in the same call (a cluster runs a script on one slot), so it
-- writes a note to its own partition's stream, in the same atomic step as
-- the end itself; the relay (src/loops/notes.rs) carries notes home,
-- where batch_note.lua counts each member's outcome once, however often a
-- note arrives.

-- A flow (src/flow.rs) is a batch whose id is its parent's id after
-- BATCH.FLOW_MARK (a byte no batch id given by a user holds), whose
-- callback is the parent itself, and whose notes carry results.

function BATCH.key(b) return P .. BATCH.KEY .. b end
function BATCH.results_key(b) return P .. BATCH.RESULTS_KEY .. b end
function BATCH.is_flow(b) return string.byte(b, 1) == 1 end

-- A batch id as a job may carry it: a flow's (the mark, then a job id
-- without control characters), or 1 to MAX_ID_BYTES without them.
function BATCH.valid_id(b)
  if type(b) ~= 'string' then return false end
  local s, most = b, BATCH.MAX_ID_BYTES
  if BATCH.is_flow(b) then s, most = string.sub(b, 2), 4096 end
  return #s >= 1 and #s <= most and not string.find(s, '%c')
end
-- Whether `id` names the parent of a flow still waiting (its push under
-- way, or its children not all done): an id a job of a batch may not take.
-- Read where the job is pushed: its id's partition, a flow's home (a
-- grouped job lives in its group's, on a split queue). One HGET.
function BATCH.waiting_parent(id)
  local st = redis.call('HGET', BATCH.key(BATCH.FLOW_MARK .. id), BATCH.STATE)
  return st == BATCH.OPEN or st == BATCH.CLOSED
end
function BATCH.members_key(b) return P .. BATCH.MEMBERS_KEY .. b end
function BATCH.live_key(b) return P .. BATCH.LIVE_KEY .. b end

-- A job of batch `b` is pushed here: into the partition's live index.
function BATCH.join(id, b)
  redis.call('ZADD', BATCH.live_key(b), 0, id)
end

-- Job `id` of batch `b` (its BATCH.FIELD; nil: no batch, nothing done)
-- ended with `outcome` (O_FINISHED, O_DEAD, O_DELETED): a note for the
-- home, and out of the live index unless dead (a dead job is still there,
-- and a cancel leaves it). One XADD (and a ZREM) per job of a batch; a
-- job of none pays nothing but the field in its caller's HMGET.
-- A flow's child that finished with a `result` carries it home for its
-- parent (one field more in its note).
function BATCH.left(id, b, outcome, result)
  if not b then return end
  if outcome ~= BATCH.O_DEAD then redis.call('ZREM', BATCH.live_key(b), id) end
  if result and BATCH.is_flow(b) then
    redis.call('XADD', P .. BATCH.NOTES_KEY, '*',
      BATCH.N_BATCH, b, BATCH.N_ID, id, BATCH.N_OUTCOME, outcome, BATCH.N_RESULT, result)
  else
    redis.call('XADD', P .. BATCH.NOTES_KEY, '*',
      BATCH.N_BATCH, b, BATCH.N_ID, id, BATCH.N_OUTCOME, outcome)
  end
  -- The wrapper publishes one notice a call (src/store/library.rs).
  BATCH.noted = true
end

local COUNT_OF = {
  [BATCH.O_FINISHED] = BATCH.FINISHED,
  [BATCH.O_DEAD] = BATCH.DEAD,
  [BATCH.O_DELETED] = BATCH.DELETED,
}

-- At the home: member `id` of batch `b` reached `outcome`. Counted once: a
-- note seen again changes nothing; a dead member later finished or
-- deleted (requeued, purged) moves from dead to that; an id the home
-- never took in is none of this batch's (a job of an earlier batch of the
-- same id, whose retention ran out; or one whose reservation the relay
-- settled lost) and counts nothing. A fired batch counts nothing more
-- (its members are gone). `calls`: the call's table of
-- batches seen, whose state is read once a call and whose count changes
-- gather there until BATCH.write_counts. Returns true if a count changed.
-- A flow's finished child's `result` ("" none) is kept for its parent
-- while the flow's results stay within MAX_RESULTS_BYTES (past it, the
-- child's outcome only), and only while the flow waits (open or closed):
-- a cancelled flow still counts, but its parent never runs. Cost: one
-- HGET and at most one HSET a note (two with a result), one HGET a batch
-- a call (two for a flow with results).
function BATCH.apply(b, id, outcome, calls, result)
  local c = calls[b]
  if not c then
    local st = redis.call('HGET', BATCH.key(b), BATCH.STATE)
    c = { live = st ~= false and st ~= BATCH.FIRED,
      waits = st == BATCH.OPEN or st == BATCH.CLOSED, deltas = {} }
    calls[b] = c
  end
  local field = COUNT_OF[outcome]
  if not c.live or not field then return false end
  local mk = BATCH.members_key(b)
  local was = redis.call('HGET', mk, id)
  if not was or was == outcome or was == BATCH.O_FINISHED or was == BATCH.O_DELETED then
    return false
  end
  local d = c.deltas
  if was == BATCH.O_DEAD then
    d[BATCH.DEAD] = (d[BATCH.DEAD] or 0) - 1
  end
  redis.call('HSET', mk, id, outcome)
  d[field] = (d[field] or 0) + 1
  if result and result ~= '' and outcome == BATCH.O_FINISHED and c.waits and BATCH.is_flow(b) then
    if not c.bytes then
      c.bytes = tonumber(redis.call('HGET', BATCH.key(b), BATCH.RESULT_BYTES)) or 0
    end
    if c.bytes + #result <= BATCH.MAX_RESULTS_BYTES then
      redis.call('HSET', BATCH.results_key(b), id, result)
      c.bytes = c.bytes + #result
      d[BATCH.RESULT_BYTES] = (d[BATCH.RESULT_BYTES] or 0) + #result
    end
  end
  return true
end

-- Writes the count changes BATCH.apply gathered for batch `b` in this
-- call (`calls` as there): one HINCRBY per count that moved.
function BATCH.write_counts(b, calls)
  local key = BATCH.key(b)
  for field, n in pairs(calls[b].deltas) do
    if n ~= 0 then redis.call('HINCRBY', key, field, n) end
  end
end

-- The counts of batch `b`'s hash fields `f` (from BATCH.read).
local function counts(f)
  return tonumber(f[3]) or 0, tonumber(f[4]) or 0, tonumber(f[5]) or 0, tonumber(f[6]) or 0
end

-- At the home: pushes batch `b`'s callback if it is due, once. Due: the
-- batch is closed (its pusher is done), no member is pending, and, for
-- `on` finished, none is dead. The callback job (its id, topic, ttr and
-- retries fixed at creation) is made ready now, its body a JSON report:
-- {"batch", "jobs", "finished", "dead", "deleted", and "body": the body
-- given at creation, if one was}. A flow's callback is its parent
-- (BATCH.release, lib/flows.lua). The batch becomes fired in the same
-- step, its members' outcomes go, and its hash stays for `retention_ms`.
-- Returns true if it fired. Cost: one HMGET, then (firing) a push's writes.
-- Events: batch_fired (the report as its error field), and the callback
-- job's pushed and fired.
function BATCH.fire_if_done(b, now_ms, retention_ms)
  local key = BATCH.key(b)
  local f = redis.call('HMGET', key, BATCH.STATE, BATCH.ON, BATCH.JOBS, BATCH.FINISHED,
    BATCH.DEAD, BATCH.DELETED, BATCH.CALLBACK_ID, BATCH.CALLBACK_TOPIC, BATCH.CALLBACK_BODY,
    BATCH.CALLBACK_TTR, BATCH.CALLBACK_RETRY, BATCH.CALLBACK_MAX, BATCH.CHILD_DEAD)
  if f[1] ~= BATCH.CLOSED then return false end
  local n, finished, dead, deleted = counts(f)
  -- A flow whose dead child fails its parent does not wait for the rest.
  local failed = f[13] == 'fail' and dead > 0
  if not failed then
    if finished + dead + deleted < n then return false end
    if f[2] == BATCH.ON_FINISHED and dead > 0 then return false end
  end
  if f[13] then
    BATCH.release(b, f, now_ms, failed)
  else
    local report = { batch = b, jobs = n, finished = finished, dead = dead, deleted = deleted }
    if f[9] and f[9] ~= '' then report.body = f[9] end
    local id, topic = f[7], f[8]
    local body = cjson.encode(report)
    local _, due, put = JOB.upsert(id, topic, body, f[10], now_ms,
      f[11] or '', f[12] or '0', 'keep', nil, true)
    if EVENTS > 0 then EVENT.emit(BATCH.EV_FIRED, b, topic, 0, now_ms, body) end
    if put then
      LISTS.notify(topic, 1)
      if EVENTS > 0 then
        EVENT.emit(EV_PUSHED, id, topic, 0, due)
        EVENT.emit(EV_FIRED, id, topic, 0, due)
      end
    end
  end
  redis.call('HSET', key, BATCH.STATE, BATCH.FIRED, BATCH.ENDED_AT, now_ms)
  redis.call('DEL', BATCH.members_key(b), BATCH.results_key(b))
  redis.call('PEXPIRE', key, retention_ms)
  return true
end
