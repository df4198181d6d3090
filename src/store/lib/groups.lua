-- lib/groups.lua: job groups: per topic and group, a line of ready jobs, a
-- concurrency limit (slots), a pause, and the rotation pops take turns on.

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

-- A group with no ready job, no slot in use, no settings and no turn leaves
-- no key behind. One HMGET, and an EXISTS when that is so.
function G.tidy(topic, group)
  local gkey = G.key(topic, group)
  local m = redis.call('HMGET', gkey, G.LIMIT, G.PAUSED, G.USED, G.TURN)
  if m[1] or m[2] or m[3] or m[4] then return end
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
-- line. Returns id, group; false (a group that may not hand out left the
-- rotation: the caller counts it as a skipped entry); or nil (the rotation
-- is empty, and has left the levels index). The group is out of the
-- rotation until G.taken (or G.untaken) puts it back. Cost: RPOP,
-- HMGET, ZPOPMIN.
function G.take(topic)
  local group = redis.call('RPOP', G.turns_key(topic))
  if not group then
    redis.call('ZREM', P .. LEVELS_KEY .. topic, G.LEVEL)
    return nil
  end
  local m = redis.call('HMGET', G.key(topic, group), G.LIMIT, G.PAUSED, G.USED)
  if G.open(m[1], m[2], m[3]) then
    local got = redis.call('ZPOPMIN', G.line_key(topic, group))
    if got[1] then return got[1], group end
  end
  redis.call('HDEL', G.key(topic, group), G.TURN)
  G.tidy(topic, group)
  return false
end

-- After G.take's job was leased: one slot more in use, and the group
-- back at the end of the rotation if it may hand out another job (HINCRBY,
-- HMGET, EXISTS, LPUSH), else out of it (HDEL).
function G.taken(topic, group)
  local gkey = G.key(topic, group)
  local used = redis.call('HINCRBY', gkey, G.USED, 1)
  local m = redis.call('HMGET', gkey, G.LIMIT, G.PAUSED)
  if G.open(m[1], m[2], used) and redis.call('EXISTS', G.line_key(topic, group)) == 1 then
    redis.call('LPUSH', G.turns_key(topic), group)
  else
    redis.call('HDEL', gkey, G.TURN)
  end
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
-- none ready) }; held: its ready jobs that its pause or its limit keeps
-- back now. HMGET, ZCARD, and a ZRANGE and an HGET with jobs ready.
function G.figures(topic, group, now_ms)
  local m = redis.call('HMGET', G.key(topic, group), G.LIMIT, G.PAUSED, G.USED)
  local line = G.line_key(topic, group)
  local ready = redis.call('ZCARD', line)
  local held = 0
  if not G.open(m[1], m[2], m[3]) then held = ready end
  local paused = 0
  if m[2] then paused = 1 end
  local age = -1
  if ready > 0 then
    local head = redis.call('ZRANGE', line, 0, 0)[1]
    local due = head and tonumber(redis.call('HGET', job_key(head), DUE))
    if due then age = math.max(now_ms - due, 0) end
  end
  return { ready, tonumber(m[3]) or 0, held, tonumber(m[1]) or -1, paused, age }
end
