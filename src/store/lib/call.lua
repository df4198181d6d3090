-- lib/call.lua: what every delayq script shares: the conventions of a call,
-- its prefix and schedule, key names, states, the clock, the deadline and
-- the checks of arguments.
--
-- delayq loads its scripts into Redis once, as one function library
-- (FUNCTION LOAD): a generated prelude first (key kinds, hash fields, states
-- and statuses, named once in src/store/layout.rs and src/store/mod.rs),
-- then the helper files of src/store/lib/ (this one first, in the order
-- src/store/library.rs gives), then each <transition>.lua registered as a
-- function of its own. Each call still runs as one atomic unit; the
-- helpers are compiled once, not on every call.
--
-- Every script replies with a table whose first element is a status
-- (DONE, MISSING, STALE, KEPT, REPLACED; see Status in src/store/mod.rs),
-- then what that script returns.
--
-- Conventions for every script:
--   KEYS[1] is the schedule zset "{p}:schedule". Every other key the script
--           touches is named from the prefix and carries the same hash tag
--           "{p}", so all of them live in KEYS[1]'s Redis Cluster slot.
--   ARGV[1] is the key prefix "{p}:".
--   The last two ARGV are the call's deadline, the Redis time (us) after
--           which its caller has stopped waiting for the reply (0: none),
--           and the events setting (EVENTS below). The wrapper that
--           src/store/library.rs puts around every script takes both off
--           (checking the deadline before the script runs), so each
--           script's own arguments are ARGV[2] on, and #ARGV counts them.
-- Errors a script returns: "DQLATE ..." (past the deadline), "NOPERM ..."
-- (the ACL refuses a command the scripts run: CALL.refused) and
-- "DQINVALID ..." (an argument out of range); each comes before the
-- script's first write, so a refused call changes nothing.
-- Times are Unix milliseconds of the Redis clock (TIME), never the client's.

-- Set at the start of every call (Redis runs one call at a time).
local P, SCHEDULE

-- The helpers, one table per concern: Lua 5.1 lets one function (the
-- library's main chunk is one) hold 200 locals and reach 60 upvalues, and
-- the prelude's names take about half of the first. So only the call's
-- own state (P, SCHEDULE, NOW, COUNTS, EVENTS) and the words every script
-- speaks (job_key, state_of, now_us, invalid) are locals here; every other
-- helper is a field of its concern's table, declared here together so that
-- any file may call any other's (a table's field is looked up when called,
-- whatever the load order). G (groups), H (the schedule's heads, the push
-- order and the arming of trigger keys) and BODIES come from the prelude
-- with their constants. A helper a script calls per job in a loop may be
-- taken into a local of its own first (one lookup, not one per job).
local CALL = {}    -- lib/call.lua: the deadline, the ACL, chunked writes, due times
local KEY = {}     -- lib/call.lua: the names of a job's and a topic's keys
local LISTS = {}   -- lib/ready.lua: ready lists and priority levels
local COUNT = {}   -- lib/counts.lua: per-topic counts by state
local EVENT = {}   -- lib/counts.lua: the event stream
local TAG = {}     -- lib/tags.lua: tag indexes
local JOB = {}     -- lib/schedule.lua, lib/job.lua: a job's moves, its keys, its end
local DEDUPS = {}  -- lib/dedup.lua: dedup records
local RETRIES = {} -- lib/retries.lua: failed attempts, dead letters
local RATES = {}   -- lib/rate_limits.lua: per-topic token buckets
local RECORD = {}  -- lib/finished.lua: finished jobs' kept records
local RUNNING = {} -- lib/running.lua: a running job's reports

-- Job hash fields (TOPIC, BODY, ...) come from the prelude. STATE is
-- absent while delayed (most jobs, so it costs nothing); ATTEMPTS absent
-- means 0; DUE is absent while delayed, when the schedule's score is the
-- due time, and set when the job is handed over.

-- The name of a job's hash, trigger key, ready list, dead set.
local function job_key(id) return P .. JOB_KEY .. id end
function KEY.trigger(id) return P .. TRIGGER_KEY .. id end
function KEY.ready(topic) return P .. READY_KEY .. topic end
function KEY.dead(topic) return P .. DEAD_KEY .. topic end
-- A job's log (log.lua): it goes wherever the job's hash goes.
function KEY.log(id) return P .. LOG_KEY .. id end
-- A topic's own schedule: its delayed jobs only, id -> due ms.
function KEY.topic_schedule(topic) return P .. TOPIC_SCHEDULE_KEY .. topic end
-- H, the topic schedules' heads and the layouts' due times
-- (lib/schedule.lua), is made in the prelude, with its names from layout.rs.

-- A job's state as stored: absent means delayed.
local function state_of(stored) return stored or DELAYED end

-- Redis time in microseconds (exact: below 2^53), read once per call: a
-- script is one atomic step, so one instant serves all of it, and TIME is
-- a command like any other.
local NOW
-- Valkey's CPU clock (os.clock), for CALL.elapsed: false elsewhere, and
-- on a Valkey without one; nil until looked for (at a call: a library
-- cannot look as it loads). Redis has no `os`, and names no SERVER_NAME:
-- there the look is one field read. CPU_AT: its reading at the call's
-- first TIME.
local CPU, CPU_AT
local function now_us()
  if not NOW then
    local t = redis.call('TIME')
    NOW = tonumber(t[1]) * 1000000 + tonumber(t[2])
    if CPU == nil then
      CPU = false
      if redis.SERVER_NAME == 'valkey' then
        local ok, clock = pcall(function() return os.clock end)
        CPU = ok and type(clock) == 'function' and clock
      end
    end
    CPU_AT = CPU and CPU()
  end
  return NOW
