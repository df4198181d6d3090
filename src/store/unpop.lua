-- unpop.lua: give back the jobs of pops whose replies were lost (the
-- connection broke, or a failover came between the pop and its reply):
-- leased to nobody, they would otherwise wait out their ttr and count an
-- attempt no consumer had.
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2..] nonces of the lost pops
--
-- Touches: the latest pops list (read), job hashes, schedule (lease ends),
-- the topics' ready lists, count hash. Publishes: ready. Events:
-- released, per job.
-- Helpers: JOB.unreserve.
-- Groups: per grouped job, its slot back (G.free) and to the head of its
-- group's line (G.push); a plain job: one field more in its HMGET.
--
-- Returns { DONE, jobs given back }.
--
-- Guarantees: only a job still leased under one of the pops' tokens
-- ("<nonce>.<n>") is given back, so a job that was finished, nacked,
-- replaced or leased again meanwhile is left alone, and calling it twice
-- changes nothing the second time. A pop no longer among the latest
-- POPS_KEPT is not found: its jobs come back after their ttr. The cost is
-- bounded by the list (POPS_KEPT entries, up to 64 more), on a path taken only after a
-- lost reply.
local lost = {}
for i = 2, #ARGV do lost[ARGV[i]] = true end
local given = 0
for _, entry in ipairs(redis.call('LRANGE', P .. POPS_KEY, 0, -1)) do
  local nonce = string.match(entry, '^[^\n]*')
  if lost[nonce] then
    local prefix = nonce .. '.'
    local first = true
    for id in string.gmatch(entry, '[^\n]+') do
      if first then
        first = false
      else
        local f = redis.call('HMGET', job_key(id), STATE, TOPIC, TOKEN, PRIORITY, GROUP)
        if f[1] == RESERVED and f[3] and string.sub(f[3], 1, #prefix) == prefix then
          JOB.unreserve(id, f[2], LISTS.level_of(f[4]), f[5])
          given = given + 1
        end
      end
    end
  end
end
return { DONE, given }
