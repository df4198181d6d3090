-- tag_list.lua: a page of a tag's jobs in one partition, by id.
--
-- KEYS[1]  schedule zset   {p}:schedule (unused; names the hash slot)
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  tag
-- ARGV[3]  cursor: the last id of the previous page ("" from the start)
-- ARGV[4]  most entries to look at (1..MAX_TAG_PAGE)
--
-- Touches: reads the tag's index {p}:tag:<tag> and the jobs' hashes; drops
-- an index entry whose job is gone or no longer has the tag (none should
-- be there). Publishes: nothing. Helpers: TAG.page.
--
-- Returns { DONE, last id looked at ("" when the index ends in this page),
-- then the ids of the tag's jobs }.
--
-- Cost: one ZRANGEBYLEX (O(log N + page)) and one HMGET per entry: in
-- proportion to the page, never to the index.
--
-- Guarantees: ids come in byte order and a page resumes after the cursor's
-- id, so a job that keeps the tag is listed once, never skipped.
local limit = tonumber(ARGV[4])
if not limit or limit < 1 or limit > MAX_TAG_PAGE then
  return invalid('limit must be 1 to ' .. MAX_TAG_PAGE)
end
local live, last = TAG.page(ARGV[2], ARGV[3], limit)
local reply = { DONE, last }
for _, j in ipairs(live) do reply[#reply + 1] = j.id end
return reply