end

-- A script holds every other client of Redis while it runs, and what a
-- call of many items costs depends on their shape as much as on their
-- number (a thousand jobs due in a thousand topics or groups cost several
-- times a thousand in one). So the calls that handle many items at once
-- (dispatch, the arming walk, push) look at the clock as they go and stop
-- at a safe point once they have run `share` of CALL.BUDGET_US since the
-- call's first TIME (now_us), saying what they left for the next call.
-- What a call still writes after it stops counts too: dispatch writes
-- each topic's tail as it goes, push keeps room for its own (push.lua).
-- One TIME a look: the callers look every few items, not every one. 1.2
-- ms, with what a call does before its first TIME (Redis reading its
-- arguments) and after its last look, keeps a call under 2 ms on a slow
-- machine (about 3 us a command run from Lua); less makes the calls'
-- fixed cost (about 0.15 ms there) a larger share of a burst.
CALL.BUDGET_US = 1200
-- Microseconds since the call's first TIME. Valkey answers TIME in a
-- script with the instant the script began (the time of its command), so
-- there a call's own clock is the CPU time it used: the larger of the two.
function CALL.elapsed()
  local start = now_us()
  local t = redis.call('TIME')
  local wall = tonumber(t[1]) * 1000000 + tonumber(t[2]) - start
  if CPU then return math.max(wall, (CPU() - CPU_AT) * 1000000) end
  return wall
end
function CALL.spent(share)
  return CALL.elapsed() >= CALL.BUDGET_US * (share or 1)
end

-- A call that reaches Redis after its caller gave up must not act: the
-- caller has already reported failure (and may be retrying). Returns the
-- error reply to give, or nil to go on.
-- How a call runs: its deadline (CALL.past_deadline, which the wrapper in
-- library.rs checks first) and writes of many items at once
-- (CALL.in_chunks).
function CALL.past_deadline(deadline_us)
  local deadline = tonumber(deadline_us) or 0
  if deadline > 0 and now_us() > deadline then
    return redis.error_reply('DQLATE the call reached redis after its caller stopped waiting; nothing was changed')
  end
  return nil
end

-- An ACL grants the commands outside the data-type categories one by one
-- (README's least-privilege line), so it may refuse one of them alone; a
-- script refused a command part-way keeps the writes it made before it
-- (Redis does not roll a script back). So every call first asks the ACL
-- about each of them, on its own partition's key and channels, and
-- refuses before its first write (the wrapper in library.rs calls this
-- after the deadline). Redis 6.2 has no redis.acl_check_cmd: nothing is
-- asked there. Cost: 8 checks, about 0.2 us each for a restricted user.
-- Returns the error reply to give, or nil to go on.
function CALL.refused()
  local check = redis.acl_check_cmd
  if not check then return nil end
  local k, ready, wake = SCHEDULE, P .. READY_CHANNEL, P .. WAKE_CHANNEL
  local command, on
  if not check('TIME') then command, on = 'time', ''
  elseif not check('DEL', k) then command, on = 'del', k
  elseif not check('EXISTS', k) then command, on = 'exists', k
  elseif not check('PTTL', k) then command, on = 'pttl', k
  elseif not check('PEXPIRE', k, '1') then command, on = 'pexpire', k
  elseif not check('PEXPIREAT', k, '1') then command, on = 'pexpireat', k
  elseif not check('PUBLISH', ready, '0') then command, on = 'publish', ready
  elseif not check('PUBLISH', wake, '0') then command, on = 'publish', wake
  else return nil end
  return redis.error_reply("NOPERM this user has no permissions to run the '" .. command ..
    "' command on " .. on .. ", found before the script's first write: nothing was changed")
end

-- Calls `call(...)` with the items of `list`, up to 1,000 at a time (an
-- even number, so pairs stay whole), since Lua's unpack has a stack limit.
-- A script that writes many members or keys of one kind gathers them and
-- writes once: one command's own cost, not one per item. `call` names its
-- command literally (see library.rs).
function CALL.in_chunks(list, call)
  for i = 1, #list, 1000 do call(unpack(list, i, math.min(i + 999, #list))) end
end

-- MAX_TIME_MS (in the prelude, from job::MAX_DUE_AT_MS) is the latest time
-- (Unix ms) a job may be due, 9999-12-31T23:59:59.999Z. Times stay far from
-- where milliseconds times 1000 overflow a 64-bit integer, and SET PXAT
-- accepts them all.

local function invalid(message)
  return redis.error_reply('DQINVALID ' .. message)
end

-- The due time (ms) for an absolute time `at_ms` (if >= 0) or a delay from
-- now. No delay, or an absolute time now or past, means the millisecond
-- Redis time is in: due already, so a push makes the job ready at once
-- (H.due_now). A delay is counted from the next millisecond: never early.
-- Returns nil and what is wrong for a time beyond MAX_TIME_MS, for the
-- caller to refuse before its first write.
function CALL.due_time(delay_ms, at_ms)
  local now = math.floor(now_us() / 1000)
  at_ms = tonumber(at_ms)
  delay_ms = tonumber(delay_ms)
  local due
  if at_ms >= 0 then
    due = math.max(at_ms, now)
  elseif delay_ms > 0 then
    due = math.ceil(now_us() / 1000) + delay_ms
  else
    due = now
  end
  if due > MAX_TIME_MS then
    return nil, 'due time ' .. string.format('%.0f', due) .. ' ms is after the latest allowed, ' .. string.format('%.0f', MAX_TIME_MS) .. ' ms (year 9999-12-31)'
  end
  return due
end
