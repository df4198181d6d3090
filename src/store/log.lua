-- log.lua: a running job's holder appends a line to the job's log.
--
-- KEYS[1]  schedule zset   {p}:schedule (the partition's slot; not touched)
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  id    ARGV[3] lease token
-- ARGV[4]  the line: 0 to MAX_LOG_LINE_BYTES bytes, no control character
--          but tab
--
-- Touches: the job's log list (LOG_KEY), stored as "<ms> TAB <line>" (Redis
-- time). Helpers: invalid, RUNNING.fence, now_us, KEY.log.
-- Cost: O(1) plus the lines trimmed (one, once the log is full): an HMGET,
-- an RPUSH, an LTRIM.
--
-- Returns { status }: as progress.lua. Only DONE wrote.
--
-- Guarantees: only the current lease holder appends; the log keeps its
-- last LOG_LINES_KEPT lines, across attempts. It goes with the job: a
-- delete, a cancel, a replace or a finish without a kept record deletes
-- it, a kept record gives it the record's expiry (RECORD.keep), and the
-- trim of records deletes it with theirs.
local id, token, line = ARGV[2], ARGV[3], ARGV[4]
if not line or #line > MAX_LOG_LINE_BYTES then
  return invalid('a log line takes at most ' .. MAX_LOG_LINE_BYTES .. ' bytes')
end
if string.find(line, '[%z\1-\8\10-\31\127]') then
  return invalid('a log line holds no control character but tab')
end
local status = RUNNING.fence(id, token)
if status ~= DONE then return { status } end
local key = KEY.log(id)
redis.call('RPUSH', key, math.floor(now_us() / 1000) .. '\t' .. line)
redis.call('LTRIM', key, -LOG_LINES_KEPT, -1)
return { DONE }
