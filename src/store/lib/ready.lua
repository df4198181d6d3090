-- lib/ready.lua: ready lists, one per topic and priority level: putting a
-- job in line, taking the next, the stale entries a pop skips, and the
-- notice of new ready jobs.
-- Fills: LISTS (declared in lib/call.lua).

-- Priorities (H-prio). Level 0, the default, is the ready list above, as
-- before priorities; level n (1..MAX_PRIORITY) has a list of its own,
-- READY_LEVEL_KEY .. n .. ':' .. topic (the number first: no topic can
-- name another's list). LEVELS_KEY .. topic indexes the levels 1.. whose
-- list may hold jobs (member and score n): every non-empty list is in it,
-- and a level leaves it when its list is seen empty. Pops take level 0
-- first, then 1, 2, ...; FIFO within each. Every use of a ready list goes
-- through these helpers; a caller that has the job's PRIORITY field at hand
-- passes it (LISTS.level_of), else (nil) it is read (in one HMGET with its GROUP).
function LISTS.level_of(stored) return tonumber(stored) or 0 end
function LISTS.key(topic, level)
  if level == 0 then return KEY.ready(topic) end
  return P .. READY_LEVEL_KEY .. level .. ':' .. topic
end
function LISTS.levels_key(topic) return P .. LEVELS_KEY .. topic end

-- Puts `id` at the back of its level's list, or at the front (`front`: it
-- was first in line). One LPUSH/RPUSH; a level's first job also one ZADD.
-- Each command is named literally: some managed services refuse a script
-- whose redis.call names its command through a variable.
function LISTS.push_list(key, id, front)
  if front then return redis.call('RPUSH', key, id) end
  return redis.call('LPUSH', key, id)
end
function LISTS.push(id, topic, level, front, group)
  -- Level 0 (every job of a queue without priorities) the short way.
  if level == 0 and not group then return LISTS.push_list(KEY.ready(topic), id, front) end
  -- Groups: a grouped job waits in its group's line (lib/groups.lua).
  if group then return G.push(id, topic, group, level, front) end
  if LISTS.push_list(LISTS.key(topic, level), id, front) == 1 then
    redis.call('ZADD', LISTS.levels_key(topic), level, level)
  end
end

-- A ready job that leaves ready any other way than by a pop (deleted,
-- rescheduled, cancelled, replaced) keeps its entry in the list: taking it
-- out would be an LREM, O(length of the list), and a cancel of a thousand
-- jobs behind a long backlog would hold Redis for seconds. The entry is
-- stale from then on; the pop that reaches it skips it (LISTS.take checks
-- the job, see there), so the cost is one RPOP and one HMGET, paid once, by
-- a pop. A job that comes back to ready before its stale entry is reached
-- may be handed out from the earlier place in line: never early, never
-- twice (the hand-over changes its state), only sooner than its new place.

-- The next entry of `topic`'s ready lists, or nil when none is left. `at`
-- ({ level = 0 } at the start of a pop) remembers the level reached. Cost:
-- one RPOP per entry; once the default list is empty, per level looked at
-- one ZRANGE (O(log levels)), one RPOP and, for a level found empty, one
-- ZREM: bounded by MAX_PRIORITY, never by the backlog. An entry may be
-- stale (see above): the caller checks it with LISTS.live.
-- Groups: after the last level, the rotation of groups (G.LEVEL, see
-- lib/groups.lua): `at.group` is the taken job's group; false is a group
-- skipped (counted by the caller as a stale entry). A topic whose index
-- is empty costs one EXISTS more (G.relevel).
function LISTS.take(topic, at)
  while at.level do
    if at.level == G.LEVEL then
      local id, group = G.take(topic, at)
      if id == nil then at.level = nil end
      at.group = group
      return id
    end
    local id = redis.call('RPOP', LISTS.key(topic, at.level))
    if id then return id end
    if at.level ~= 0 then redis.call('ZREM', LISTS.levels_key(topic), at.level) end
    at.level = tonumber(redis.call('ZRANGE', LISTS.levels_key(topic), 0, 0)[1])
    if not at.level then at.level = G.relevel(topic) end
  end
  return nil
end

-- Whether an entry taken from `topic`'s list of level `at.level` names a job
-- that is ready there now: `state`, `job_topic` and `priority` are the
-- job's STATE, TOPIC, PRIORITY and GROUP fields (nil for a job that is
-- gone). A grouped job is live only in its group's line.
function LISTS.live(at, state, job_topic, topic, priority, group)
  if state ~= READY or job_topic ~= topic then return false end
  if at.level == G.LEVEL then return group == at.group end
  return not group and LISTS.level_of(priority) == at.level
end

-- The most stale entries one pop skips before it stops (and tells its
-- caller to look again at once): after a cancel of many ready jobs at the
-- front of a list, no single call holds Redis for long.
LISTS.STALE_SKIP_MAX = 1000

-- After a pop's last LISTS.take of `topic`: a level other than 0 that it
-- emptied leaves the index now, not at the next pop (one LLEN).
function LISTS.taken(topic, at)
  if at.level and at.level ~= 0 and at.level ~= G.LEVEL
    and redis.call('LLEN', LISTS.key(topic, at.level)) == 0 then
    redis.call('ZREM', LISTS.levels_key(topic), at.level)
  end
end

-- The format is layout::ready_notice's.
function LISTS.notify(topic, n)
  redis.call('PUBLISH', P .. READY_CHANNEL, n .. ' ' .. topic)
end
