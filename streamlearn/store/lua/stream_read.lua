#!lua flags=allow-oom
--#include entry
-- New entries for a consumer, packed inside Redis so that a read of a thousand one-sample
-- entries costs Python a few strings instead of a few per entry: the entry ids joined by
-- commas, the sample count every usable entry holds (0 when they differ: then each one's
-- as a little-endian uint32), their x and y bytes concatenated, and the id and reason of
-- each unusable entry. XREADGROUP never blocks inside a script.
-- allow-oom: a full Redis (maxmemory, noeviction) still lets the learner read, train and
-- acknowledge, and so free memory; a script with flags declares its keys (KEYS[1]).
-- KEYS: stream. ARGV: group, consumer, count, bytes per x row.
local got = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3],
                       'STREAMS', KEYS[1], '>')
if not got then return {} end
local xrow = tonumber(ARGV[4])
local ids, xs, ys, bad = {}, {}, {}, {}
local k, same, counts = 0, nil, nil  -- counts: only once two entries' counts differ
for _, entry in ipairs(got[1][2]) do
  local f = entry[2]
  local n, x, y
  if f[1] == 'n' and f[3] == 'x' and f[5] == 'y' then  -- as add_entry writes it
    n, x, y = tonumber(f[2]), f[4], f[6]
  else
    n, x, y = entry_fields(f)
  end
  if n and x and y and #x == n * xrow and #y == 4 * n then
    k = k + 1
    ids[k], xs[k], ys[k] = entry[1], x, y
    if same == nil then
      same = n
    elseif n ~= same and not counts then
      counts = {string.rep(struct.pack('<I4', same), k - 1)}
    end
    if counts then counts[#counts + 1] = struct.pack('<I4', n) end
  else
    bad[#bad + 1] = entry[1]
    bad[#bad + 1] = 'unusable stream entry: fields n, x, y missing or of inconsistent sizes'
  end
end
return {table.concat(ids, ','), counts and 0 or (same or 0), table.concat(xs),
        table.concat(ys), bad, counts and table.concat(counts) or ''}
