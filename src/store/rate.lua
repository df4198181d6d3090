-- rate.lua: take tokens from, or give them back to, a topic's token bucket,
-- for a pop on a partitioned queue (the bucket lives in one partition, the
-- jobs in all of them).
--
-- KEYS[1]  schedule zset   {p}:schedule (of the bucket's partition)
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  "take", "give" or "set"
-- ARGV[3]  topic
-- ARGV[4]  take, give: how many jobs' tokens; set: jobs a second
-- ARGV[5]  set: the burst
--
-- Touches: the topic's rate limit hash (the one with the tokens, in the
-- partition the topic's name hashes to). Publishes: nothing.
-- Helpers: now_us, invalid, RATES.bucket, RATES.allows, RATES.use.
--
-- Returns { DONE, granted (-1: the topic has no limit), ms until the next
-- token (0: some left) }; "give" and "set" return { DONE, 0, 0 }.
-- Cost: one HMGET and at most one HSET.
--
-- Guarantees: one bucket per topic for the whole queue, so all pops of all
-- instances together never exceed the limit; tokens given back never fill
-- the bucket past its burst; "set" checks its arguments before it writes,
-- starts a new bucket full and keeps an existing one's level (refilled at
-- the old rate until now, at most the new burst): setting a limit again
-- lets no job out early.
local now_ms = math.floor(now_us() / 1000)
local topic, n = ARGV[3], tonumber(ARGV[4])
local bucket = RATES.bucket(topic, now_ms)
if ARGV[2] == 'set' then
  local per_s, burst = tonumber(ARGV[4]), tonumber(ARGV[5])
  if not (per_s and per_s > 0 and per_s <= 1000000
    and burst and burst >= 1 and burst <= 1000000 and burst == math.floor(burst)) then
    return invalid('rate must be above 0 and at most 1000000 a second, burst 1 to 1000000')
  end
  local tokens = burst * 1000
  if bucket then tokens = math.min(tokens, bucket.tokens) end
  redis.call('HSET', P .. RATE_KEY .. topic, RATE_PER_S, per_s, RATE_BURST, burst,
    RATE_TOKENS, tokens, RATE_AT, now_ms)
  return { DONE, 0, 0 }
end
if ARGV[2] == 'give' then
  if bucket then
    RATES.use(bucket, -math.min(n, bucket.burst), now_ms)
  end
  return { DONE, 0, 0 }
end
if not bucket then return { DONE, -1, 0 } end
local granted = math.min(n, RATES.allows(bucket))
local wait = RATES.use(bucket, granted, now_ms)
return { DONE, granted, wait }
