-- batch_cancel_jobs.lua: delete a page of a cancelled batch's jobs in one
-- partition, those not handed out.
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  batch id
-- ARGV[3]  cursor: the last id of the previous page ("" from the start)
-- ARGV[4]  most entries to look at (1..MAX_TAG_PAGE)
--
-- Touches: the batch's live index in this partition, the jobs' hashes and
-- logs, trigger keys, the schedule, ready lists, their tags' indexes;
-- count hash; a note per deleted job (BATCH.left, through JOB.delete).
-- Events: deleted, per job. Helpers: JOB.delete, BATCH.live_key.
--
-- Returns { DONE, last id looked at ("" when the index ends in this page),
-- how many jobs were deleted }.
--
-- Cost: one ZRANGEBYLEX and one HMGET per entry, and a delete's writes per
-- deleted job: bounded by the page. Guarantees: delayed and ready jobs go,
-- as DELETE /v1/jobs/{id} removes them; reserved jobs (handed out) and dead
-- ones stay; an entry whose job is gone or of another batch leaves the
-- index. The page is one atomic step.
local b, after, limit = ARGV[2], ARGV[3], tonumber(ARGV[4])
if b == '' or not limit or limit < 1 or limit > MAX_TAG_PAGE then
  return invalid('batch_cancel_jobs takes a batch id, a cursor and a limit of 1 to ' .. MAX_TAG_PAGE)
end
local key = BATCH.live_key(b)
local from = '-'
if after ~= '' then from = '(' .. after end
local ids = redis.call('ZRANGEBYLEX', key, from, '+', 'LIMIT', 0, limit)
local deleted = 0
for _, id in ipairs(ids) do
  local f = redis.call('HMGET', job_key(id), STATE, TOPIC, TAGS, DEDUP, GROUP, BATCH.FIELD)
  if not f[2] or f[6] ~= b or f[1] == FINISHED then
    redis.call('ZREM', key, id)
  elseif f[1] ~= RESERVED and f[1] ~= DEAD then
    JOB.delete(id, state_of(f[1]), f[2], f[3], f[4], f[5] or false, f[6])
    deleted = deleted + 1
  end
end
local last = ''
if #ids == limit then last = ids[#ids] end
return { DONE, last, deleted }
