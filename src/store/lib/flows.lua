-- lib/flows.lua: flows (issue 53): a parent job that waits for its
-- children. A flow is a batch (lib/batches.lua) whose id is the parent's
-- after BATCH.FLOW_MARK, in the parent's partition, whose callback is the
-- parent itself (its own topic, body, ttr, retries, delay, priority, tags,
-- trace context)
-- and whose members are the children; a child that is a parent in turn
-- is a member whose job is made when its own children are done. Fills:
-- BATCH (release).

-- A child's outcome as the parent reads it (crate::ChildOutcome).
local OUTCOME_NAME = {
  [BATCH.O_FINISHED] = BATCH.CHILD_FINISHED,
  [BATCH.O_DEAD] = BATCH.CHILD_DEAD_NAME,
  [BATCH.O_DELETED] = BATCH.CHILD_DELETED,
  [BATCH.O_PENDING] = BATCH.CHILD_PENDING,
}

-- Flow `b`'s children as a JSON object: child id -> {"outcome", and
-- "result" (raw, as the child finished with it) if one was kept}; and
-- the first dead child's id (or nil). Cost: HGETALL of the members and of
-- the results: bounded by the children (a push takes at most
-- MAX_FLOW_CHILDREN a parent) and MAX_RESULTS_BYTES.
local function children_of(b)
  local members = redis.call('HGETALL', BATCH.members_key(b))
  local kept = redis.call('HGETALL', BATCH.results_key(b))
  local results = {}
  for i = 1, #kept, 2 do results[kept[i]] = kept[i + 1] end
  local parts, died = {}, nil
  for i = 1, #members, 2 do
    local id, o = members[i], members[i + 1]
    local s = cjson.encode(id) .. ':{"outcome":"' .. (OUTCOME_NAME[o] or o) .. '"'
    if results[id] then s = s .. ',"result":' .. results[id] end
    parts[#parts + 1] = s .. '}'
    if o == BATCH.O_DEAD and not died then died = id end
  end
  return '{' .. table.concat(parts, ',') .. '}', died
end

-- Releases flow `b`'s parent (`f`: the flow's fields as
-- BATCH.fire_if_done read them): pushed with its children's outcomes
-- (field BATCH.CHILDREN), due its delay from now; or, `failed` (a child
-- died and the flow says fail), made dead at once, its error naming the
-- child. A parent that is a child of another flow carries that flow's id
-- and tells it of its death (BATCH.left). An id in use by a job (pushed
-- outside the flow meanwhile) keeps that job, and the parent is not made
-- (the flow above counts it deleted).
-- Events: pushed, then fired (or, delayed, nothing more yet) or dead.
function BATCH.release(b, f, now_ms, failed)
  local x = redis.call('HMGET', BATCH.key(b), BATCH.CALLBACK_DELAY, BATCH.CALLBACK_PRIORITY,
    BATCH.CALLBACK_TAGS, BATCH.UPPER, BATCH.CALLBACK_TRACEPARENT, BATCH.CALLBACK_TRACESTATE)
  local id, topic = f[7], f[8]
  local children, died = children_of(b)
  local tags = {}
  for t in string.gmatch(x[3] or '', '[^\n]+') do tags[#tags + 1] = t end
  local extra = { priority = tonumber(x[2]) or 0, tags = tags, batch = x[4] or nil,
    children = children, traceparent = x[5] or nil, tracestate = x[6] or nil }
  local due = now_ms
  if not failed then due = now_ms + (tonumber(x[1]) or 0) end
  local _, due, put = JOB.upsert(id, topic, f[9] or '', f[10], due,
    f[11] or '', f[12] or '0', 'keep', extra, true)
  if not put then
    -- A job pushed with the parent's id meanwhile holds it: the parent is
    -- not made, and the flow above (if any) counts it deleted rather than
    -- wait for it.
    BATCH.left(id, x[4] or nil, BATCH.O_DELETED)
    return
  end
  if EVENTS > 0 then EVENT.emit(EV_PUSHED, id, topic, 0, due) end
  if failed then
    -- Made ready above (due now): out of ready (its list entry stays,
    -- stale), into dead.
    JOB.detach(id, READY, topic, false)
    local err = 'child ' .. died .. ' died'
    redis.call('HSET', job_key(id), STATE, DEAD, DEAD_AT, now_ms, ERR, err)
    redis.call('ZADD', KEY.dead(topic), now_ms, id)
    COUNT.move(topic, nil, DEAD)
    redis.call('HSET', BATCH.key(b), BATCH.FAILED_BY, died)
    if EVENTS > 0 then EVENT.emit(EV_DEAD, id, topic, 0, now_ms, err) end
    BATCH.left(id, x[4] or nil, BATCH.O_DEAD)
  elseif due <= now_ms then
    LISTS.notify(topic, 1)
    if EVENTS > 0 then EVENT.emit(EV_FIRED, id, topic, 0, due) end
  else
    H.wake_if_head(id, due)
  end
end
