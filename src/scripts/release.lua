-- release.lua: give back a job whose reservation never reached a consumer
-- (the client went away while its pop was under way).
--
-- KEYS[1]  schedule zset   {p}:schedule
-- ARGV[1]  key prefix "{p}:"
-- ARGV[2]  id
-- ARGV[3]  lease token of the reservation to undo
--
-- Returns 1 released, 0 nothing to do (finished, replaced or leased again).
--
-- Guarantees: only the named lease is undone; the job goes back to the head
-- of its ready list (it was first in line) with the attempt uncounted, and
-- waiting consumers are woken.
local id = ARGV[2]
local job = P .. 'j:' .. id
local f = redis.call('HMGET', job, STATE, TOPIC, TOKEN)
if f[1] ~= 'reserved' or f[3] ~= ARGV[3] then return 0 end
unlease(id)
redis.call('HSET', job, STATE, 'ready', TOKEN, '')
redis.call('HINCRBY', job, ATTEMPTS, -1)
redis.call('RPUSH', P .. 'ready:' .. f[2], id)
move_count(f[2], 'reserved', 'ready')
notify_ready(f[2], 1)
return 1
