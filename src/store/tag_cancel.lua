-- tag_cancel.lua: delete a page of a tag's jobs in one partition, those not
-- handed out.
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  tag
-- ARGV[3]  cursor: the last id of the previous page ("" from the start)
-- ARGV[4]  most entries to look at (1..MAX_TAG_PAGE)
--
-- Touches: the tag's index, the jobs' hashes and logs, trigger keys, the schedule,
-- ready lists and dead sets, the other indexes of their tags; count hash.
-- Publishes: nothing. Events: deleted, per job. Helpers: TAG.page,
-- JOB.delete.
-- Groups: a ready or reserved job's group is read (one HGET) to leave its
-- group's line or give its slot back.
-- Batches: a job of a batch leaves a note for its home (BATCH.left).
--
-- Returns { DONE, last id looked at ("" when the index ends in this page),
-- how many jobs were deleted, then id, state of each job left alone }.
--
-- Cost: one ZRANGEBYLEX and one HMGET per entry; per deleted job a DEL,
-- its structure's removal (ZREM + DEL of the trigger for a delayed job,
-- nothing for a ready one: its list entry is skipped by the pop that
-- reaches it; ZREM for a dead one), one ZREM per tag it has (at most 8),
-- and a GET and DEL for a job with a simple dedup key. Bounded by the page,
-- never by the backlog.
--
-- Guarantees: delayed, ready and dead jobs go, as DELETE /v1/jobs/{id}
-- removes them (no record kept); reserved jobs (handed out) are left as
-- they are and reported: their consumer finishes or fails them. The page
-- is one atomic step.
local limit = tonumber(ARGV[4])
if not limit or limit < 1 or limit > MAX_TAG_PAGE then
  return invalid('limit must be 1 to ' .. MAX_TAG_PAGE)
end
local live, last = TAG.page(ARGV[2], ARGV[3], limit)
local changed, skipped = 0, {}
for _, j in ipairs(live) do
  if j.state == RESERVED then
    skipped[#skipped + 1] = j.id
    skipped[#skipped + 1] = j.state
  else
    JOB.delete(j.id, j.state, j.topic, j.tags, j.dedup, nil, j.batch)
    changed = changed + 1
  end
end
local reply = { DONE, last, changed }
for _, v in ipairs(skipped) do reply[#reply + 1] = v end
return reply
