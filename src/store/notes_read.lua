-- notes_read.lua: the relay reads a page of its partition's notes, and
-- marks the read so that its WAIT covers them.
--
-- KEYS[1]  schedule zset   {p}:schedule (the notes' partition)
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  most notes, 1 to 500
--
-- Touches: the notes stream (read), the relayed mark (written when a note
-- was read: the newest entry's id). Publishes nothing. Helpers: none.
--
-- Returns { DONE, quintuples of entry id, batch id, job id, outcome,
-- result ("" none) }, oldest first.
--
-- Why a write in a read: WAIT waits for the replication of its own
-- connection's writes, and a read has none, so the notes another call
-- wrote may still be on this master alone. The mark is written after the
-- notes, so the call's WAIT (replica acks) returns only once the
-- replicas have every note it read: no end that a failover could take
-- back reaches a batch's home. An empty read writes nothing.
--
-- Cost: one XRANGE bounded by ARGV[2], one SET. Guarantees: reads only
-- the notes; the mark is the newest entry read.
local most = tonumber(ARGV[2])
if not most or most < 1 or most > 500 or most ~= math.floor(most) then
  return invalid('notes_read takes a number of notes, 1 to 500')
end
local entries = redis.call('XRANGE', P .. BATCH.NOTES_KEY, '-', '+', 'COUNT', most)
local out = { DONE }
for _, e in ipairs(entries) do
  local f, note = e[2], {}
  for i = 1, #f, 2 do note[f[i]] = f[i + 1] end
  out[#out + 1] = e[1]
  out[#out + 1] = note[BATCH.N_BATCH] or ''
  out[#out + 1] = note[BATCH.N_ID] or ''
  out[#out + 1] = note[BATCH.N_OUTCOME] or ''
  out[#out + 1] = note[BATCH.N_RESULT] or ''
end
if #entries > 0 then
  redis.call('SET', P .. BATCH.RELAYED_KEY, entries[#entries][1])
end
return out
