-- history.lua: trim one topic's kept records of finished jobs.
--
-- KEYS[1]  schedule zset   {p}:schedule (unused; names the hash slot)
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  topic
-- ARGV[3]  the topic's keep_finished window, ms (0: this process keeps
--          none; only entries whose record is gone are dropped)
--
-- Touches: the topic's finished index, job hashes and logs (records past the
-- window), count hash. Publishes: nothing.
-- Helpers: RECORD.trim.
--
-- Returns { DONE, number of index entries dropped } (at most 100 a call;
-- callers repeat until 0).
--
-- Guarantees: only records go, oldest first: those older than the window
-- (index entry and hash), then index entries whose hash expired or was
-- taken by a new job. Each leaves the index and the count together. Finishes
-- trim their own topic too; this call is for topics where nothing finishes
-- any more, and for indexes left by a window since turned off.
local window = tonumber(ARGV[3])
if not window or window < 0 then
  return invalid('history takes a window of 0 ms or more, got ' .. tostring(ARGV[3]))
end
return { DONE, RECORD.trim(ARGV[2], math.floor(now_us() / 1000), window, 100) }
