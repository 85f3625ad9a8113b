#!lua
--#include check_count
--#include entry
-- Exactly-once append of a run of messages to the samples stream, all their kept samples
-- in one entry (`streamlearn.appends`): a learner reads, tracks and acknowledges entries,
-- each at a cost of Redis's time whatever its size, so a run of single-sample messages is
-- one entry, not hundreds. KEYS: stream, counter; with de-duplication also the seen sets
-- of generations 0 and 1 (by parity), the generation's state ("gen started_s size") and
-- the ids each sender put in the current generation (a hash, sender -> count).
-- ARGV: window (s; 0: no de-duplication), now (s), max ids, bytes per x row, layout ("n"
-- or "n:L" per message, L: length of its ids field), then back to back for all messages:
-- x rows (float32), y (float32), ids fields (JSON lists); one JSON-encoded id (or null)
-- per line for each sample that has an ids field; their senders, run-length ("count
-- sender" per line, the sender JSON-encoded or `-` for none; empty: none has one, every
-- id is in the whole pool); a sender's share of a
-- generation (ids). A sender past its share has its further ids of the generation
-- appended and not remembered, so its flood turns no generation over: others' ids stay.
-- Returns {samples added, samples dropped as seen, ids not remembered}.
-- Lua returns at most ~8000 values from `unpack`: ids go to Redis 1000 at a time.
local stream, counter = KEYS[1], KEYS[2]
local window, now, cap = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local xrow = tonumber(ARGV[4])
local x, y, idsblob = ARGV[6], ARGV[7], ARGV[8]
local share = tonumber(ARGV[11])
-- reads and checks first: a call that fails has written nothing
local total, err = check_count(stream, counter)
if err then return err end
local frags, named, known, fresh = {}, {}, {}, {}
local senders, owner, remember, room, took = {}, {}, {}, {}, {}
local dedup, unremembered = false, 0
-- no senders given: every id is in the whole pool (bare `samples`), as most runs are
local shared = ARGV[10] == ''
if window > 0 then
  if not shared then
    for n, who in string.gmatch(ARGV[10], '(%d+) ([^\n]+)') do
      for _ = 1, tonumber(n) do senders[#senders + 1] = who end
    end
  end
  for f in string.gmatch(ARGV[9], '[^\n]+') do
    frags[#frags + 1] = f
    if f ~= 'null' then
      named[#named + 1] = f
      if not shared then owner[f] = senders[#frags] end
    end
  end
end
local gen, started, size, turn = 0, now, 0, 0
if #named > 0 then
  local meta = redis.pcall('GET', KEYS[5])
  err = failed(meta, KEYS[5])
  if err then return err end
  local g, s, n = string.match(meta or '', '^(%d+) (%S+) (%d+)$')
  if g then gen, started, size = tonumber(g), tonumber(s), tonumber(n) end
  local age = now - started
  if age >= 2 * window then turn = 2 elseif age >= window or size >= cap / 2 then turn = 1 end
  gen = gen + turn
  -- the sets that live on: current and previous, less those a new generation drops
  for back = turn, 1 do
    local set = KEYS[3 + (gen - back) % 2]
    for i = 1, #named, 1000 do
      local hits = redis.pcall('SMISMEMBER', set, unpack(named, i, math.min(i + 999, #named)))
      err = failed(hits, set)
      if err then return err end
      for j, hit in ipairs(hits) do
        if hit == 1 then known[named[i + j - 1]], dedup = true, true end
      end
    end
  end
  local repeated, who = {}, {}
  for _, f in ipairs(named) do
    if known[f] or repeated[f] then dedup = true else
      repeated[f] = true
      fresh[#fresh + 1] = f
      local o = owner[f]
      if o and o ~= '-' and not room[o] then room[o], who[#who + 1] = share, o end
    end
  end
  -- each sender's room left in the current generation (all of its share in a new one)
  for i = 1, #who, 1000 do
    local part = {unpack(who, i, math.min(i + 999, #who))}
    local had = redis.pcall('HMGET', KEYS[6], unpack(part))
    err = failed(had, KEYS[6])
    if err then return err end
    if turn == 0 then
      for j, o in ipairs(part) do room[o] = share - (tonumber(had[j]) or 0) end
    end
  end
  if shared then remember = fresh end
  for _, f in ipairs(shared and {} or fresh) do
    local o = owner[f]
    if o == '-' then remember[#remember + 1] = f
    elseif room[o] > 0 then
      remember[#remember + 1], room[o], took[o] = f, room[o] - 1, (took[o] or 0) + 1
    else unremembered = unremembered + 1 end
  end
end
-- writes
if #named > 0 then
  local cur = KEYS[3 + gen % 2]
  if turn > 0 then
    redis.call('UNLINK', cur, KEYS[6])
    if turn == 2 then redis.call('UNLINK', KEYS[3 + (gen + 1) % 2]) end
    started, size = now, 0
  end
  for i = 1, #remember, 1000 do
    size = size + redis.call('SADD', cur, unpack(remember, i, math.min(i + 999, #remember)))
  end
  local counted = false
  for o, n in pairs(took) do counted = redis.call('HINCRBY', KEYS[6], o, n) end
  redis.call('SET', KEYS[5], gen .. ' ' .. started .. ' ' .. size, 'EX', 3 * window)
  redis.call('EXPIRE', KEYS[3], 3 * window)
  redis.call('EXPIRE', KEYS[4], 3 * window)
  if counted then redis.call('EXPIRE', KEYS[6], 3 * window) end
end
local at, ia, fo, added, dups = 0, 1, 0, 0, 0
local xs, ys, idparts, anyids = {}, {}, {}, false
for count, len in string.gmatch(ARGV[5], '(%d+):?(%d*)') do
  local n = tonumber(count)
  local ex = string.sub(x, at * xrow + 1, (at + n) * xrow)
  local ey = string.sub(y, at * 4 + 1, (at + n) * 4)
  local ids, keep = nil, n
  if len ~= '' then
    ids = string.sub(idsblob, ia, ia + tonumber(len) - 1)
    ia = ia + tonumber(len)
    if dedup then
      local kept, parts = {}, {}
      for i = 1, n do
        local f = frags[fo + i]
        if f == 'null' or not known[f] then
          kept[#kept + 1], parts[#parts + 1] = i, f
          known[f] = f ~= 'null'
        end
      end
      keep = #kept
      if keep > 0 and keep < n then
        local xs, ys = {}, {}
        for j, i in ipairs(kept) do
          xs[j] = string.sub(ex, (i - 1) * xrow + 1, i * xrow)
          ys[j] = string.sub(ey, (i - 1) * 4 + 1, i * 4)
        end
        ex, ey, ids = table.concat(xs), table.concat(ys), '[' .. table.concat(parts, ',') .. ']'
      end
    end
    fo = fo + n
  end
  at = at + n
  if keep > 0 then
    xs[#xs + 1], ys[#ys + 1] = ex, ey
    if ids then  -- the entry's ids: each message's list, null for those that have none
      idparts[#idparts + 1], anyids = string.sub(ids, 2, -2), true
    else
      idparts[#idparts + 1] = string.rep('null,', keep - 1) .. 'null'  -- Lua 5.1: no sep
    end
  end
  added, dups = added + keep, dups + n - keep
end
if added > 0 then
  total = total + added
  add_entry(stream, added, table.concat(xs), table.concat(ys),
            anyids and '[' .. table.concat(idparts, ',') .. ']' or nil, total)
end
redis.call('SET', counter, total)
return {added, dups, unremembered}
