-- Mark served predictions joined to their labels, and score them, once each
-- (`streamlearn.store.pending`). A prediction still kept (not yet a tombstone) becomes the
-- tombstone ARGV[1], keeping its TTL, and adds its loss, metric and label delay to the
-- served score; one already joined adds nothing, so a label repeated, or two workers
-- joining it at once, scores it once.
-- KEYS: the served hash, the delays list, then one pending key per label.
-- ARGV: tombstone, unknown ids to count, delays kept, then loss, metric, delay (s) per key.
-- Returns how many were scored.
local served, delays = KEYS[1], KEYS[2]
local tomb, unknown, keep = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local n, loss, metric = 0, 0, 0
for i = 3, #KEYS do
  local value = redis.call('GET', KEYS[i])
  if value and value ~= tomb then
    redis.call('SET', KEYS[i], tomb, 'KEEPTTL')
    local at = 4 + 3 * (i - 3)
    n = n + 1
    loss = loss + tonumber(ARGV[at])
    metric = metric + tonumber(ARGV[at + 1])
    redis.call('LPUSH', delays, ARGV[at + 2])
  end
end
if n > 0 then
  redis.call('HINCRBY', served, 'labels', n)
  redis.call('HINCRBYFLOAT', served, 'loss_sum', string.format('%.17g', loss))
  redis.call('HINCRBYFLOAT', served, 'metric_sum', string.format('%.17g', metric))
  redis.call('LTRIM', delays, 0, keep - 1)
end
if unknown > 0 then redis.call('HINCRBY', served, 'unknown', unknown) end
return n
