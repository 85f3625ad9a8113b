-- The samples stream's entry, its one definition on the Lua side (the Python side:
-- `streamlearn.stream.unpack`): `n` samples, `x` and `y` their float32 rows and targets
-- back to back, `ids` a JSON list when the samples have ids, and `c` the running count of
-- samples appended to the stream (its counter's value once this entry was added).

local function add_entry(stream, n, x, y, ids, total)
  if ids then
    return redis.call('XADD', stream, '*', 'n', n, 'x', x, 'y', y, 'ids', ids, 'c', total)
  end
  return redis.call('XADD', stream, '*', 'n', n, 'x', x, 'y', y, 'c', total)
end

-- n, x, y and c of an entry's fields (a flat list, as XRANGE returns them), n and c as
-- numbers; nil for each one missing. In the order add_entry writes them, one pass.
local function entry_fields(f)
  local n, x, y, c
  local from = 1
  if f[1] == 'n' and f[3] == 'x' and f[5] == 'y' then
    n, x, y, from = tonumber(f[2]), f[4], f[6], 7
  end
  for i = from, #f, 2 do
    local k = f[i]
    if k == 'c' then c = tonumber(f[i + 1])
    elseif k == 'n' then n = tonumber(f[i + 1])
    elseif k == 'x' then x = f[i + 1]
    elseif k == 'y' then y = f[i + 1] end
  end
  return n, x, y, c
end
