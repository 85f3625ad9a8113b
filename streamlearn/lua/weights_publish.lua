-- Publish one weights blob; the store assigns its version. All or nothing.
-- KEYS: own latest, own version list; for a variant also the champion pointer, the
-- model's latest and the model's version list.
-- ARGV: blob, floor, keep, own blob key prefix, the model's channel; for a variant also
-- its name, the default champion and the model's blob key prefix.
-- The version is one above the floor and every version of both namespaces, so the
-- model's versions keep increasing when the champion changes. A variant's blob also
-- becomes the model's (the keys actors read, then announced) if and only if the champion
-- pointer names it now: a demoted champion can never publish to the model again.
-- Returns {version, 1 if the model's keys were written else 0}.
local blob, floor, keep = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local function latest(key) return tonumber(redis.call('GET', key) or '0') end
local v = math.max(floor, latest(KEYS[1]))
if #KEYS > 2 then v = math.max(v, latest(KEYS[4])) end
v = v + 1
local function put(last, list, prefix)
  redis.call('SET', prefix .. v, blob)
  redis.call('SET', last, v)
  redis.call('RPUSH', list, v)
  while redis.call('LLEN', list) > keep do
    redis.call('DEL', prefix .. redis.call('LPOP', list))
  end
end
put(KEYS[1], KEYS[2], ARGV[4])
if #KEYS > 2 then
  if (redis.call('GET', KEYS[3]) or ARGV[7]) ~= ARGV[6] then return {v, 0} end
  put(KEYS[4], KEYS[5], ARGV[8])
end
redis.call('PUBLISH', ARGV[5], v)
return {v, 1}
