#!lua flags=allow-oom
-- Renew a learner's lease (`streamlearn.store.lease`): its TTL starts again, if and only if
-- the caller still holds it. allow-oom, as `lease_take.lua`: a full Redis must not cost
-- the learner its lease. KEYS: the lease. ARGV: the holder's token, the TTL in ms.
-- Returns 1 when renewed, 0 when the lease is another's or gone (expired): lost.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
