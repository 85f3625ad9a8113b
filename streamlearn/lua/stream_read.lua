#!lua flags=allow-oom
--#include entry
-- New entries for a consumer, packed inside Redis so that a read of a thousand one-sample
-- entries costs Python a few strings instead of a few per entry: the entry ids joined by
-- commas, each usable entry's sample count as a little-endian uint32, its x and y bytes
-- concatenated, and the id and reason of each unusable entry. XREADGROUP never blocks
-- inside a script.
-- allow-oom: a full Redis (maxmemory, noeviction) still lets the learner read, train and
-- acknowledge, and so free memory; a script with flags declares its keys (KEYS[1]).
-- KEYS: stream. ARGV: group, consumer, count, bytes per x row.
local got = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3],
                       'STREAMS', KEYS[1], '>')
if not got then return {} end
local xrow = tonumber(ARGV[4])
local ids, ns, xs, ys, bad = {}, {}, {}, {}, {}
for _, entry in ipairs(got[1][2]) do
  local n, x, y = entry_fields(entry[2])
  if n and x and y and #x == n * xrow and #y == 4 * n then
    ids[#ids + 1], ns[#ns + 1] = entry[1], struct.pack('<I4', n)
    xs[#xs + 1], ys[#ys + 1] = x, y
  else
    bad[#bad + 1] = entry[1]
    bad[#bad + 1] = 'unusable stream entry: fields n, x, y missing or of inconsistent sizes'
  end
end
return {table.concat(ids, ','), table.concat(ns), table.concat(xs), table.concat(ys), bad}
