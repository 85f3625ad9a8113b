#!lua
--#include check_count
--#include entry
-- A run of keyed observations into their keys' windows; full windows with a target become
-- training samples, one samples stream entry per call (`streamlearn.windows`).
-- KEYS: stream, counter, device index, then the window set of each key in this run.
-- ARGV: window W, observations kept per key, expiry (s), member length (8 + 4 * inputs),
-- the KEYS index of each observation's set (comma-separated), their seqs (exact decimal
-- text, one a line), members back to back, y (float32) back to back, one flag a
-- character: '1' when the observation has a target; now (s), max devices.
-- Returns {samples added, duplicates, late, short, evicted}.
local stream, counter, index = KEYS[1], KEYS[2], KEYS[3]
local window, keep, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local mlen = tonumber(ARGV[4])
local members, ys, flags = ARGV[7], ARGV[8], ARGV[9]
local now, devices = tonumber(ARGV[10]), tonumber(ARGV[11])
-- reads and checks first: a call that fails has written nothing
local count, err = check_count(stream, counter)
if err then return err end
-- the device index and the windows: sorted sets
for k = 3, #KEYS do
  err = failed(redis.pcall('ZCARD', KEYS[k]), KEYS[k])
  if err then return err end
end
-- writes
local seqs = {}
for s in string.gmatch(ARGV[6], '[^\n]+') do seqs[#seqs + 1] = s end
local xs, ty, touched = {}, {}, {}
local i, dups, late, short, evicted = 0, 0, 0, 0, 0
for k in string.gmatch(ARGV[5], '%d+') do
  i = i + 1
  local key, seq = KEYS[tonumber(k)], seqs[i]
  local card = redis.call('ZCARD', key)
  local lowest = card >= keep and redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2]
  if redis.call('ZCOUNT', key, seq, seq) > 0 then
    dups = dups + 1
  elseif lowest and tonumber(seq) < tonumber(lowest) then
    late = late + 1
  else
    redis.call('ZADD', key, seq, string.sub(members, (i - 1) * mlen + 1, i * mlen))
    if card + 1 > keep then redis.call('ZREMRANGEBYRANK', key, 0, card - keep) end
    redis.call('EXPIRE', key, ttl)
    touched[key] = true
    if string.sub(flags, i, i) == '1' then
      local newest = redis.call('ZREVRANGEBYSCORE', key, seq, '-inf', 'LIMIT', 0, window)
      if #newest < window then
        short = short + 1
      else
        for j = window, 1, -1 do xs[#xs + 1] = string.sub(newest[j], 9) end
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
if next(touched) then
  for key in pairs(touched) do redis.call('ZADD', index, now, key) end
  -- windows expired since (no need to wait for their TTL), then the idlest past the bound
  local drop = redis.call('ZCOUNT', index, '-inf', '(' .. (now - ttl))
  local over = redis.call('ZCARD', index) - drop - devices
  if over > 0 then evicted = over else over = 0 end
  if drop + over > 0 then
    for _, key in ipairs(redis.call('ZRANGE', index, 0, drop + over - 1)) do
      redis.call('UNLINK', key)
    end
    redis.call('ZREMRANGEBYRANK', index, 0, drop + over - 1)
  end
  redis.call('EXPIRE', index, ttl)
end
return {added, dups, late, short, evicted}
