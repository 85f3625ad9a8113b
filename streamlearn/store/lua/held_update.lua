--#include check_count
-- A run of readings into their keys' held values; each reading with a label forms a
-- sample, its id made here (`streamlearn.store.held`).
-- KEYS: key index (device key -> its newest reading's time), owners (device key -> its
-- sender), senders (sender -> keys it holds), then the held hash of each key of the run.
-- ARGV: now (s), expiry (s), max keys, max keys per sender, the prefix of a held hash
-- (then the device key), the prefix of a sender's index of its keys (then the sender),
-- then per reading one line each of: its KEYS index; its device key; its sender (`-`:
-- none, bound by max keys alone); its label's digest (`-`: no label); its fields
-- (`name value`, tab-separated: an input's index or `y`, the value's text).
-- A held hash: field -> "time value"; `ld` the last label's digest, `lid` the id it
-- formed, `ls` when (the seq of a window model's step), `ln` the labels counted.
-- Returns {formed, refused, evicted}: formed, per reading with a label: {its index (1
-- first), id, seq, the hash's fields and values}; refused: "<index> <keys held>" per
-- reading of a new key past its sender's bound (nothing written for it).
local index, owners, senders = KEYS[1], KEYS[2], KEYS[3]
local now, ttl, devices = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local per_sender, prefix, by = tonumber(ARGV[4]), ARGV[5], ARGV[6]
-- reads and checks first: a call that fails has written nothing
for k = 1, #KEYS do
  local err = failed(redis.pcall(k == 1 and 'ZCARD' or 'HLEN', KEYS[k]), KEYS[k])
  if err then return err end
end

local owned, touched, formed, refused, evicted = {}, {}, {}, {}, 0

-- A held key deleted: out of the index, its owner's count and its owner's index (unless
-- `unindexed`: the owner whose index it has left already). 1 if it was indexed.
local function forget(device, unindexed)
  redis.call('UNLINK', prefix .. device)
  owned[device], touched[device] = nil, nil
  local was = redis.call('ZREM', index, device)
  local owner = redis.call('HGET', owners, device)
  if owner then
    redis.call('HDEL', owners, device)
    if owner ~= '-' then
      if owner ~= unindexed then redis.call('ZREM', by .. owner, device) end
      if redis.call('HINCRBY', senders, owner, -1) <= 0 then redis.call('HDEL', senders, owner) end
    end
  end
  return was
end

-- Past max keys, `sender`'s new key replaces its own idlest while it holds more than one
-- (a flood of new keys never evicts another sender's); its first key takes the idlest of
-- all.
local function bound(sender)
  local over = redis.call('ZCARD', index) - devices
  while over > 0 do
    local victims, unindexed = {}, nil
    local held = sender ~= '-' and tonumber(redis.call('HGET', senders, sender) or '0') or 0
    if held > 1 then
      victims = redis.call('ZRANGE', by .. sender, 0, math.min(over, held - 1) - 1)
      if #victims > 0 then
        redis.call('ZREMRANGEBYRANK', by .. sender, 0, #victims - 1)
        unindexed = sender
      end
    end
    if #victims == 0 then victims = redis.call('ZRANGE', index, 0, 0) end
    for _, victim in ipairs(victims) do
      if forget(victim, unindexed) == 1 then over, evicted = over - 1, evicted + 1 end
    end
  end
end

-- May `sender` hold `device` (its own already, or a new one within its bound)? Else nil
-- and the number of keys it holds.
local function own(device, sender)
  if owned[device] or redis.call('HEXISTS', owners, device) == 1 then
    owned[device] = true
    return true
  end
  if sender ~= '-' then
    local held = tonumber(redis.call('HGET', senders, sender) or '0')
    if held >= per_sender then return nil, held end
    redis.call('HINCRBY', senders, sender, 1)
    redis.call('ZADD', by .. sender, now, device)
  end
  redis.call('HSET', owners, device, sender)
  redis.call('ZADD', index, now, device)
  owned[device] = true
  bound(sender)
  return true
end

-- expired keys first (no need to wait for their TTL)
for _, device in ipairs(redis.call('ZRANGE', index, '-inf', '(' .. (now - ttl), 'BYSCORE')) do
  forget(device)
end
for i = 7, #ARGV do
  local n = i - 6
  local slot, device, sender, digest, fields = string.match(
    ARGV[i], '^(%d+)\t([^\t]+)\t([^\t]+)\t([^\t]+)\t?(.*)$')
  local key = KEYS[tonumber(slot)]
  local ok, held = own(device, sender)
  if not ok then
    refused[#refused + 1] = n .. ' ' .. held
  else
    for name, value in string.gmatch(fields, '([^\t ]+) ([^\t]*)') do
      redis.call('HSET', key, name, now .. ' ' .. value)
    end
    if digest ~= '-' then
      local id, seq
      if redis.call('HGET', key, 'ld') == digest then  -- a redelivery: the same id again
        id, seq = redis.call('HGET', key, 'lid'), redis.call('HGET', key, 'ls')
      end
      if not id then
        local count = redis.call('HINCRBY', key, 'ln', 1)
        id, seq = device .. '|' .. count .. '|' .. string.sub(digest, 1, 12), tostring(now)
        redis.call('HSET', key, 'ld', digest, 'lid', id, 'ls', seq)
      end
      formed[#formed + 1] = {n, id, seq, redis.call('HGETALL', key)}
    end
    redis.call('EXPIRE', key, ttl)
    touched[device] = sender
  end
end

local senders_touched = {}
for device, sender in pairs(touched) do
  redis.call('ZADD', index, now, device)
  if sender ~= '-' and redis.call('HGET', owners, device) == sender then
    redis.call('ZADD', by .. sender, now, device)
    senders_touched[sender] = true
  end
end
for sender in pairs(senders_touched) do redis.call('EXPIRE', by .. sender, ttl) end
if next(touched) then
  redis.call('EXPIRE', index, ttl)
  redis.call('EXPIRE', owners, ttl)
  redis.call('EXPIRE', senders, ttl)
end
return {formed, refused, evicted}
