-- lib/order.lua: the order in which jobs due in the same millisecond
-- become ready (issue 49): as they were pushed, not by id; and when a
-- pushed job is due already.
-- Fills: H (made in the prelude, with its names).

-- Whether a job due at `due` is due already (CALL.due_time gives the current
-- millisecond for no delay): a push makes it ready at once.
function H.due_now(due)
  return tonumber(due) <= math.floor(now_us() / 1000)
end

-- Push order among ties. A topic schedule sorts the jobs due in
-- one millisecond by id; they must become ready in the order they were
-- scheduled. A job scheduled where its topic already has one due in that
-- millisecond takes the next number of a counter ({p}:seq) in its SEQ
-- field, and dispatch orders what it moves by (due, SEQ) with an absent SEQ
-- first: a job alone at its time when scheduled costs no field, and the
-- numbers only grow, so a stale SEQ kept from an earlier time still sorts
-- before every later tie. H.tie_seq gives that number, or nil for no tie:
-- one ZCOUNT (O(log N); about 1.3 us, half a ZRANGE's), once per topic and
-- time in a call (H.ties: a push of a batch with one delay looks once);
-- the counter is one INCRBY per call, reserving H.seq_room numbers (a
-- push: its job count).
function H.tie_seq(topic, due)
  local ms = string.format('%d', due)
  local tie = topic .. '\n' .. ms
  local ties = H.ties
  if not ties then ties = {}; H.ties = ties end
  if ties[tie] == nil then
    ties[tie] = redis.call('ZCOUNT', KEY.topic_schedule(topic), ms, ms) > 0
  end
  if not ties[tie] then
    -- The job about to be scheduled makes the next one a tie.
    ties[tie] = true
    return nil
  end
  local s = H.seq
  if not s or s.left == 0 then
    local room = H.seq_room or 1
    s = { next = redis.call('INCRBY', P .. H.SEQ_KEY, room) - room + 1, left = room }
    H.seq = s
  end
  local v = s.next
  s.next, s.left = v + 1, s.left - 1
  return v
end
