-- lib/body.lua: a job's body, whole or in pieces.
--
-- Layout 1 keeps the body in one field, BODY. Redis keeps a hash compact
-- (a listpack) only while every value is at most hash-max-listpack-value
-- (64 B by default): one longer body turns the job into a hashtable, about
-- 215 B more. Layout 2 keeps a body of PIECE_BYTES + 1 to PIECED_MAX_BYTES
-- in pieces of at most PIECE_BYTES: its byte length in BODY_SIZE and the
-- pieces in fields '1', '2', ... (numbers: the cheapest names a listpack
-- stores). Other bodies stay whole in BODY. Every reader takes both forms;
-- writers write pieces only while the partition's LAYOUT_KEY says 2 (see
-- src/store/layout.rs), so that older builds, which read BODY only, never
-- meet them.

-- The layout in force in this call's partition: read once per call (the
-- wrapper resets it), at the first body written.
local LAYOUT
local function layout_in_force()
  if not LAYOUT then
    local v = redis.pcall('GET', P .. LAYOUT_KEY)
    LAYOUT = type(v) == 'string' and tonumber(string.match(v, '^%d+')) or 1
  end
  return LAYOUT
end

-- The names of a pieced body's fields, for `size` bytes.
local function piece_names(size)
  local names = {}
  for i = 1, math.ceil(size / PIECE_BYTES) do names[i] = tostring(i) end
  return names
end

-- The fields and values that store `body` (for HSET), in the form the
-- layout in force asks.
local function body_fields(body)
  local size = #body
  if size <= PIECE_BYTES or size > PIECED_MAX_BYTES or layout_in_force() < 2 then
    return BODY, body
  end
  local out = { BODY_SIZE, size }
  for i = 1, math.ceil(size / PIECE_BYTES) do
    out[#out + 1] = tostring(i)
    out[#out + 1] = string.sub(body, (i - 1) * PIECE_BYTES + 1, i * PIECE_BYTES)
  end
  return unpack(out)
end

-- The body of the job hash `job`, given what HGET of BODY read (`whole`):
-- that, or its pieces joined (string.sub and concat count bytes, so a
-- character cut between pieces comes back whole). '' when it has neither.
local function body_of(job, whole)
  if whole then return whole end
  local size = tonumber(redis.call('HGET', job, BODY_SIZE))
  if not size then return '' end
  local got = redis.call('HMGET', job, unpack(piece_names(size)))
  for i = 1, #got do got[i] = got[i] or '' end
  return table.concat(got)
end

-- Removes the body of `job` in whatever form it is.
local function drop_body(job)
  local names = { BODY }
  local size = tonumber(redis.call('HGET', job, BODY_SIZE))
  if size then
    names[2] = BODY_SIZE
    for _, n in ipairs(piece_names(size)) do names[#names + 1] = n end
  end
  redis.call('HDEL', job, unpack(names))
end

-- Replaces the body of the existing job `job`: no piece of the old stays.
local function set_body(job, body)
  drop_body(job)
  redis.call('HSET', job, body_fields(body))
end
