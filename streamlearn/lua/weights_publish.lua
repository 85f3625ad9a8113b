-- Publish one weights blob; the store assigns its version. All or nothing.
-- KEYS: own latest, own version list, then without a variant the model's pin; for a
-- variant the champion pointer, the model's latest, the model's version list and pin.
-- ARGV: blob, floor, keep, own blob key prefix, the model's channel; for a variant also
-- its name, the default champion and the model's blob key prefix.
-- The version is one above the floor and every version of both namespaces, so the
-- model's versions keep increasing when the champion changes. A variant's blob also
-- becomes the model's (the keys actors read, then announced) if and only if the champion
-- pointer names it now: a demoted champion can never publish to the model again.
-- The trim keeps the newest `keep` versions and, in the model's list, the pinned one.
-- Returns {version, 1 if the model's keys were written else 0}.
local blob, floor, keep = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local variant = #KEYS > 3
local function latest(key) return tonumber(redis.call('GET', key) or '0') end
local v = math.max(floor, latest(KEYS[1]))
if variant then v = math.max(v, latest(KEYS[4])) end
v = v + 1
local function put(last, list, prefix, pin)
  redis.call('SET', prefix .. v, blob)
  redis.call('SET', last, v)
  redis.call('RPUSH', list, v)
  local pinned = pin and redis.call('GET', pin)
  local held = false
  while redis.call('LLEN', list) > keep do
    local old = redis.call('LPOP', list)
    if old == pinned then held = true else redis.call('DEL', prefix .. old) end
  end
  if held then redis.call('LPUSH', list, pinned) end
end
if not variant then
  put(KEYS[1], KEYS[2], ARGV[4], KEYS[3])
else
  put(KEYS[1], KEYS[2], ARGV[4], nil)
  if (redis.call('GET', KEYS[3]) or ARGV[7]) ~= ARGV[6] then return {v, 0} end
  put(KEYS[4], KEYS[5], ARGV[8], KEYS[6])
end
redis.call('PUBLISH', ARGV[5], v)
return {v, 1}
