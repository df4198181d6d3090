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

-- Dispatch's movers of one topic ({ due, SEQ (0: none), place, ... }
-- each) in the order they become ready: (due, SEQ, place). The schedules
-- list a millisecond's jobs by id, so a call with ties sorts; order
-- matters within a topic only; no sort when they are in order already. A
-- Lua comparator costs a function call a comparison (about 2.6 us a job
-- for a thousand), more than a call may then have time to move: so the
-- distinct due times are sorted as plain numbers, and a millisecond's
-- ties by one number each, SEQ and place (exact below 2^53: SEQ below
-- 2^32, places below 2^20), the comparator only past that.
do
  local function push_before(a, b)
    if a[1] ~= b[1] then return a[1] < b[1] end
    if a[2] ~= b[2] then return a[2] < b[2] end
    return a[3] < b[3]
  end

  local function in_push_order(l)
    for i = 2, #l do
      local a, b = l[i - 1], l[i]
      if b[1] < a[1] or (b[1] == a[1] and b[2] < a[2]) then return false end
    end
    return true
  end

  function H.in_push_order(l)
    if in_push_order(l) then return l end
    local at, dues = {}, {}
    for _, m in ipairs(l) do
      local b = at[m[1]]
      if not b then
        b = {}
        at[m[1]] = b
        dues[#dues + 1] = m[1]
      end
      b[#b + 1] = m
    end
    table.sort(dues)
    local out = {}
    for _, d in ipairs(dues) do
      local b = at[d]
      if #b > 1 then
        local keys, of, plain = {}, {}, true
        for _, m in ipairs(b) do
          if m[2] >= 4294967296 or m[3] >= 1048576 then plain = false break end
          local key = m[2] * 1048576 + m[3]
          keys[#keys + 1] = key
          of[key] = m
        end
        if plain then
          table.sort(keys)
          for i, key in ipairs(keys) do b[i] = of[key] end
        else
          table.sort(b, push_before)
        end
      end
      for _, m in ipairs(b) do out[#out + 1] = m end
    end
    return out
  end
end
