-- Index device states (`streamlearn.store.state_index`): each key's last state's time, and
-- the keys past the bound, the oldest, taken out for their states to be cleared.
-- KEYS: the index (sorted set). ARGV: the bound, the number of keys to check, those keys,
-- then time, key pairs.
-- ZADD GT: an older time (a retained state taken in at an actor's start) moves no key back.
-- Returns {the keys new to the index, the keys taken out, oldest first, the checked keys
-- the index no longer holds (taken out by another actor meanwhile)}.
local new, gone, absent = {}, {}, {}
local checks = tonumber(ARGV[2])
for i = 3, 2 + checks do
  if not redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    absent[#absent + 1] = ARGV[i]
  end
end
for i = 3 + checks, #ARGV, 2 do
  if redis.call('ZADD', KEYS[1], 'GT', ARGV[i], ARGV[i + 1]) == 1 then
    new[#new + 1] = ARGV[i + 1]
  end
end
local over = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[1])
if over > 0 then
  gone = redis.call('ZRANGE', KEYS[1], 0, over - 1)
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, over - 1)
end
return {new, gone, absent}
