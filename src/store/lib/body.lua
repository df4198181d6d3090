-- lib/body.lua: a job's body, whole or in pieces.
--
-- Layout 1 keeps the body in one field, BODY. Redis keeps a hash compact
-- (a listpack) only while every value is at most hash-max-listpack-value
-- (64 B by default): one longer body turns the job into a hashtable, about
-- 215 B more. Layout 2 keeps a body of BODIES.piece + 1 to BODIES.max
-- bytes in pieces of at most BODIES.piece: its byte length in the field
-- BODIES.size and the pieces in fields '1', '2', ... (numbers: the
-- cheapest names a listpack stores). Other bodies stay whole in BODY.
-- Every reader takes both forms; writers write pieces only while the
-- partition's layout key (BODIES.key) says 2 (see src/store/layout.rs),
-- so that older builds, which read BODY only, never meet them.
--
-- The helpers are fields of BODIES (made in the prelude, with its names).
-- Fills: BODIES (made in the prelude, with its names).

-- The layout in force in this call's partition: read once per call (the
-- wrapper resets BODIES.layout), at the first body written.
function BODIES.in_force()
  if not BODIES.layout then
    local v = redis.pcall('GET', P .. BODIES.key)
    BODIES.layout = type(v) == 'string' and tonumber(string.match(v, '^%d+')) or 1
  end
  return BODIES.layout
end

-- The names of a pieced body's fields, for `size` bytes.
function BODIES.names(size)
  local names = {}
  for i = 1, math.ceil(size / BODIES.piece) do names[i] = tostring(i) end
  return names
end

-- The fields and values that store `body` (for HSET), in the form the
-- layout in force asks.
function BODIES.fields(body)
  local size, piece = #body, BODIES.piece
  if size <= piece or size > BODIES.max or BODIES.in_force() < 2 then
    return BODY, body
  end
  local out = { BODIES.size, size }
  for i = 1, math.ceil(size / piece) do
    out[#out + 1] = tostring(i)
    out[#out + 1] = string.sub(body, (i - 1) * piece + 1, i * piece)
  end
  return unpack(out)
end

-- The body of the job hash `job`, given what HGET of BODY read (`whole`):
-- that, or its pieces joined (string.sub and concat count bytes, so a
-- character cut between pieces comes back whole). '' when it has neither.
function BODIES.of(job, whole)
  if whole then return whole end
  local size = tonumber(redis.call('HGET', job, BODIES.size))
  if not size then return '' end
  local got = redis.call('HMGET', job, unpack(BODIES.names(size)))
  for i = 1, #got do got[i] = got[i] or '' end
  return table.concat(got)
end

-- Removes the body of `job` in whatever form it is.
function BODIES.drop(job)
  local names = { BODY }
  local size = tonumber(redis.call('HGET', job, BODIES.size))
  if size then
    names[2] = BODIES.size
    for _, n in ipairs(BODIES.names(size)) do names[#names + 1] = n end
  end
  redis.call('HDEL', job, unpack(names))
end

-- Replaces the body of the existing job `job`: no piece of the old stays.
function BODIES.set(job, body)
  BODIES.drop(job)
  redis.call('HSET', job, BODIES.fields(body))
end
