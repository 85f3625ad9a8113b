-- A run of Sparkplug B messages, in order, against their edge nodes' shared state
-- (`streamlearn.store.sparkplug`): births record aliases, data resolves them, seq gaps and
-- data before birth ask a rebirth (at most one per node per interval), deaths mark the
-- node or device dead.
-- KEYS: the node index (node -> last renewal time), the never-born index. A node's own
-- keys are the prefix (ARGV[8]) and `n:` (its hash), `s:` (seq -> time seen), `d:`
-- (device -> birth time, 0: dead, x: refused) or `a:` (alias -> "datatype name") and its
-- node or device key: all in the one slot of the model's hash tag.
-- ARGV: now (s), ttl (s), max nodes, max devices per node, max aliases per node, rebirth
-- interval (s), reorder timeout (s), the key prefix; then per message one argument, its
-- fields joined by U+001F: its type, node key, device ("": none), seq ("": none), bdSeq
-- ("": none), then its items: a birth's alias and "datatype name" pairs, or the aliases
-- data resolves.
-- The node hash: `born` 1/0, `bd` its birth's bdSeq, `hi` the newest seq, `miss` the seqs
-- skipped, "seq:time" comma-separated, `rb` the last rebirth asked, `na` aliases held,
-- `full` 1 when its birth was refused for aliases past the bound (a device's: `x`): its
-- data then asks no rebirth, which would bring the same birth; `lt` its last renewal.
-- Returns per message one string of parts joined by U+001F: status, rebirth 1/0, late
-- 1/0, the number of device keys that died and each, then each alias's "datatype name"
-- ("": unknown).
local index, unborn = KEYS[1], KEYS[2]
local now, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local max_nodes, max_devices, max_aliases = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local interval, reorder, prefix = tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8]
local US = '\31' -- separates a message's fields and a reply's parts: no key or name holds it
local WINDOW = 128 -- a seq up to 127 ahead of the newest is ahead; others are behind

-- A node forgotten: its keys, its devices' alias tables, its place in the indexes.
local function forget(victim)
  local base = prefix .. 'a:' .. victim
  for _, d in ipairs(redis.call('HKEYS', prefix .. 'd:' .. victim)) do
    redis.call('UNLINK', base .. '/' .. d)
  end
  redis.call('UNLINK', prefix .. 'n:' .. victim, prefix .. 's:' .. victim, prefix .. 'd:' .. victim, base)
  redis.call('ZREM', index, victim)
  redis.call('ZREM', unborn, victim)
end

