-- remove.lua: finish or delete jobs, from any state.
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  keep_finished: how long a finished job's record is kept, ms, in
--          topics not named next (0: none is kept)
-- ARGV[3]  k, then k pairs: topic, its own keep_finished in ms
-- then     result retention, ms: how long a result finished in a topic
--          that keeps no record is kept (an unlisted record, RECORD.keep)
-- then one or more removals, 4 arguments each:
--          id;
--          "lease": finish, only if the next is the current lease token;
--          "finish": finish whatever the state (the compatible /finish);
--          "any": delete whatever the state (a kept record too);
--          lease token (with "lease"; "" otherwise);
--          result: JSON of at most MAX_RESULT_BYTES ("": none; a finish
--          only, the caller checked it is JSON)
--
-- Touches: job hashes and their logs, and whichever of trigger key, schedule, ready list,
-- dead set or finished index holds each; its tags' indexes; count hash.
-- Publishes: nothing. Events: finished, or deleted ("any").
-- Helpers: JOB.detach, JOB.delete, state_of, invalid, RECORD.keep,
-- RECORD.trim, JOB.forget (or JOB.unindex when a record is kept: its tags'
-- entries and its dedup record, a GET and a DEL only for a job pushed
-- with simple dedup).
-- Groups: a grouped reserved job's end gives its slot back (G.free), a
-- grouped ready job leaves its group's line (ZREM, and G.tidy's HMGET); a
-- plain job: one field more in its HMGET, nothing else.
-- Results: a finish with one leaves the job's record with it (RECORD.keep:
-- listed in a topic with a window; otherwise unlisted, for the result
-- retention); a finish without one writes what it wrote before.
--
-- Cost per finish of a plain reserved job: one HMGET; the call's lease
-- ends go in one ZREM and the keys of its removed jobs in one DEL, so a
-- batch of finishes costs two calls more, not two per job.
-- Batches: a job of a batch leaves a note for the batch's home as it ends
-- (BATCH.left: finished, or deleted); a job of none: one field more in its
-- HMGET.
--
-- Returns { DONE, then per removal: status, topic, state it was in }:
-- status DONE, MISSING (no such job; for a finish, a finished job's record
-- is none either), CANCELLED (a finish under the lease the job was
-- cancelled under: nothing changed), or STALE (the token is not the job's current lease: it
-- was delivered again to someone else, or replaced, or never delivered).
--
-- Guarantees: each job leaves every structure at once; a refused removal
-- changes nothing and keeps nothing. A finish in a topic with a window
-- leaves the job's record (RECORD.keep) instead of nothing, and trims that
-- topic's index by at most 100 + 2 per finish of it in this call. Without
-- windows the writes are exactly those of a removal. Removals apply in the
-- order given, the whole call as one atomic step (many per call is how
-- delayq batches finishes that arrive together).
local default_keep = tonumber(ARGV[2])
local k = tonumber(ARGV[3])
if not default_keep or not k or k < 0 or #ARGV < 4 + 2 * k then
  return invalid('remove takes keep_finished, a count of topic windows, their pairs and the result retention first')
end
local keeps = {}
for i = 1, k do
  keeps[ARGV[2 + 2 * i]] = tonumber(ARGV[3 + 2 * i])
