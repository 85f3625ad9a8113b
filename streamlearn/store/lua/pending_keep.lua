-- Keep served predictions for their labels (`streamlearn.store.pending`), bounded.
-- KEYS: the index (sorted set: pending key -> expiry, unix s), the bytes counter, then one
-- pending key per prediction. ARGV: now (s), ttl (s), max kept, max bytes, an entry's
-- fixed bytes, then one value per pending key.
-- An entry counts its fixed bytes plus 2.5 bytes per byte of its key (held twice, as the
-- key and as the index's member; the half for the allocator's rounding). The index is
-- authoritative: the counter adds an entry when the index gains it and takes it off when
-- the index drops it, expired or evicted, so it holds exactly the index's sum.
-- Expired entries leave the index; beyond either bound the soonest to expire (the oldest)
-- go, their values with them. Every key shares the model's hash tag (one slot).
-- Returns how many were evicted to keep the bounds.
local index, counter = KEYS[1], KEYS[2]
local now, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local cap, cap_bytes, fixed = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local CHUNK = 1000 -- index entries read per step

local function cost(key)
  return fixed + math.ceil(2.5 * #key)
end

local bytes = 0 -- an index lost (expired, deleted) starts the count again
if redis.call('ZCARD', index) > 0 then
  bytes = tonumber(redis.call('GET', counter) or '0') or 0
end
local expiry = now + ttl
for i = 3, #KEYS do
  redis.call('SET', KEYS[i], ARGV[i + 3], 'EX', ttl)
  if redis.call('ZADD', index, expiry, KEYS[i]) == 1 then
    bytes = bytes + cost(KEYS[i])
  end
end
while true do -- the expired: their keys are gone already, their entries go now
  local expired = redis.call('ZRANGE', index, '-inf', now, 'BYSCORE', 'LIMIT', 0, CHUNK)
  if #expired == 0 then
    break
  end
  for _, key in ipairs(expired) do
    bytes = bytes - cost(key)
  end
  redis.call('ZREMRANGEBYRANK', index, 0, #expired - 1)
end
local count = redis.call('ZCARD', index)
local evicted = 0
while count > 0 and (count > cap or bytes > cap_bytes) do
  local n = 0
  for _, key in ipairs(redis.call('ZRANGE', index, 0, CHUNK - 1)) do
    if count - n <= cap and bytes <= cap_bytes then
      break
    end
    redis.call('UNLINK', key)
    bytes = bytes - cost(key)
    n = n + 1
  end
  redis.call('ZREMRANGEBYRANK', index, 0, n - 1)
  count, evicted = count - n, evicted + n
end
redis.call('SET', counter, string.format('%d', bytes), 'EX', ttl)
redis.call('EXPIRE', index, ttl)
return evicted
