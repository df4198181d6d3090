-- lib/tags.lua: tag indexes: a job's entries, dropping them, paging them.
-- Fills: TAG (declared in lib/call.lua).

-- Tags (issue 26): a job's tags are one hash field, TAGS, one tag per line
-- (a tag holds no control character), and an entry in one index per tag
-- and partition, TAG_KEY .. tag: a zset id -> 0, paged by id (ZRANGEBYLEX),
-- so a page resumes after the last id whatever changed before it. Every
-- place that deletes or replaces a job's hash drops its entries (JOB.forget),
-- so an index holds only live jobs (and pages drop any stale entry they
-- meet). A job without tags has no field: TAG.untag of nil costs nothing.
function TAG.key(tag) return P .. TAG_KEY .. tag end

-- Drops `id` from the indexes of `stored` (its TAGS field, or nil).
function TAG.untag(id, stored)
  if not stored then return end
  for tag in string.gmatch(stored, '[^\n]+') do
    redis.call('ZREM', TAG.key(tag), id)
  end
end

-- Tags: a page of the index of `tag` after id `after` ('' from the start),
-- at most `limit` ids in byte order, and each one's STATE, TOPIC, TAGS,
-- DEDUP, BATCH.FIELD.
-- Entries whose job is gone or no longer carries the tag are dropped here
-- (none should be: see TAG.untag) and not returned. Costs O(log N + limit).
-- Returns the live entries { id, state, topic, tags, dedup } and the last id looked at
-- ('' when the index ends within this page).
function TAG.page(tag, after, limit)
  local key = TAG.key(tag)
  local from = '-'
  if after ~= '' then from = '(' .. after end
  local ids = redis.call('ZRANGEBYLEX', key, from, '+', 'LIMIT', 0, limit)
  local live = {}
  for _, id in ipairs(ids) do
    local f = redis.call('HMGET', job_key(id), STATE, TOPIC, TAGS, DEDUP, BATCH.FIELD)
    local has = false
    if f[2] and f[3] then
      for t in string.gmatch(f[3], '[^\n]+') do
        if t == tag then has = true break end
      end
    end
    if has and f[1] ~= FINISHED then
      live[#live + 1] = { id = id, state = state_of(f[1]), topic = f[2], tags = f[3], dedup = f[4], batch = f[5] }
    else
      redis.call('ZREM', key, id)
    end
  end
  local last = ''
  if #ids == limit then last = ids[#ids] end
  return live, last
end