end
local retention = tonumber(ARGV[4 + 2 * k])
local first = 5 + 2 * k
local n = (#ARGV - first + 1) / 4
if not retention or retention < 1 or n < 1 or n ~= math.floor(n) then
  return invalid('remove takes a result retention and 4 arguments per job, got '
    .. (#ARGV - first + 1))
end
-- Every result is checked before the first write.
for j = 1, n do
  local a = first + (j - 1) * 4
  local result = ARGV[a + 3]
  if #result > MAX_RESULT_BYTES or (result ~= '' and ARGV[a + 1] == 'any') then
    return invalid('a result is at most ' .. MAX_RESULT_BYTES
      .. ' bytes of JSON, and only a finish carries one')
  end
end
local reply = { DONE }
-- Topics that kept records in this call -> { window, finishes }.
local kept = {}
-- Many removals: a plain reserved job's lease end and its keys go in one
-- ZREM and one DEL for the call (CALL.in_chunks); `gone` ids are already
-- removed in this call. One removal writes at once (no tables to build).
local unleases, dels, gone
-- What a job removed earlier in this call reads as: nothing.
local NONE = {}
if n > 1 then unleases, dels, gone = {}, {}, {} end
local now_ms
for j = 1, n do
  local a = first + (j - 1) * 4
  local id, mode, token, result = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  if result == '' then result = nil end
  local job = job_key(id)
  local f = NONE
  if not (gone and gone[id]) then
    f = redis.call('HMGET', job, STATE, TOPIC, TOKEN, DEDUP, TAGS, CANCELLED_AT, GROUP, BATCH.FIELD)
  end
  local record = f[1] == FINISHED
  if f[6] and mode == 'lease' and f[3] == token then
    -- Cancelled under this lease: the holder's finish changes nothing.
    reply[#reply + 1] = CANCELLED
    reply[#reply + 1] = f[2]
    reply[#reply + 1] = ''
  elseif not f[2] or (record and mode ~= 'any') then
    reply[#reply + 1] = MISSING
    reply[#reply + 1] = ''
    reply[#reply + 1] = ''
  -- A job that is not reserved has token '' (or none): no token, however
  -- empty, matches it.
  elseif mode == 'lease' and (f[1] ~= RESERVED or f[3] ~= token or token == '') then
    reply[#reply + 1] = STALE
    reply[#reply + 1] = f[2]
    reply[#reply + 1] = state_of(f[1])
  else
    local topic, state = f[2], state_of(f[1])
    if mode == 'any' then
      JOB.delete(id, state, topic, f[5], f[4], f[7], f[8])
    else
      local keep = keeps[topic] or default_keep
      local due
      if (keep > 0 or result) and state == DELAYED then due = H.due(id, topic) end
      -- A result travels in the event's error field (as a progress does).
      if EVENTS > 0 then EVENT.emit(EV_FINISHED, id, topic, nil, nil, result) end
      -- Batches: a note for the batch's home (a job of none: no call).
      if f[8] then BATCH.left(id, f[8], BATCH.O_FINISHED, result) end
      if unleases and state == RESERVED and not f[7] then
        unleases[#unleases + 1] = id
        COUNT.move(topic, RESERVED, nil)
      else
        JOB.detach(id, state, topic, f[7])
      end
      if keep > 0 or result then
        -- A kept record carries no tags nor dedup: they end with the job.
        JOB.unindex(id, f[5], f[4])
        now_ms = now_ms or math.floor(now_us() / 1000)
        if due then redis.call('HSET', job, DUE, due) end
        if keep > 0 then
          RECORD.keep(id, topic, now_ms, keep, result)
          local t = kept[topic] or { keep = keep, finishes = 0 }
          t.finishes = t.finishes + 1
          kept[topic] = t
        else
          RECORD.keep(id, topic, now_ms, retention, result, true)
        end
      else
        -- Many removals: the keys go in the call's one DEL (`dels`).
        JOB.forget(id, f[5], f[4], dels, job)
        if gone then gone[id] = true end
      end
    end
    reply[#reply + 1] = DONE
    reply[#reply + 1] = topic
    reply[#reply + 1] = state
  end
end
if unleases then
  CALL.in_chunks(unleases, function(...) redis.call('ZREM', SCHEDULE, ...) end)
  CALL.in_chunks(dels, function(...) redis.call('DEL', ...) end)
end
for topic, t in pairs(kept) do
  RECORD.trim(topic, now_ms, t.keep, 100 + 2 * t.finishes)
end
return reply
