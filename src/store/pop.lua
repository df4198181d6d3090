-- pop.lua: reserve ready jobs for a consumer under a time-to-run lease.
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  most jobs to reserve
-- ARGV[3]  most body bytes to return: once the bodies reserved reach it, no
--          more are taken (the first job is always taken, whatever its size)
-- ARGV[4]  nonce: random, one per call; tokens are "<nonce>.<n>"
-- ARGV[5]  "": each topic's rate limit is its bucket here (one partition);
--          else, one per topic, comma-separated: how many jobs its limit
--          lets this call take, granted by rate.lua from the topic's one
--          bucket (a partitioned queue), or "-": the caller knows of no
--          limit (if the topic has one, it gives nothing: see ungranted)
-- ARGV[6..] topics, tried in the order given
--
-- Touches: the topics' ready lists (every priority level) and their levels
-- index, rate limits, the paused set, job hashes, schedule (lease ends),
-- count hash, the latest pops list (one entry; trimmed to POPS_KEPT
-- whenever it holds 64 more), the heads (read: a lease end is the
-- earliest only before every delayed job);
-- groups: their lines, hashes, the topics' rotations and waiting sets.
-- Publishes: wake (when a lease end is the schedule's new earliest: the
-- partition's leader may be idle until a later one; see H.new_head, which
-- also ends the leader's term by then).
-- Helpers: now_us, BODIES.of, JOB.lease, CALL.in_chunks, H.new_head, COUNT.add, RATES.bucket, RATES.allows, RATES.use,
-- LISTS.take, LISTS.live, LISTS.taken, COUNT.ready; groups: G.take,
-- G.taken, G.untaken.
--
-- Cost per topic: HMGET or EXISTS of its rate limit, SISMEMBER paused; per
-- job taken RPOP, HMGET, HSET; one ZADD of every lease's end per call (not
-- per job); one RPOP that finds the default list
-- empty; per stale entry (a job deleted, rescheduled or cancelled while
-- ready) RPOP and HMGET, at most LISTS.STALE_SKIP_MAX per call. Priorities: once the default list (priority 0) is empty, one
-- ZRANGE of the topic's levels per level looked at, and one ZREM and one
-- more RPOP per level found empty, and one LLEN after taking from a level
-- other than 0: at most MAX_PRIORITY levels, whatever the backlog. A pop that takes a plain job runs exactly what it ran before
-- priorities; one that empties the default list runs one ZRANGE more.
-- Groups: once the topic's ungrouped jobs are out (the rotation is the
-- last level: one ZRANGE more, as for a priority), per grouped job RPOP of
-- the rotation, HMGET of the group, ZPOPMIN of its line, HINCRBY, HMGET,
-- EXISTS and LPUSH (or HDEL) besides the job's own; per group found that
-- may not hand out (paused, full, empty: it leaves the rotation, once per
-- change that put it in) RPOP, HMGET, HDEL, HMGET, and an EXISTS, DEL and
-- ZREM if it is left with nothing; counted with the stale entries. A pop
-- that takes a plain job runs what it ran before groups (one more field
-- in its HMGET). A grouped pop call also runs G.wake's ZRANGEBYSCORE once
-- per topic (groups whose rate limit's token came back to the rotation),
-- with a rate one HSET more per job, and a ZRANGE when the rotation is
-- empty; a group out of tokens waits out of the rotation (one ZADD), and a
-- pop that found nothing else reports it as held, retry_ms its next token.
-- A pop that finds a topic's levels index empty runs one EXISTS (the
-- groups' level lost to an older build: G.relevel); one that meets a
-- grouped job in a plain list (an older build made it ready) puts it in
-- its group's line (G.push), counted as a stale entry.
-- Per call that took jobs: one ZRANGE of the schedule's head (is the
-- earliest lease end the new earliest?), and a PUBLISH, a PTTL and perhaps a
-- PEXPIREAT only when it is.
--
-- Returns { DONE, now_us, held, retry_ms, ungranted, again, n, then per job (n):
--           id, topic, body, token, due_ms, attempts, lease_until_ms, then
--           per job with trace context: its place k (1..n), traceparent,
--           tracestate ("" when none); per flow parent: -k, its
--           children's outcomes (JSON), "" }: a plain job's reply carries no
--           empty trace values (each value costs Redis its encoding); held:
--           ready jobs a rate limit kept back (up to the number asked for),
--           retry_ms: when the limit lets the next one out (0: not held);
--           ungranted: 1 if a topic given as "-" has a limit; again: 1 if
--           the call stopped at LISTS.STALE_SKIP_MAX stale entries, so ready
--           jobs may wait behind more: the caller looks again at once.
--
-- Guarantees: a job is taken from its ready list and leased in one step, so
-- it is never handed to two consumers at once. Within a topic, jobs of
-- priority 0 go first, then 1, 2, ...; first in, first out within each
-- (topics are still tried in the order given). Grouped jobs come after
-- the topic's ungrouped ones: one job per group in turn (see
-- lib/groups.lua), by priority then arrival within a group, never more of
-- a group reserved at once than its limit, none of a paused group. The lease's end goes into
-- the schedule (no trigger key: the sweep is the clock), so a consumer that
-- dies without finishing counts as a failed attempt after ttr, not before.
-- Every delivery carries a new token (the caller's random nonce and the
-- job's place in the reply: no counter in Redis, so a failover that loses
-- recent writes cannot re-issue a token someone holds); finish, nack and
-- touch with an older token are refused. A paused topic gives nothing. A
-- topic's rate limit is taken in
-- the same step as its jobs (on a partitioned queue, granted just before
-- from the topic's one bucket), so all callers together never exceed it. The
-- reply is bounded in jobs and in bytes, so it reaches its caller well
-- within the caller's timeout.
local now = now_us()
local now_ms = math.floor(now / 1000)
local lease_from = math.ceil(now / 1000)
local want = tonumber(ARGV[2])
local max_bytes = tonumber(ARGV[3])
local nonce = ARGV[4]
local bytes = 0

-- The reply, built in place: its header's counts are set at the end.
local HEADER = 7
local PER_JOB = 7
local jobs = { DONE, now, 0, 0, 0, 0, 0 }
-- Trace context of the jobs that have one: k, traceparent, tracestate;
-- a flow parent's children: -k, their outcomes, "".
local traces = {}
local got, held, retry, ungranted = 0, 0, 0, 0
local stale = 0
local given = {}
local leased = {}
-- Leases' ends (until_ms, id, ...): one ZADD for the call (CALL.in_chunks);
-- a pop of one job writes its own (no table to build).
local leases = want > 1 and {} or nil
for a in string.gmatch(ARGV[5], '[^,]+') do given[#given + 1] = a end
for i = 6, #ARGV do
  local topic = ARGV[i]
  local at = { level = 0, now = now_ms }
  local bucket, allowed, limited
  if ARGV[5] == '' then
    bucket = RATES.bucket(topic, now_ms)
    allowed = RATES.allows(bucket)
    limited = bucket ~= nil
  elseif given[i - 5] ~= '-' then
    limited, allowed = true, tonumber(given[i - 5])
  else
    limited, allowed = false, math.huge
    -- Every partition keeps a topic's limit (its tokens are in one): a
    -- caller that took none gets nothing of a limited topic.
    if redis.call('EXISTS', P .. RATE_KEY .. topic) == 1 then
      ungranted, allowed = 1, 0
    end
  end
  -- A paused topic hands nothing out; its jobs wait in ready.
  local paused = redis.call('SISMEMBER', P .. PAUSED_KEY, topic) == 1
  if paused then allowed = 0 end
  local took = 0
  while got < want and took < allowed and bytes < max_bytes do
    local id = LISTS.take(topic, at)
    if id == nil then break end
    local f = id and redis.call('HMGET', job_key(id), STATE, TOPIC, BODY, TTR, DUE, ATTEMPTS,
      TRACEPARENT, TRACESTATE, PRIORITY, GROUP, BATCH.CHILDREN)
    if not f or not LISTS.live(at, f[1], f[2], topic, f[9], f[10]) then
      -- Stale (see LISTS.take), or a group that may not hand out left the
      -- rotation: skipped, a bounded number per call.
      if f and at.group then G.untaken(topic, at.group) end
      -- A grouped job in a plain list: a build from before groups made it
      -- ready (see lib/groups.lua). It goes to its group's line, not lost.
      if f and f[10] and not at.group and f[1] == READY and f[2] == topic then
        G.push(id, topic, f[10], tonumber(f[9]) or 0)
      end
      stale = stale + 1
      if stale >= LISTS.STALE_SKIP_MAX then break end
    else
      local job = job_key(id)
      f[3] = BODIES.of(job, f[3])
      if at.group then G.taken(topic, at.group, at) end
      local token = nonce .. '.' .. got
      local lease_until = lease_from + tonumber(f[4])
      local attempts = (tonumber(f[6]) or 0) + 1
      redis.call('HSET', job, STATE, RESERVED, TOKEN, token, LEASE, lease_until,
        ATTEMPTS, attempts)
      if leases then
        leases[#leases + 1] = lease_until
        leases[#leases + 1] = id
      else
        JOB.lease(id, lease_until)
      end
      leased[id] = true
      if EVENTS > 0 then EVENT.emit(EV_DELIVERED, id, topic, attempts, f[5]) end
      jobs[#jobs + 1] = id
      jobs[#jobs + 1] = topic
      jobs[#jobs + 1] = f[3]
      jobs[#jobs + 1] = token
      jobs[#jobs + 1] = f[5]
      jobs[#jobs + 1] = attempts
      jobs[#jobs + 1] = lease_until
      got = got + 1
      if f[7] then
        traces[#traces + 1] = got
        traces[#traces + 1] = f[7]
        traces[#traces + 1] = f[8] or ''
      end
      -- A flow's parent: its children's outcomes, counted in the bytes.
      if f[11] then
        traces[#traces + 1] = -got
        traces[#traces + 1] = f[11]
        traces[#traces + 1] = ''
        bytes = bytes + #f[11]
      end
      took = took + 1
      bytes = bytes + #f[3]
    end
  end
  -- Counted once per topic, before COUNT.ready below reads the count.
  if took > 0 then
    COUNT.add(READY, topic, -took)
    COUNT.add(RESERVED, topic, took)
  end
  LISTS.taken(topic, at)
  -- Groups: the topic's grouped jobs wait for a group's next token.
  if at.retry and got < want then
    held = held + 1
    if retry == 0 or at.retry < retry then retry = at.retry end
  end
  -- The limit held jobs back whenever it ran out with jobs still ready,
  -- also when it had no token at all: the caller needs to know when to
  -- look again.
  if limited and not paused then
    -- A granted allowance's caller knows when the next token is due.
    local wait = RATES.use(bucket, took, now_ms)
    if got < want and took == allowed and (wait > 0 or not bucket) then
      local waiting = math.min(COUNT.ready(topic), want - got)
      if waiting > 0 then
        held = held + waiting
        if wait > 0 and (retry == 0 or wait < retry) then retry = wait end
      end
    end
  end
  if got >= want or bytes >= max_bytes or stale >= LISTS.STALE_SKIP_MAX then break end
end
-- Remembered among the latest pops, so that if this reply is lost (the
-- connection breaks, a failover comes first) the caller can give the jobs
-- back uncounted (unpop.lua) instead of leaving them leased for nobody.
if got > 0 then
  if leases then
    CALL.in_chunks(leases, function(...) redis.call('ZADD', SCHEDULE, ...) end)
  end
  local ids = { nonce }
  for i = HEADER + 1, #jobs, PER_JOB do ids[#ids + 1] = jobs[i] end
  -- Ids hold no control characters: a newline separates them.
  -- Trimmed once it holds 64 more than POPS_KEPT, not on every pop: one
  -- command per pop call, not two.
  if redis.call('LPUSH', P .. POPS_KEY, table.concat(ids, '\n')) > POPS_KEPT + 64 then
    redis.call('LTRIM', P .. POPS_KEY, 0, POPS_KEPT - 1)
  end
  -- A lease end may be the schedule's earliest now: the dispatcher, idle
  -- until a later due time, hears of it (one look per call, not per job).
  -- The heads hold the delayed jobs' earliest (all of them in layout 3).
  local head = redis.call('ZRANGE', SCHEDULE, 0, 0, 'WITHSCORES')
  if head[1] and leased[head[1]] then
    local first = redis.call('ZRANGE', P .. HEADS_KEY, 0, 0, 'WITHSCORES')
    if not first[2] or tonumber(head[2]) <= tonumber(first[2]) then H.new_head(head[2]) end
  end
end
local again = 0
if stale >= LISTS.STALE_SKIP_MAX then again = 1 end
jobs[3], jobs[4], jobs[5], jobs[6], jobs[7] = held, retry, ungranted, again, got
for _, v in ipairs(traces) do jobs[#jobs + 1] = v end
return jobs
