#!lua flags=no-writes
--#include entry
-- The samples a consumer group has not acknowledged yet: the running count now, less
-- that of the oldest entry the group has not acknowledged, plus that entry's own.
-- KEYS: stream, counter. ARGV: group.
local stream, counter, group = KEYS[1], KEYS[2], ARGV[1]
if redis.call('XLEN', stream) == 0 then return 0 end
local from = '-'
for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
  local info = {}
  for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
  if info['name'] == group then
    if info['pending'] > 0 then
      from = redis.call('XPENDING', stream, group)[2]
    else
      from = '(' .. info['last-delivered-id']
    end
  end
end
local first = redis.call('XRANGE', stream, from, '+', 'COUNT', 1)[1]
if not first then return 0 end
local n, _, _, c = entry_fields(first[2])
if not c then return redis.call('XLEN', stream) end
return tonumber(redis.call('GET', counter) or '0') - c + n
