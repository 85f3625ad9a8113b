#!lua flags=allow-oom
-- Take a learner's lease (`streamlearn.store.lease`) if nobody holds it: SET NX PX.
-- allow-oom: the lease is a few bytes, and a learner that cannot take or keep it on a full
-- Redis could not checkpoint and trim, which is what frees memory.
-- KEYS: the lease. ARGV: the taker's token, the TTL in ms. Returns 1 when taken, else 0.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
