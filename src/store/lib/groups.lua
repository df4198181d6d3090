-- lib/groups.lua: job groups: per topic and group, a line of ready jobs, a
-- concurrency limit (slots), a pause, and the rotation pops take turns on.
-- Fills: G (made in the prelude, with its names).

-- Groups (issue 41). A job with a group (field GROUP) never enters its
-- topic's ready lists: once ready it waits in its group's line, a zset
-- G.READY_KEY .. topic .. '\n' .. group ordered by priority, then
-- arrival (score level * G.SPAN + n, n from the group's counter; a job
-- given back to the head of its line gets -n). A topic holds no control
-- character, so the newline keeps topic "a:b" + group "c" apart from topic
-- "a" + group "b:c". The group's hash, G.HASH_KEY .. the same, holds its
-- settings (G.LIMIT, G.PAUSED), its slots in use (G.USED), the counter
-- (G.SEQ) and G.TURN while the group is in the rotation.
--
-- The rotation, G.TURNS_KEY .. topic, lists each group that may hand
-- out a job once (G.TURN says it is in): a pop takes the group at its
-- front, one job of that group, and puts the group at the back if it still
-- may hand out one. A group that may not (paused, at its limit, its line
-- empty) leaves the rotation when a pop reaches it, and comes back when
-- that changes (a job becomes ready, a slot frees, a resume, a higher
-- limit): a full group is not walked by every pop. The rotation is one more
-- level in the topic's levels index (G.LEVEL, after every priority),
-- so a pop reaches it only once the topic's ungrouped jobs are out, and a
-- plain pop pays nothing for groups. G.INDEX_KEY .. topic indexes the
-- groups that have ready or reserved jobs or settings (zset, group -> 0,
-- paged by name); a group with none of them leaves no key (G.tidy).
--
-- Every reservation of a grouped job holds one slot from its lease to its
-- end (finish, nack, lease end, cancel, delete, replace, reschedule,
-- release, unpop): each of those paths calls G.free in its own script.
G.LEVEL = MAX_PRIORITY + 1
G.SPAN = 1e12

function G.key(topic, group) return P .. G.HASH_KEY .. topic .. '\n' .. group end
function G.line_key(topic, group)
  return P .. G.READY_KEY .. topic .. '\n' .. group
end
function G.turns_key(topic) return P .. G.TURNS_KEY .. topic end
function G.index_key(topic) return P .. G.INDEX_KEY .. topic end

-- Whether a group with these G.LIMIT, G.PAUSED and G.USED values may
-- hand out one more job.
function G.open(limit, paused, used)
  if paused then return false end
  limit = tonumber(limit)
  return not limit or (tonumber(used) or 0) < limit
end

-- Puts the group at the back of the rotation unless it is in it (one
-- HSETNX; one LPUSH and one ZADD when it was not). The ZADD each time, not
-- only into an empty rotation: a build from before groups, popping the
-- same topic, drops a level whose list it finds empty.
function G.enlist(topic, group)
  if redis.call('HSETNX', G.key(topic, group), G.TURN, 1) == 0 then return false end
  redis.call('LPUSH', G.turns_key(topic), group)
  redis.call('ZADD', P .. LEVELS_KEY .. topic, G.LEVEL, G.LEVEL)
  return true
end

-- The groups' level when the topic's levels index has lost it while
-- groups are in the rotation or wait for a token, put back (else nil).
-- A build from before groups drops it: its pop finds the level's list (as
-- it knows levels) empty. One EXISTS, and a ZADD when it was lost: a pop
-- that finds the index empty asks, so no grouped job waits for a group to
-- enter the rotation anew.
function G.relevel(topic)
  if redis.call('EXISTS', G.turns_key(topic), G.wait_key(topic)) == 0 then return nil end
  redis.call('ZADD', P .. LEVELS_KEY .. topic, G.LEVEL, G.LEVEL)
  return G.LEVEL
end

