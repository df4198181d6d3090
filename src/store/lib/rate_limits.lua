-- lib/rate_limits.lua: per-topic rate limits (token buckets).
-- Fills: RATES (declared in lib/call.lua).

-- The rate limit of `topic` at time `now_ms`, if it has one: { key,
-- tokens (thousandths, refilled for the time passed), per_s, burst }.
function RATES.bucket(topic, now_ms)
  local key = P .. RATE_KEY .. topic
  local b = redis.call('HMGET', key, RATE_PER_S, RATE_BURST, RATE_TOKENS, RATE_AT)
  if not b[1] then return nil end
  local per_s, burst = tonumber(b[1]), tonumber(b[2])
  local tokens = tonumber(b[3]) or burst * 1000
  local at = tonumber(b[4]) or now_ms
  if now_ms > at then
    tokens = math.min(burst * 1000, tokens + (now_ms - at) * per_s)
  end
  return { key = key, tokens = tokens, per_s = per_s, burst = burst }
end

-- How many jobs the bucket lets out now.
function RATES.allows(bucket)
  if not bucket then return math.huge end
  return math.floor(bucket.tokens / 1000)
end

-- Books `used` jobs against the bucket (fewer than 0: gives tokens back,
-- up to the burst); returns the ms until the next token.
function RATES.use(bucket, used, now_ms)
  if not bucket then return 0 end
  local left = math.min(bucket.tokens - used * 1000, bucket.burst * 1000)
  redis.call('HSET', bucket.key, RATE_TOKENS, left, RATE_AT, now_ms)
  if left >= 1000 then return 0 end
  return math.ceil((1000 - left) / bucket.per_s)
end
