-- rate.lua: take tokens from, or give them back to, a topic's token bucket,
-- for a pop on a partitioned queue (the bucket lives in one partition, the
-- jobs in all of them).
--
-- KEYS[1]  schedule zset   {p}:schedule (of the bucket's partition)
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  "take" or "give"
-- ARGV[3]  topic
-- ARGV[4]  how many jobs' tokens
--
-- Touches: the topic's rate limit hash (the one with the tokens, in the
-- partition the topic's name hashes to). Publishes: nothing.
-- Helpers: now_us, rate_bucket, rate_allows, rate_use.
--
-- Returns { DONE, granted (-1: the topic has no limit), ms until the next
-- token (0: some left) }; "give" returns { DONE, 0, 0 }.
--
-- Guarantees: one bucket per topic for the whole queue, so all pops of all
-- instances together never exceed the limit; tokens given back never fill
-- the bucket past its burst.
local now_ms = math.floor(now_us() / 1000)
local topic, n = ARGV[3], tonumber(ARGV[4])
local bucket = rate_bucket(topic, now_ms)
if ARGV[2] == 'give' then
  if bucket then
    rate_use(bucket, -math.min(n, bucket.burst), now_ms)
  end
  return { DONE, 0, 0 }
end
if not bucket then return { DONE, -1, 0 } end
local granted = math.min(n, rate_allows(bucket))
local wait = rate_use(bucket, granted, now_ms)
return { DONE, granted, wait }
