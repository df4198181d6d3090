-- layout_swap.lua: the partition leader's change of the layout flag (see
-- lib/body.lua), made only if the flag is still what the leader read: an
-- operator's `delayq layout --hold` written in between stays.
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  the flag as the leader read it, in its written form ("" for
--          layout 1 not held: no key)
-- ARGV[3]  the flag to write, in the same form ("": delete the key)
--
-- Touches: the layout flag; {p}:indexed's `out` when raising to 3 (see
-- index.lua). Cost: one GET, at most one SET or DEL and one HSET.
-- Helpers: none (BODIES.key names the flag).
--
-- Returns { DONE, 1 } when written, { DONE, 0 } when the flag had changed
-- (nothing written).
--
-- Guarantees: the flag is read as Rust's Flag::parse reads it (leading
-- digits, else 1; " held" at the end), so a flag an operator broke (not a
-- string, no digits) compares as layout 1 not held and is written over.
local key = P .. BODIES.key
local v = redis.pcall('GET', key)
if type(v) ~= 'string' then v = '' end
local layout = tonumber(string.match(v, '^%d+') or '') or 1
local held = string.sub(v, -5) == ' held'
local now = ''
if held then now = layout .. ' held' elseif layout ~= 1 then now = tostring(layout) end
if now ~= ARGV[2] then return { DONE, 0 } end
-- Raised to 3: delayed jobs may leave the schedule from the next call on,
-- so the way back is owed from now (index.lua's `out`).
if (tonumber(string.match(ARGV[3], '^%d+') or '') or 1) >= 3 then
  redis.call('HSET', P .. INDEXED_KEY, 'out', '1')
end
if ARGV[3] == '' then redis.call('DEL', key) else redis.call('SET', key, ARGV[3]) end
return { DONE, 1 }
