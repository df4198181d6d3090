-- wrk script: POST /v1/jobs with a unique 36-character id and a 64-byte
-- body, due in an hour, so every request creates one pending job.
local counter = 0
local prefix = string.format("%08x", math.random(0, 0x7fffffff))
local body64 = string.rep("b", 64)

request = function()
  counter = counter + 1
  local id = string.format("%s-0000-0000-0000-%012d", prefix, counter)
  local body = '{"topic":"bench","id":"' .. id .. '","delay_ms":3600000,"ttr_ms":60000,"body":"' .. body64 .. '"}'
  return wrk.format("POST", "/v1/jobs", { ["Content-Type"] = "application/json" }, body)
end

local errors = 0
response = function(status, headers, body)
  if status ~= 201 then errors = errors + 1 end
end

done = function(summary, latency, requests)
  io.write(string.format("non-success replies: %d\n", errors))
end
