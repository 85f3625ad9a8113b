-- Keep served predictions for their labels (`streamlearn.store.pending`), bounded.
-- KEYS: the index (sorted set: pending key -> expiry, unix s), then one pending key per
-- prediction. ARGV: now (s), ttl (s), max kept, then one value per pending key.
-- Expired entries leave the index; beyond the bound the soonest to expire (the oldest)
-- go, their values with them. Every key shares the model's hash tag (one slot).
-- Returns how many were evicted to keep the bound.
local index = KEYS[1]
local now, ttl, cap = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local expiry = now + ttl
for i = 2, #KEYS do
  redis.call('SET', KEYS[i], ARGV[i + 2], 'EX', ttl)
  redis.call('ZADD', index, expiry, KEYS[i])
end
redis.call('ZREMRANGEBYSCORE', index, '-inf', now)
local over = redis.call('ZCARD', index) - cap
if over > 0 then
  for _, key in ipairs(redis.call('ZRANGE', index, 0, over - 1)) do
    redis.call('UNLINK', key)
  end
  redis.call('ZREMRANGEBYRANK', index, 0, over - 1)
else
  over = 0
end
redis.call('EXPIRE', index, ttl)
return over
