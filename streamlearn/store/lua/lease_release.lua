#!lua flags=allow-oom
-- Release a learner's lease on a clean stop, if the caller still holds it, so that a
-- waiting learner takes over at once rather than after the TTL.
-- KEYS: the lease. ARGV: the holder's token. Returns 1 when released, else 0.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
