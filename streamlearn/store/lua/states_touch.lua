-- Index device states (`streamlearn.store.state_index`): each key's last state's time, and
-- the keys past the bound, the oldest, taken out for their states to be cleared.
-- KEYS: the index (sorted set). ARGV: the bound, then time, key pairs.
-- ZADD GT: an older time (a retained state taken in at an actor's start) moves no key back.
-- Returns {the keys new to the index, the keys taken out, oldest first}.
local new, gone = {}, {}
for i = 2, #ARGV, 2 do
  if redis.call('ZADD', KEYS[1], 'GT', ARGV[i], ARGV[i + 1]) == 1 then
    new[#new + 1] = ARGV[i + 1]
  end
end
local over = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[1])
if over > 0 then
  gone = redis.call('ZRANGE', KEYS[1], 0, over - 1)
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, over - 1)
end
return {new, gone}