-- Why this partition cannot take grouped jobs now, or nil. An instance of
-- a build from before groups would put one in a plain ready list, leave
-- its slot taken, and drop the rotation's level. The builds that know
-- groups read layout G.LAYOUT, so the layout in force says whether one
-- runs (one GET); a layout never set yet (no
-- leader looked: a new queue, or one an older build leads) the live
-- heartbeats say (an older build's has no layout), as the leader would.
function G.refusal()
  local why = 'groups need every instance of this queue to run this version (an instance of an older build runs, or the layout is held below ' .. G.LAYOUT .. ')'
  local flag = redis.call('GET', P .. BODIES.key)
  if flag then
    if (tonumber(string.match(flag, '^%d+')) or 1) < G.LAYOUT then return why end
    return nil
  end
  local now_ms = math.floor(now_us() / 1000)
  local ids = redis.call('ZRANGEBYSCORE', P .. G.INSTANCES_KEY, now_ms, '+inf', 'LIMIT', 0, 1000)
  for _, id in ipairs(ids) do
    local beat = redis.call('GET', P .. G.INSTANCE_KEY .. id)
    local ok, b = pcall(cjson.decode, beat or '{}')
    local reads = ok and type(b) == 'table' and tonumber(b.layout) or 1
    if beat and reads < G.LAYOUT then return why end
  end
  return nil
end

-- A group with no ready job, no slot in use, no settings and no turn leaves
-- no key behind. One HMGET, and an EXISTS when that is so.
function G.tidy(topic, group)
  local gkey = G.key(topic, group)
  local m = redis.call('HMGET', gkey, G.LIMIT, G.PAUSED, G.USED, G.TURN, G.RATE_PER_S)
  if m[1] or m[2] or m[3] or m[4] or m[5] then return end
  if redis.call('EXISTS', G.line_key(topic, group)) == 1 then return end
  redis.call('DEL', gkey)
  redis.call('ZREM', G.index_key(topic), group)
end

-- After a change that may let the group hand out a job: into the rotation
-- if it may and has ready jobs. Returns true if it went in (its caller
-- then tells waiting consumers).
function G.reopen(topic, group)
  local m = redis.call('HMGET', G.key(topic, group), G.LIMIT, G.PAUSED, G.USED, G.TURN)
  if m[4] or not G.open(m[1], m[2], m[3]) then return false end
  if redis.call('EXISTS', G.line_key(topic, group)) == 0 then return false end
  return G.enlist(topic, group)
end

-- Puts ready job `id` in its group's line (of priority `level`; `front`:
-- at the head of it), and the group in the rotation if it may hand it out.
-- HINCRBY, ZADD, HMGET, then G.enlist's; a group's first job one ZADD
-- more (the index).
function G.push(id, topic, group, level, front)
  local gkey = G.key(topic, group)
  local n = redis.call('HINCRBY', gkey, G.SEQ, 1)
  if n == 1 then redis.call('ZADD', G.index_key(topic), 0, group) end
  if front then n = -n end
  redis.call('ZADD', G.line_key(topic, group), level * G.SPAN + n, id)
  local m = redis.call('HMGET', gkey, G.LIMIT, G.PAUSED, G.USED, G.TURN)
  if not m[4] and G.open(m[1], m[2], m[3]) then G.enlist(topic, group) end
end

-- The rotation's next job: the group at its front and the first job of its
-- line. `at` is the pop's place (ready_take's): `at.now` its time (ms);
-- G.take sets `at.tokens` and `at.rate` for G.taken, and `at.retry` (ms)
-- when the rotation is empty but groups wait for a token. Returns id,
-- group; false (a group that may not hand out left the rotation, or waits
-- for a token: the caller counts it as a skipped entry); or nil (the
-- rotation is empty; the levels index keeps it only while groups wait for
-- a token). The group is out of the rotation until G.taken (or G.untaken)
-- puts it back. Cost: RPOP, HMGET, ZPOPMIN; once per pop call G.wake.
function G.take(topic, at)
  if not at.woke then
    at.woke = true
    G.wake(topic, at.now)
  end
  local group = redis.call('RPOP', G.turns_key(topic))
  if not group then
    local nxt = redis.call('ZRANGE', G.wait_key(topic), 0, 0, 'WITHSCORES')
    if nxt[2] then
      at.retry = math.max(tonumber(nxt[2]) - at.now, 1)
    else
      redis.call('ZREM', P .. LEVELS_KEY .. topic, G.LEVEL)
    end
    return nil
  end
  local gkey = G.key(topic, group)
  local m = redis.call('HMGET', gkey, G.LIMIT, G.PAUSED, G.USED, G.RATE_PER_S, G.RATE_BURST,
    G.RATE_TOKENS, G.RATE_AT)
  if G.open(m[1], m[2], m[3]) then
    local tokens
    if m[4] then
      tokens = G.tokens(m, at.now)
      if tokens < 1000 then
        G.park(topic, group, tonumber(m[4]), tokens, at.now)
        return false
      end
    end
    local got = redis.call('ZPOPMIN', G.line_key(topic, group))
    if got[1] then
      at.tokens, at.rate = tokens, tonumber(m[4])
      return got[1], group
    end
  end
  redis.call('HDEL', gkey, G.TURN)
  G.tidy(topic, group)
  return false
end

