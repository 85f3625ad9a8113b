-- Publish one weights blob; the store assigns its version. All or nothing.
-- KEYS: own latest, version list, history, blobs; then without a variant the model's
-- pin and labels; for a variant the champion pointer and the model's latest, version list,
-- history, blobs, pin and labels. Every key is declared: the blobs are fields of one hash.
-- ARGV: blob, floor, keep, history_every_ms, history_max, the model's channel; for a
-- variant also its name and the default champion.
-- The version is one above the floor and every version of both namespaces, so the
-- model's versions keep increasing when the champion changes. A variant's blob also
-- becomes the model's (the keys actors read, then announced) if and only if the champion
-- pointer names it now: a demoted champion can never publish to the model again.
-- Kept: the newest `keep` versions; in the model's namespace also a history of one version
-- per `history_every_ms` (the newest `history_max`, scored by publish time in ms), the
-- pinned one and the labelled ones (`stable` -> 12). A blob is deleted once no list holds
-- it and it is neither pinned nor labelled; a held one stays in the version list.
-- Last of KEYS the learner's lease, last of ARGV its holder's token (`store/lease.py`):
-- with a token, nothing is written unless the lease holds it now, so a learner that lost
-- its lease cannot publish; an empty token (a tool, a test) is not fenced.
-- Returns {version, 1 if the model's keys were written else 0}; {0, 0}: fenced off.
local token = ARGV[#ARGV]
if token ~= '' and redis.call('GET', KEYS[#KEYS]) ~= token then return {0, 0} end
local blob, floor, keep = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local every, history_max = tonumber(ARGV[4]), tonumber(ARGV[5])
local variant = #KEYS > 7
local function latest(key) return tonumber(redis.call('GET', key) or '0') end
local v = math.max(floor, latest(KEYS[1]))
if variant then v = math.max(v, latest(KEYS[6])) end
v = v + 1
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

local function put(last, list, history, blobs, pin, labels, hmax)
  redis.call('HSET', blobs, v, blob)
  redis.call('SET', last, v)
  redis.call('RPUSH', list, v)
  if hmax > 0 then
    local newest = redis.call('ZRANGE', history, -1, -1, 'WITHSCORES')
    if #newest == 0 or now - tonumber(newest[2]) >= every then
      redis.call('ZADD', history, now, v)
    end
  end
  local held = {}
  if pin then
    local pinned = redis.call('GET', pin)
    if pinned then held[pinned] = true end
    for _, labelled in ipairs(redis.call('HVALS', labels)) do held[labelled] = true end
  end
  local back, backs = {}, {}
  local function hold(old)
    if not backs[old] then backs[old] = true; back[#back + 1] = old end
  end
  while redis.call('LLEN', list) > keep do
    local old = redis.call('LPOP', list)
    if held[old] then
      hold(old)
    elseif not redis.call('ZSCORE', history, old) then
      redis.call('HDEL', blobs, old)
    end
  end
  while redis.call('ZCARD', history) > hmax do
    local old = redis.call('ZPOPMIN', history)[1]
    if held[old] then
      if not redis.call('LPOS', list, old) then hold(old) end
    elseif not redis.call('LPOS', list, old) then
      redis.call('HDEL', blobs, old)
    end
  end
  table.sort(back, function(a, b) return tonumber(a) > tonumber(b) end)
  for _, old in ipairs(back) do redis.call('LPUSH', list, old) end
end

if not variant then
  put(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], history_max)
else
  put(KEYS[1], KEYS[2], KEYS[3], KEYS[4], nil, nil, 0)
  if (redis.call('GET', KEYS[5]) or ARGV[8]) ~= ARGV[7] then return {v, 0} end
  put(KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], history_max)
end
redis.call('PUBLISH', ARGV[6], v)
return {v, 1}
