-- Pin a version: actors serve it instead of the latest, and the trim keeps it.
-- KEYS: the model's pin, version list, history, blobs. ARGV: version, channel.
-- Checked and set at once, so a publish cannot trim the version between the two.
-- The channel announces the pinned version, so actors load it at once.
-- Returns {1} when pinned, else {0, the versions kept...}.
if redis.call('HEXISTS', KEYS[4], ARGV[1]) == 0 then
  local out = {0}
  for _, kept in ipairs(redis.call('HKEYS', KEYS[4])) do out[#out + 1] = kept end
  return out
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('PUBLISH', ARGV[2], ARGV[1])
return {1}
