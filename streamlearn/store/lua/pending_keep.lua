-- Keep served predictions for their labels (`streamlearn.store.pending`), bounded, with a
-- share per sender.
-- KEYS: the index (sorted set: pending key -> expiry, unix s), the bytes counter, then one
-- pending key per prediction. ARGV: now (s), ttl (s), max kept, max bytes, an entry's
-- fixed bytes, a sender's share of each bound (entries, bytes), the pending keys' prefix
-- (`...:pending:`), then one value per pending key.
-- An entry counts its fixed bytes plus 2.5 bytes per byte of its key (held twice, as the
-- key and as the index's member; the half for the allocator's rounding). The index is
-- authoritative: the counter adds an entry when the index gains it and takes it off when
-- the index drops it, expired or evicted, so it holds exactly the index's sum.
-- A sender (the client level of `predict/{client}`, or an HTTP client's owner, in the key:
-- `pending:{n}:{client}:...`) has its own index, `pending:by:{n}:{client}`, and bytes
-- counter (`...:bytes`), kept alike; past either share its own soonest to expire go.
-- The shared namespace (`pending:-:...`: bare `predict`, which no device may publish under
-- the deploy ACL) has none. Expired entries leave the indexes; beyond
-- either bound of the pool the soonest to expire go, their values with them. Every key
-- shares the model's hash tag (one slot).
-- Returns {evicted to keep the pool's bounds, evicted to keep a sender's share}.
local index, counter = KEYS[1], KEYS[2]
local now, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local cap, cap_bytes, fixed = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local share, share_bytes, prefix = tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8]
local FIRST_VALUE = 9
local CHUNK = 1000 -- index entries read per step

local function cost(key)
  return fixed + math.ceil(2.5 * #key)
end

local shares = share < cap or share_bytes < cap_bytes -- (else the pool's bounds alone)

-- The index of a pending key's sender, or nil for the shared namespace (or no shares).
local function owner(key)
  if not shares then
    return nil
  end
  local rest = string.sub(key, #prefix + 1)
  local colon = string.find(rest, ':', 1, true)
  local n = colon and tonumber(string.sub(rest, 1, colon - 1))
  if not n then
    return nil
  end
  return prefix .. 'by:' .. string.sub(rest, 1, colon + n)
end

-- `keys`, leaving the pool's index, leave their senders' too.
local function disown(keys)
  for _, key in ipairs(keys) do
    local own = owner(key)
    if own and redis.call('ZREM', own, key) == 1 then
      redis.call('DECRBY', own .. ':bytes', cost(key))
    end
  end
end

local bytes = 0 -- an index lost (expired, deleted) starts the count again
if redis.call('ZCARD', index) > 0 then
  bytes = tonumber(redis.call('GET', counter) or '0') or 0
end
local expiry = now + ttl
local senders = {}
for i = 3, #KEYS do
  local key = KEYS[i]
  redis.call('SET', key, ARGV[i + FIRST_VALUE - 3], 'EX', ttl)
  if redis.call('ZADD', index, expiry, key) == 1 then
    bytes = bytes + cost(key)
  end
  local own = owner(key)
  if own then
    if redis.call('ZADD', own, expiry, key) == 1 then
      redis.call('INCRBY', own .. ':bytes', cost(key))
    end
    senders[own] = true
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
  disown(expired)
  redis.call('ZREMRANGEBYRANK', index, 0, #expired - 1)
end
local own_evicted = 0
for own in pairs(senders) do -- each sender that kept here: within its share
  local held = redis.call('ZCARD', own)
  local held_bytes = tonumber(redis.call('GET', own .. ':bytes') or '0') or 0
  while held > 0 and (held > share or held_bytes > share_bytes) do
    local key = redis.call('ZRANGE', own, 0, 0)[1]
    redis.call('UNLINK', key)
    if redis.call('ZREM', index, key) == 1 then
      bytes = bytes - cost(key)
    end
    redis.call('ZREM', own, key)
    held, held_bytes = held - 1, held_bytes - cost(key)
    own_evicted = own_evicted + 1
  end
  redis.call('SET', own .. ':bytes', string.format('%d', held_bytes), 'EX', ttl)
  redis.call('EXPIRE', own, ttl)
end
local count = redis.call('ZCARD', index)
local evicted = 0
while count > 0 and (count > cap or bytes > cap_bytes) do
  local n = 0
  local oldest = {}
  for _, key in ipairs(redis.call('ZRANGE', index, 0, CHUNK - 1)) do
    if count - n <= cap and bytes <= cap_bytes then
      break
    end
    redis.call('UNLINK', key)
    bytes = bytes - cost(key)
    n = n + 1
    oldest[n] = key
  end
  disown(oldest)
  redis.call('ZREMRANGEBYRANK', index, 0, n - 1)
  count, evicted = count - n, evicted + n
end
redis.call('SET', counter, string.format('%d', bytes), 'EX', ttl)
redis.call('EXPIRE', index, ttl)
return {evicted, own_evicted}
