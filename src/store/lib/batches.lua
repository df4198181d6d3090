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

function BATCH.key(b) return P .. BATCH.KEY .. b end
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
function BATCH.left(id, b, outcome)
  if not b then return end
  if outcome ~= BATCH.O_DEAD then redis.call('ZREM', BATCH.live_key(b), id) end
  redis.call('XADD', P .. BATCH.NOTES_KEY, '*',
    BATCH.N_BATCH, b, BATCH.N_ID, id, BATCH.N_OUTCOME, outcome)
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
-- Cost: one HGET and at most one HSET a note, one HGET a batch a call.
function BATCH.apply(b, id, outcome, calls)
  local c = calls[b]
  if not c then
    local st = redis.call('HGET', BATCH.key(b), BATCH.STATE)
    c = { live = st ~= false and st ~= BATCH.FIRED, deltas = {} }
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
-- given at creation, if one was}. The batch becomes fired in the same
-- step, its members' outcomes go, and its hash stays for `retention_ms`.
-- Returns true if it fired. Cost: one HMGET, then (firing) a push's writes.
-- Events: batch_fired (the report as its error field), and the callback
-- job's pushed and fired.
function BATCH.fire_if_done(b, now_ms, retention_ms)
  local key = BATCH.key(b)
  local f = redis.call('HMGET', key, BATCH.STATE, BATCH.ON, BATCH.JOBS, BATCH.FINISHED,
    BATCH.DEAD, BATCH.DELETED, BATCH.CALLBACK_ID, BATCH.CALLBACK_TOPIC, BATCH.CALLBACK_BODY,
    BATCH.CALLBACK_TTR, BATCH.CALLBACK_RETRY, BATCH.CALLBACK_MAX)
  if f[1] ~= BATCH.CLOSED then return false end
  local n, finished, dead, deleted = counts(f)
  if finished + dead + deleted < n then return false end
  if f[2] == BATCH.ON_FINISHED and dead > 0 then return false end
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
  redis.call('HSET', key, BATCH.STATE, BATCH.FIRED, BATCH.ENDED_AT, now_ms)
  redis.call('DEL', BATCH.members_key(b))
  redis.call('PEXPIRE', key, retention_ms)
  return true
end
