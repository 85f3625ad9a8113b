#!lua
--#include check_count
--#include entry
-- A run of keyed observations into their keys' windows; full windows with a target become
-- training samples, one samples stream entry per call (`streamlearn.windows`).
-- KEYS: stream, counter, device index, owners (window key -> its sender), senders (sender
-- -> window keys it owns), then the window set of each key in this run.
-- ARGV: window W, observations kept per key, expiry (s), member length (8 + 4 * inputs),
-- the KEYS index of each observation's set (comma-separated), their seqs (exact decimal
-- text, one a line), members back to back, y (float32) back to back, one flag a
-- character: '1' when the observation has a target; now (s), max devices, max keys per
-- sender, max seq jump, the sender of these observations (`windows.sender_id`), the prefix
-- of a sender's index of its windows (`...:ingest:by:`; then the sender: window key -> its
-- newest observation's time, as the device index).
-- Returns {samples added, duplicates, late, short, evicted, refused}; refused: for each
-- observation refused, "<index, 1 first> <seq_jump|too_many_keys> <newest seq|keys held>".
local stream, counter, index, owners, senders = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local window, keep, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local mlen = tonumber(ARGV[4])
local members, ys, flags = ARGV[7], ARGV[8], ARGV[9]
local now, devices = tonumber(ARGV[10]), tonumber(ARGV[11])
local per_sender, jump, sender = tonumber(ARGV[12]), tonumber(ARGV[13]), ARGV[14]
local by = ARGV[15]
-- reads and checks first: a call that fails has written nothing
local count, err = check_count(stream, counter)
if err then return err end
for k = 4, 5 do  -- the owners and senders: hashes
  err = failed(redis.pcall('HLEN', KEYS[k]), KEYS[k])
  if err then return err end
end
-- the device index and the windows: sorted sets
for k = 3, #KEYS do
  if k ~= 4 and k ~= 5 then
    err = failed(redis.pcall('ZCARD', KEYS[k]), KEYS[k])
    if err then return err end
  end
end
-- writes
local seqs = {}
for s in string.gmatch(ARGV[6], '[^\n]+') do seqs[#seqs + 1] = s end
local xs, ty, touched, owned, refused = {}, {}, {}, {}, {}
local i, dups, late, short, evicted = 0, 0, 0, 0, 0

-- Does `key` belong to a sender, or may `sender` take it (within its bound)? Else nil and
-- the number of keys it holds.
local function own(key)
  if owned[key] or redis.call('HEXISTS', owners, key) == 1 then
    owned[key] = true
    return true
  end
  local held = tonumber(redis.call('HGET', senders, sender) or '0')
  if held >= per_sender then return nil, held end
  redis.call('HINCRBY', senders, sender, 1)
  redis.call('HSET', owners, key, sender)
  owned[key] = true
  return true
end

for k in string.gmatch(ARGV[5], '%d+') do
  i = i + 1
  local key, seq = KEYS[tonumber(k)], seqs[i]
  local ok, held = own(key)
  local card = ok and redis.call('ZCARD', key) or 0
  local newest = card > 0 and redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]
  local lowest = card >= keep and redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2]
  if not ok then
    refused[#refused + 1] = i .. ' too_many_keys ' .. held
  elseif redis.call('ZCOUNT', key, seq, seq) > 0 then
    dups = dups + 1
  elseif lowest and tonumber(seq) < tonumber(lowest) then
    late = late + 1
  elseif newest and tonumber(seq) - tonumber(newest) > jump then
    refused[#refused + 1] = i .. ' seq_jump ' .. newest
  else
    redis.call('ZADD', key, seq, string.sub(members, (i - 1) * mlen + 1, i * mlen))
    if card + 1 > keep then redis.call('ZREMRANGEBYRANK', key, 0, card - keep) end
    redis.call('EXPIRE', key, ttl)
    touched[key] = true
    if string.sub(flags, i, i) == '1' then
      local steps = redis.call('ZREVRANGEBYSCORE', key, seq, '-inf', 'LIMIT', 0, window)
      if #steps < window then
        short = short + 1
      else
        for j = window, 1, -1 do xs[#xs + 1] = string.sub(steps[j], 9) end
        ty[#ty + 1] = string.sub(ys, (i - 1) * 4 + 1, i * 4)
      end
    end
  end
end
local added = #ty
if added > 0 then
  local total = count + added
  add_entry(stream, added, table.concat(xs), table.concat(ty), nil, total)
  redis.call('SET', counter, total)
end
-- A window deleted: out of the device index, its owner's count and its owner's index
-- (unless `unindexed`: the owner whose index it has left already). 1 if it was indexed.
local function forget(key, unindexed)
  redis.call('UNLINK', key)
  local was = redis.call('ZREM', index, key)
  local owner = redis.call('HGET', owners, key)
  if owner then
    redis.call('HDEL', owners, key)
    if owner ~= unindexed then
      redis.call('ZREM', by .. owner, key)
    end
    if redis.call('HINCRBY', senders, owner, -1) <= 0 then
      redis.call('HDEL', senders, owner)
    end
  end
  return was
end

if next(touched) then
  local touching = {}
  for key in pairs(touched) do
    redis.call('ZADD', index, now, key)
    local owner = redis.call('HGET', owners, key)
    if owner then
      redis.call('ZADD', by .. owner, now, key)
      touching[owner] = true
    end
  end
  for owner in pairs(touching) do redis.call('EXPIRE', by .. owner, ttl) end
  -- windows expired since (no need to wait for their TTL)
  for _, key in ipairs(redis.call('ZRANGE', index, '-inf', '(' .. (now - ttl), 'BYSCORE')) do
    forget(key)
  end
  -- past the bound, this call's sender replaces its own idlest window while it holds more
  -- than one: a flood of new keys never evicts another sender's; a sender's first window
  -- (a new device) takes the idlest of all
  local over = redis.call('ZCARD', index) - devices
  while over > 0 do
    local victims, unindexed = {}, nil
    local held = tonumber(redis.call('HGET', senders, sender) or '0')
    if held > 1 then  -- (its idlest leave its index either way: none is read twice)
      victims = redis.call('ZRANGE', by .. sender, 0, math.min(over, held - 1) - 1)
      if #victims > 0 then
        redis.call('ZREMRANGEBYRANK', by .. sender, 0, #victims - 1)
        unindexed = sender
      end
    end
    if #victims == 0 then
      victims = redis.call('ZRANGE', index, 0, 0)
    end
    for _, victim in ipairs(victims) do
      if forget(victim, unindexed) == 1 then
        over, evicted = over - 1, evicted + 1
      end
    end
  end
  redis.call('EXPIRE', index, ttl)
  redis.call('EXPIRE', owners, ttl)
  redis.call('EXPIRE', senders, ttl)
end
return {added, dups, late, short, evicted, refused}
