-- Label a version (`stable` -> 12): requests may name the label instead of the version,
-- and the trim keeps a labelled version. An empty version removes the label.
-- KEYS: the model's labels, blobs. ARGV: label, version (or ""), channel.
-- Checked and set at once, so a publish cannot trim the version between the two. The
-- channel wakes the actors, which read the labels with the latest version.
-- Returns {1} when set (or removed), else {0, the versions kept...}.
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
elseif redis.call('HEXISTS', KEYS[2], ARGV[2]) == 0 then
  local out = {0}
  for _, kept in ipairs(redis.call('HKEYS', KEYS[2])) do out[#out + 1] = kept end
  return out
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
redis.call('PUBLISH', ARGV[3], ARGV[2])
return {1}
