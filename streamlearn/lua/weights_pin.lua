-- Pin a version: actors serve it instead of the latest, and the trim keeps it.
-- KEYS: the model's pin, its version list, the version's blob. ARGV: version, channel.
-- Checked and set at once, so a publish cannot trim the version between the two.
-- The channel announces the pinned version, so actors load it at once.
-- Returns {1} when pinned, else {0, the versions kept...}.
if redis.call('EXISTS', KEYS[3]) == 0 then
  local out = {0}
  for _, kept in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do out[#out + 1] = kept end
  return out
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('PUBLISH', ARGV[2], ARGV[1])
return {1}
