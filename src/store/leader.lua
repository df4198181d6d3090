-- leader.lua: the partition's leader term: take it, keep it, or give
-- it up. One delayq instance at a time acts on the partition's expired
-- events and runs its sweep; the others stand by.
--
-- KEYS[1]  schedule zset   {p}:schedule (names the partition's slot)
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  the caller's instance id
-- ARGV[3]  term length in ms; 0: give the term up
--
-- Touches: the term key {p}:dispatcher; reads the schedule and the heads. Publishes: wake, "0" (a term
-- given up: the standbys, asleep until its end, ask at once).
-- Helpers: now_us, H.earliest, TERM_FLOOR_MS.
--
-- Returns { DONE, held, ms [, head] }: held 1 if the caller holds the term
-- for ms from now (ARGV[3], or less: a term longer than TERM_FLOOR_MS ends
-- by the schedule's earliest due time, which the caller may not have seen
-- yet, so that a killed holder's standby takes over by then); else 0 and
-- the ms left of the holder's term (0: none, or given up). head, when the
-- schedule was read (a term longer than TERM_FLOOR_MS asked for) and holds
-- a job: ms from now to its earliest due time (0 or less: due), the idle
-- holder's backstop for a wake notice its sweep missed.
--
-- Guarantees: a free term is taken with SET NX PX (one taker wins); only
-- its holder extends it (compare-and-extend) or gives it up
-- (compare-and-delete), so a standby never cuts a live holder's term
-- short. Nothing else rests on it: dispatch stays idempotent, so two
-- instances that both think they hold it for a moment do no harm.
local key = P .. DISPATCHER_KEY
local id, ms = ARGV[2], tonumber(ARGV[3])
local holder = redis.call('GET', key)
if ms <= 0 then
  if holder == id then
    redis.call('DEL', key)
    redis.call('PUBLISH', P .. WAKE_CHANNEL, '0')
  end
  return { DONE, 0, 0 }
end
local until_due
if ms > TERM_FLOOR_MS then
  local head = H.earliest()
  if head then
    until_due = head - math.floor(now_us() / 1000)
    ms = math.max(TERM_FLOOR_MS, math.min(ms, until_due))
  end
end
if holder == id then
  redis.call('PEXPIRE', key, ms)
  return { DONE, 1, ms, until_due }
end
if not holder and redis.call('SET', key, id, 'NX', 'PX', ms) then
  return { DONE, 1, ms, until_due }
end
return { DONE, 0, math.max(redis.call('PTTL', key), 0) }