-- A message's fields: its argument split at U+001F.
local function split(line)
  local f, start = {}, 1
  while true do
    local stop = string.find(line, US, start, true)
    if not stop then
      f[#f + 1] = string.sub(line, start)
      return f
    end
    f[#f + 1] = string.sub(line, start, stop - 1)
    start = stop + 1
  end
end

-- One message, its fields `f`: its result.
local function message(f)
  local kind, nkey, device, seq, bd = f[1], f[2], f[3], tonumber(f[4]), f[5]
  local first, last_arg = 6, #f
  local count = last_arg - first + 1
  local node, seen, devs = prefix .. 'n:' .. nkey, prefix .. 's:' .. nkey, prefix .. 'd:' .. nkey
  local aliases = prefix .. 'a:' .. (device == '' and nkey or nkey .. '/' .. device)
  local state = redis.call('HMGET', node, 'born', 'bd', 'hi', 'miss', 'rb', 'na', 'full', 'lt')

  -- A node's place in the index and its keys' expiry are renewed at most every ttl / 100
  -- (a busy node's message costs a few commands less). Idle nodes past ttl go then (a few
  -- a call), and a new node past max nodes takes the place of the idlest never born (a
  -- flood of made-up nodes displaces only its own), else of the idlest of all.
  -- (`lt` in the node's hash, its last renewal: no ZSCORE a message)
  local last = tonumber(state[8]) or tonumber(redis.call('ZSCORE', index, nkey))
  local touch = not last or now - last >= ttl / 100
  if touch then
    for _, victim in ipairs(redis.call('ZRANGEBYSCORE', index, '-inf', now - ttl, 'LIMIT', 0, 4)) do
      if victim ~= nkey then forget(victim) end
    end
    if not last then
      while redis.call('ZCARD', index) >= max_nodes do
        forget(redis.call('ZRANGE', unborn, 0, 0)[1] or redis.call('ZRANGE', index, 0, 0)[1])
      end
    end
    redis.call('ZADD', index, now, nkey)
    redis.call('HSET', node, 'lt', now)
    if not state[1] then redis.call('ZADD', unborn, now, nkey) end
  end

  local born, hi = state[1] == '1', tonumber(state[3])
  local rb, na = tonumber(state[5] or '0'), tonumber(state[6] or '0')
  local miss, dirty = {}, false -- the seqs skipped, and whether they changed
  for s, t in string.gmatch(state[4] or '', '(%d+):([%d.e+-]+)') do miss[tonumber(s)] = tonumber(t) end
  local status, want, late, resolved, dead = 'ok', false, 0, {}, {}

  local function save_miss()
    if not dirty then return end
    local parts = {}
    for s, t in pairs(miss) do parts[#parts + 1] = s .. ':' .. t end
    redis.call('HSET', node, 'miss', table.concat(parts, ','))
  end

  -- The seq against the newest seen: ahead records what it skipped, behind fills a gap or
  -- is late; a skipped seq still missing after the reorder timeout is a gap.
  local function check_seq()
    if seq == nil or hi == nil then return end
    local d = (seq - hi) % 256
    if d == 0 then
      late = 1
    elseif d < WINDOW then
      for j = 1, d - 1 do miss[(hi + j) % 256], dirty = now, true end
      hi = seq
      redis.call('HSET', node, 'hi', hi)
    else
      if miss[seq] then miss[seq], dirty = nil, true end
      late = 1
    end
    for _, t in pairs(miss) do
      if now - t > reorder then status, want, miss, dirty = 'gap', true, {}, true break end
    end
    save_miss()
  end

  -- A birth's alias table in place of the last one, within the node's bound of aliases.
  local function record_aliases()
    local old = redis.call('HLEN', aliases)
    if na - old + count / 2 > max_aliases then return false end
    redis.call('UNLINK', aliases)
    for i = first, last_arg, 2000 do
      redis.call('HSET', aliases, unpack(f, i, math.min(i + 1999, last_arg)))
    end
    na = na - old + count / 2
    redis.call('HSET', node, 'na', na)
    redis.call('EXPIRE', aliases, ttl)
    return true
  end

  -- every seq seen, born or not: a node birth overtaken by its session's next messages
  -- counts them (below)
  if seq ~= nil and kind ~= 'NBIRTH' then redis.call('HSET', seen, seq, now) end
  local devstate = device ~= '' and redis.call('HGET', devs, device) or false
  local devborn = tonumber(devstate or '-1') or -1 -- -1: unknown or refused, 0: dead
  if kind == 'NBIRTH' then
    hi, miss, dirty = seq, {}, true
    if seq ~= nil then
      -- what of this session came before its birth (another worker was faster) counts
      local ahead = {}
      for j = 1, WINDOW - 1 do ahead[j] = (seq + j) % 256 end
      local times = redis.call('HMGET', seen, unpack(ahead))
      local newest = 0
      for j = 1, WINDOW - 1 do
        if times[j] and now - tonumber(times[j]) <= reorder then newest = j end
      end
      for j = 1, newest - 1 do
        if not (times[j] and now - tonumber(times[j]) <= reorder) then miss[ahead[j]] = now end
      end
      hi = (seq + newest) % 256
      redis.call('HSET', seen, seq, now)
    end
    redis.call('HSET', node, 'born', 1, 'bd', bd, 'hi', hi or '')
    save_miss()
    redis.call('ZREM', unborn, nkey)
    -- devices born in an earlier session are dead until their own birth
    for _, d in ipairs(redis.call('HKEYS', devs)) do
      local t = tonumber(redis.call('HGET', devs, d)) or 0
      if t > 0 and now - t > reorder then redis.call('HSET', devs, d, 0) end
    end
    if record_aliases() then
      redis.call('HSET', node, 'full', 0)
    else
      redis.call('HSET', node, 'full', 1)
      status = 'too_many_aliases'
    end
  elseif kind == 'DBIRTH' then
    if not devstate and redis.call('HLEN', devs) >= max_devices then
      status = 'too_many_devices'
    else
      if born then check_seq() end
      if record_aliases() then
        redis.call('HSET', devs, device, now)
      else
        redis.call('HSET', devs, device, 'x')
        status = 'too_many_aliases'
      end
    end
  elseif kind == 'NDEATH' then
    if born and (bd == '' or state[2] == '' or state[2] == bd) then
      redis.call('HSET', node, 'born', 0, 'miss', '')
      dead[1] = nkey
      for _, d in ipairs(redis.call('HKEYS', devs)) do
        if (tonumber(redis.call('HGET', devs, d)) or 0) > 0 then
          redis.call('HSET', devs, d, 0)
          dead[#dead + 1] = nkey .. '/' .. d
        end
      end
    else
      status = 'stale_death' -- the will of an earlier session (its bdSeq), or of no birth
    end
  elseif kind == 'DDEATH' then
    if born then check_seq() end
    if devborn > 0 then
      redis.call('HSET', devs, device, 0)
      dead[1] = nkey .. '/' .. device
    end
  else -- NDATA, DDATA
    local owner = device == '' and (born and state[7] ~= '1') or devborn > 0
    if born then check_seq() end
    if not owner then -- asking a node whose birth was refused would bring it again
      if (device == '' and state[7] == '1') or devstate == 'x' then
        status = 'too_many_aliases'
      elseif not devstate and device ~= '' and redis.call('HLEN', devs) >= max_devices then
        status = 'too_many_devices'
      else
        status, want = 'unborn', true
      end
    elseif count > 0 then
      resolved = redis.call('HMGET', aliases, unpack(f, first, last_arg))
      for i = 1, #resolved do
        if not resolved[i] then
          if status == 'ok' then status = 'unknown_alias' end
          want = true
        end
      end
    end
  end

  local rebirth = 0
  if want and now - rb >= interval then
    rebirth = 1
    redis.call('HSET', node, 'rb', now)
  end
  if touch then
    for _, k in ipairs({node, seen, devs, aliases}) do redis.call('EXPIRE', k, ttl) end
  end
  local parts = {status, rebirth, late, #dead}
  for _, d in ipairs(dead) do parts[#parts + 1] = d end
  for i = 1, #resolved do parts[#parts + 1] = resolved[i] or '' end
  return table.concat(parts, US)
end

local out = {}
for i = 9, #ARGV do out[#out + 1] = message(split(ARGV[i])) end
return out
