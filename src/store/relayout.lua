-- relayout.lua: going back to layout 1 (see lib/body.lua): one batch of a
-- walk over the partition's job hashes that writes every pieced body whole.
-- The caller has set the partition's layout key to a held 1 first, so no
-- new pieced body is written while the walk goes on.
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  the walk's cursor (SCAN's; "0" to begin)
-- ARGV[3]  how many keys SCAN looks at in this call
--
-- Touches: job hashes with a pieced body (the pieces go, BODY comes).
-- Publishes: nothing. Helpers: BODIES.of, BODIES.drop.
--
-- Returns { DONE, next cursor ("0": the walk ended), bodies rewritten }.
--
-- Guarantees: each call looks at about ARGV[3] keys; a job's other fields
-- stay. SCAN returns every key that was there through the whole walk, so
-- once a walk ends no pieced body is left but one written after the hold
-- (none is: the layout key says 1).
local pattern = string.gsub(P .. JOB_KEY, '[%*%?%[%]\\]', '\\%0') .. '*'
local got = redis.call('SCAN', ARGV[2], 'MATCH', pattern, 'COUNT', tonumber(ARGV[3]))
local rewritten = 0
for _, job in ipairs(got[2]) do
  if redis.call('HEXISTS', job, BODIES.size) == 1 then
    local body = BODIES.of(job, nil)
    BODIES.drop(job)
    redis.call('HSET', job, BODY, body)
    rewritten = rewritten + 1
  end
end
return { DONE, got[1], rewritten }
