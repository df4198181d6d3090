-- hold.lua: right before jobs leased ahead are sent, check that each lease
-- is still the sender's, and extend those that would end before their
-- delivery can finish.
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2..] one or more leases, 4 arguments each: id, lease token, a
--          length in ms (a held lease ending sooner than now + length is
--          extended to end then), and the attempt the lease's pop counted
--
-- Touches: job hashes (read; the lease end of those extended, the
-- attempts of those rescheduled while their job waited), schedule
-- (the lease ends extended), the paused set (read), ready lists (a paused
-- topic's jobs given back), the partition leader's term expiry (see
-- H.new_head). Publishes: wake (when an extended lease end is the new
-- earliest), ready (a job given back). Helpers: now_us, JOB.lease,
-- H.wake_if_head, JOB.unreserve.
-- Groups: a job given back (its topic paused) reads its priority and
-- group in one HMGET, and a grouped one gives its slot back (G.free).
--
-- Returns { DONE, then per lease: status, lease end (Unix ms), ms left }:
-- status DONE (held: still reserved under this token; deleted,
-- rescheduled, finished, nacked or leased again is not; one whose topic
-- is paused is given back, uncounted, and is not), MISSING (no job,
-- or a finished job's record) or STALE; 0 and 0 when not held.
--
-- Guarantees: only the current lease holder's lease is extended, never
-- shortened. A job rescheduled while it waited (delayed, or due again and
-- ready, no token since: a reschedule removes it, where a nack, a release
-- or a lease that ran out leave it empty) whose attempts are still the
-- lease's is uncounted: its attempt was never sent. a lease long enough is only read (one HMGET a job, no write),
-- so a check of jobs whose leases are long changes nothing. A lease whose
-- end has passed but that the dispatcher has not yet taken back is still
-- held: its attempt is counted and it has not been given to anyone else.
if #ARGV < 5 or (#ARGV - 1) % 4 ~= 0 then
  return invalid('hold takes leases of 4 arguments: id, token, length in ms, attempt')
end
-- Every argument checked before the first write (a refusal changes
-- nothing).
for i = 2, #ARGV, 4 do
  local length, attempt = tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  if not length or length < 0 or not attempt or attempt < 1 then
    return invalid('job ' .. ((i + 2) / 4) .. ': a length in ms (0 or more) and an attempt (1 or more)')
  end
end
local now = math.ceil(now_us() / 1000)
local paused = {}
local function topic_paused(topic)
  if paused[topic] == nil then
    paused[topic] = redis.call('SISMEMBER', P .. PAUSED_KEY, topic) == 1
  end
  return paused[topic]
end
local out = { DONE }
for i = 2, #ARGV, 4 do
  local id = ARGV[i]
  local length = tonumber(ARGV[i + 2])
  local job = job_key(id)
  local f = redis.call('HMGET', job, STATE, TOKEN, LEASE, TOPIC, ATTEMPTS)
  if not f[4] or f[1] == FINISHED then
    out[#out + 1] = MISSING
    out[#out + 1] = 0
    out[#out + 1] = 0
  elseif f[1] == RESERVED and f[2] == ARGV[i + 1] and topic_paused(f[4]) then
    -- Its topic was paused while it waited: a pause stops what is not yet
    -- sent, so it goes back to the head of its list, its attempt uncounted.
    JOB.unreserve(id, f[4], nil)
    out[#out + 1] = STALE
    out[#out + 1] = 0
    out[#out + 1] = 0
  elseif f[1] ~= RESERVED or f[2] ~= ARGV[i + 1] then
    if (not f[1] or f[1] == READY) and not f[2] and f[5] == ARGV[i + 3] then
      redis.call('HINCRBY', job, ATTEMPTS, -1)
    end
    out[#out + 1] = STALE
    out[#out + 1] = 0
    out[#out + 1] = 0
  else
    local until_ms = tonumber(f[3]) or 0
    if until_ms < now + length then
      until_ms = now + length
      redis.call('HSET', job, LEASE, until_ms)
      JOB.lease(id, until_ms)
      H.wake_if_head(id, until_ms)
    end
    out[#out + 1] = DONE
    out[#out + 1] = until_ms
    out[#out + 1] = until_ms - now
  end
end
return out
