#!lua flags=allow-oom
-- XACK from one string: packing thousands of ids as separate arguments costs Python more
-- than the step that trained them. allow-oom: acknowledging frees memory.
-- KEYS: stream. ARGV: group, entry ids joined by commas. Returns the entries acknowledged.
local acked, ids = 0, {}
for id in string.gmatch(ARGV[2], '[^,]+') do
  ids[#ids + 1] = id
  if #ids == 1000 then
    acked = acked + redis.call('XACK', KEYS[1], ARGV[1], unpack(ids))
    ids = {}
  end
end
if #ids > 0 then acked = acked + redis.call('XACK', KEYS[1], ARGV[1], unpack(ids)) end
return acked
