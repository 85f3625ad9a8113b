#!lua flags=no-writes
-- The newest observations of the keys of a batch of key-only requests (actors).
-- KEYS: the window set of each request (repeats allowed). ARGV: count, then each request's
-- upper bound (exclusive "(seq", or "+inf"). Returns, per request, its newest `count`
-- members below the bound, oldest first, back to back in one string: one reply per
-- request keeps the client's parsing small.
local count = tonumber(ARGV[1])
local out = {}
for i, key in ipairs(KEYS) do
  local rows = redis.call('ZREVRANGEBYSCORE', key, ARGV[i + 1], '-inf', 'LIMIT', 0, count)
  local steps = {}
  for j = #rows, 1, -1 do steps[#steps + 1] = rows[j] end
  out[i] = table.concat(steps)
end
return out
