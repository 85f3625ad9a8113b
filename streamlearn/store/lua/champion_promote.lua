-- Promote a variant (`streamlearn.learner.variants.Promoter`): a compare-and-set on the
-- champion pointer, and the promotion stored beside it. All or nothing.
-- KEYS: champion, promotion, the promoting learner's lease (`store/lease.py`).
-- ARGV: the champion it beat, the new champion, the promotion's JSON, the default
-- champion, now (unix s), the cooldown (s), the lease holder's token.
-- With a token, nothing is written unless the lease holds it now, as in
-- `weights_publish.lua`: a learner that lost its lease cannot promote its variant. An empty
-- token (a tool, a test) is not fenced.
-- Returns 1 when the pointer moved; 0 when it names another champion by now, or the last
-- promotion is under the cooldown old; -1: fenced off (the lease is another's or gone).
local token = ARGV[7]
if token ~= '' and redis.call('GET', KEYS[3]) ~= token then return -1 end
local current = redis.call('GET', KEYS[1]) or ARGV[4]
if current ~= ARGV[1] then return 0 end
local last = redis.call('GET', KEYS[2])
if last then
  local ok, doc = pcall(cjson.decode, last)
  if ok and type(doc) == 'table' and tonumber(doc['at']) and
     tonumber(ARGV[5]) - tonumber(doc['at']) < tonumber(ARGV[6]) then
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], ARGV[3])
return 1
