-- lib/counts.lua: per-topic job counts by state, and the event stream.
-- Fills: COUNT, EVENT (declared in lib/call.lua).

-- Per-topic job counts by state live in one hash (COUNT_KEY), field
-- "<state>:<topic>". A call gathers its changes and writes each field once,
-- at its end (COUNT.flush, which the wrapper in library.rs calls): a
-- dispatch of a hundred jobs of one topic is two writes, not two hundred.
-- Set at the start of every call.
local COUNTS
function COUNT.add(state, topic, by)
  local field = state .. ':' .. topic
  COUNTS[field] = (COUNTS[field] or 0) + by
end

-- Writes the changes gathered so far, and forgets them: a call may flush
-- as it goes (dispatch does, a topic at a time, so that its clock counts
-- the writes), and the wrapper flushes again at its end.
function COUNT.flush()
  local key = P .. COUNT_KEY
  for field, by in pairs(COUNTS) do
    if by ~= 0 and redis.call('HINCRBY', key, field, by) <= 0 then
      redis.call('HDEL', key, field)
    end
    COUNTS[field] = nil
  end
end

-- How many of `topic`'s jobs are ready in this partition, exactly: the
-- count hash with this call's changes not yet written. One HGET.
function COUNT.ready(topic)
  local field = READY .. ':' .. topic
  return (tonumber(redis.call('HGET', P .. COUNT_KEY, field)) or 0) + (COUNTS[field] or 0)
end

-- A job of `topic` moved from state `from` to `to` (either nil: none).
-- Every job's life passes here several times: COUNT.add's work inline.
function COUNT.move(topic, from, to)
  if from then
    local field = from .. ':' .. topic
    COUNTS[field] = (COUNTS[field] or 0) - 1
  end
  if to then
    local field = to .. ':' .. topic
    COUNTS[field] = (COUNTS[field] or 0) + 1
  end
end

-- Events (the event stream; off unless configured). EVENTS is how many
-- entries a partition's stream {p}:events keeps, about (0: off): every
-- call gets it from the wrapper in library.rs, so with events off no call
-- reads or writes anything more. Each event is one XADD, O(1) (MAXLEN ~
-- trims whole stream nodes, amortised O(1)). An `attempt` left out is read
-- from the job: one HGET, only with events on. Every entry has all fields,
-- in one order ("" where none applies): Redis then stores their names once
-- per stream node. The entry's id (Redis time) is the event's time. The
-- scripts that emit once per job test EVENTS > 0 before calling: a Lua
-- call costs even when it returns at once.
local EVENTS = 0
function EVENT.emit(kind, id, topic, attempt, due, err)
  if EVENTS == 0 then return end
  attempt = attempt or tonumber(redis.call('HGET', job_key(id), ATTEMPTS)) or 0
  redis.call('XADD', P .. EVENTS_KEY, 'MAXLEN', '~', EVENTS, '*', EV_KIND, kind,
    EV_ID, id, EV_TOPIC, topic, EV_ATTEMPT, attempt, EV_DUE, due or '', EV_ERROR, err or '')
end

-- After RETRIES.fail put `id` in `state`: failed (with its error), then
-- retried (with when it is due again) or dead. Two XADDs, one HMGET.
function EVENT.failed(id, topic, state)
  if EVENTS == 0 then return end
  local f = redis.call('HMGET', job_key(id), ATTEMPTS, ERR)
  local attempt = tonumber(f[1]) or 0
  EVENT.emit(EV_FAILED, id, topic, attempt, nil, f[2])
  if state == DEAD then
    EVENT.emit(EV_DEAD, id, topic, attempt)
  else
    local due = state == DELAYED and H.due(id, topic)
    EVENT.emit(EV_RETRIED, id, topic, attempt, due or math.ceil(now_us() / 1000))
  end
end
