-- wrk script: each request pushes one job with a unique 36-character id and
-- a 64-byte body, due in an hour, so every request creates a pending job.
--   wrk -t1 -c64 -d10s -s bench/push.lua http://127.0.0.1:9277 -- compat
--   wrk -t1 -c64 -d10s -s bench/push.lua http://127.0.0.1:9277 -- native
local counter = 0
local prefix = string.format("%08x", math.random(0, 0x7fffffff))
local body64 = string.rep("b", 64)
local native = false

init = function(args)
  native = args[1] == "native"
end

request = function()
  counter = counter + 1
  local id = string.format("%s-0000-0000-0000-%012d", prefix, counter)
  local path, body
  if native then
    path = "/v1/jobs"
    body = '{"topic":"bench","id":"' .. id .. '","delay_ms":3600000,"ttr_ms":60000,"body":"' .. body64 .. '"}'
  else
    path = "/push"
    body = '{"topic":"bench","id":"' .. id .. '","delay":3600,"ttr":60,"body":"' .. body64 .. '"}'
  end
  return wrk.format("POST", path, { ["Content-Type"] = "application/json" }, body)
end

-- A success is 201 from /v1/jobs, or HTTP 200 with code 0 from /push.
local errors = 0
response = function(status, headers, body)
  local ok
  if native then
    ok = status == 201
  else
    ok = status == 200 and string.find(body, '"code":0', 1, true)
  end
  if not ok then errors = errors + 1 end
end

done = function(summary, latency, requests)
  io.write(string.format("non-success replies: %d\n", errors))
end