-- After G.take's job was leased: one slot more in use, a token used (with
-- a rate), and the group back at the end of the rotation if it may hand
-- out another job (HINCRBY, HMGET, EXISTS, LPUSH; with a rate one HSET
-- more), else out of it (HDEL), or waiting for its next token (ZADD).
function G.taken(topic, group, at)
  local gkey = G.key(topic, group)
  local used = redis.call('HINCRBY', gkey, G.USED, 1)
  local m = redis.call('HMGET', gkey, G.LIMIT, G.PAUSED)
  local more = G.open(m[1], m[2], used) and redis.call('EXISTS', G.line_key(topic, group)) == 1
  if at.rate then
    local left = at.tokens - 1000
    redis.call('HSET', gkey, G.RATE_TOKENS, left, G.RATE_AT, at.now)
    if more and left < 1000 then
      G.park(topic, group, at.rate, left, at.now)
      return
    end
  end
  if more then
    redis.call('LPUSH', G.turns_key(topic), group)
  else
    redis.call('HDEL', gkey, G.TURN)
  end
end

-- Per-group rate limits: a group's token bucket is in its hash (G.RATE_*:
-- jobs a second, burst, tokens in thousandths, when last taken). A group
-- out of tokens leaves the rotation for G.wait_key(topic), a zset group ->
-- when its next token is due, still marked G.TURN; the first G.take of a
-- pop call puts back those whose time came (G.wake). The topic's rate limit
-- holds beside it (pop.lua counts every job against it).
function G.wait_key(topic) return P .. G.WAIT_KEY .. topic end

-- The group's tokens now, from its HMGET's rate fields m[4..7].
function G.tokens(m, now_ms)
  local per_s, burst = tonumber(m[4]), tonumber(m[5])
  local tokens = tonumber(m[6]) or burst * 1000
  local at = tonumber(m[7]) or now_ms
  if now_ms > at then tokens = math.min(burst * 1000, tokens + (now_ms - at) * per_s) end
  return tokens
end

-- The group waits for its next token (one ZADD).
function G.park(topic, group, per_s, tokens, now_ms)
  redis.call('ZADD', G.wait_key(topic), now_ms + math.ceil((1000 - tokens) / per_s), group)
end

-- Groups whose next token is due go back to the rotation (a hundred at
-- most a call: the rest at the next): one ZRANGEBYSCORE, and a ZREM and an
-- LPUSH when some are.
function G.wake(topic, now_ms)
  local key = G.wait_key(topic)
  local due = redis.call('ZRANGEBYSCORE', key, '-inf', now_ms, 'LIMIT', 0, 100)
  if #due == 0 then return end
  redis.call('ZREM', key, unpack(due))
  redis.call('LPUSH', G.turns_key(topic), unpack(due))
end

-- After G.take's job turned out not to be ready there (it should not
-- happen: every way out of a line takes the entry out): the group's turn
-- goes on as if the entry had not been there.
function G.untaken(topic, group)
  redis.call('HDEL', G.key(topic, group), G.TURN)
  G.reopen(topic, group)
  G.tidy(topic, group)
end

-- A reservation of a grouped job ended: its slot comes back, and the group
-- into the rotation if that lets it hand out a ready job (then waiting
-- consumers hear of it). HINCRBY, HMGET, EXISTS; at most HDEL, LPUSH,
-- PUBLISH more.
function G.free(topic, group)
  local gkey = G.key(topic, group)
  if redis.call('HINCRBY', gkey, G.USED, -1) <= 0 then redis.call('HDEL', gkey, G.USED) end
  if G.reopen(topic, group) then
    redis.call('PUBLISH', P .. READY_CHANNEL, '1 ' .. topic)
  else
    G.tidy(topic, group)
  end
end

-- A ready job leaves its group's line any other way than by a pop (delete,
-- cancel, reschedule, replace): its entry goes (ZREM, O(log N)); a group
-- left with nothing leaves no key.
function G.unready(id, topic, group)
  redis.call('ZREM', G.line_key(topic, group), id)
  G.tidy(topic, group)
end

-- A group's figures: { ready, reserved, held, limit (-1: none), paused (0
-- or 1), head age (ms since the job at the head of its line fell due; -1:
-- none ready), rate (jobs a second, -1: none), burst }; held: its ready
-- jobs that its pause, its limit or its rate keeps back now. HMGET, ZCARD,
-- ZSCORE, and a ZRANGE and an HGET with jobs ready.
function G.figures(topic, group, now_ms)
  local m = redis.call('HMGET', G.key(topic, group), G.LIMIT, G.PAUSED, G.USED, G.RATE_PER_S,
    G.RATE_BURST)
  local line = G.line_key(topic, group)
  local ready = redis.call('ZCARD', line)
  local held = 0
  if not G.open(m[1], m[2], m[3]) or redis.call('ZSCORE', G.wait_key(topic), group) then
    held = ready
  end
  local paused = 0
  if m[2] then paused = 1 end
  local age = -1
  if ready > 0 then
    local head = redis.call('ZRANGE', line, 0, 0)[1]
    local due = head and tonumber(redis.call('HGET', job_key(head), DUE))
    if due then age = math.max(now_ms - due, 0) end
  end
  return { ready, tonumber(m[3]) or 0, held, tonumber(m[1]) or -1, paused, age,
    m[4] or -1, tonumber(m[5]) or 0 }
end
