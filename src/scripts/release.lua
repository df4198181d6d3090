-- release.lua: give back a job whose reservation never reached a consumer
-- (the client went away while its pop was under way).
--
-- KEYS[1]  job hash        {p}:job:<id>
-- KEYS[2]  schedule zset   {p}:schedule
-- KEYS[3]  trigger key     {p}:t:<id>
-- ARGV[1]  key prefix      "{p}:"
-- ARGV[2]  id
-- ARGV[3]  lease token of the reservation to undo
--
-- Returns 1 released, 0 nothing to do (finished, replaced or re-leased since).
--
-- Guarantees: only the named lease is undone; the job goes back to the head
-- of its ready list (it was first in line) with its attempt uncounted, and
-- waiting consumers are woken.
local f = redis.call('HMGET', KEYS[1], 'state', 'topic', 'token')
if f[1] ~= 'reserved' or f[3] ~= ARGV[3] then return 0 end
redis.call('HSET', KEYS[1], 'state', 'ready', 'token', '')
redis.call('HINCRBY', KEYS[1], 'attempts', -1)
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('DEL', KEYS[3])
redis.call('RPUSH', ARGV[1] .. 'ready:' .. f[2], ARGV[2])
redis.call('PUBLISH', ARGV[1] .. 'ready', '1 ' .. f[2])
return 1
