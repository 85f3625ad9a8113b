-- Checks that scripts appending to the samples stream run before any write, so that a
-- call that fails (a key of the wrong type) has written nothing.

-- An error reply naming `key` when `reply` (of redis.pcall) is an error, else nil.
local function failed(reply, key)
  if type(reply) == 'table' and reply.err then
    return redis.error_reply(reply.err .. ' (key ' .. key .. ')')
  end
end

-- The samples appended so far (`counter`, the running count), once `stream` is checked to
-- be a stream and `counter` a count; else nil and the error reply to return.
local function check_count(stream, counter)
  local count = redis.pcall('GET', counter)
  local err = failed(count, counter) or failed(redis.pcall('XLEN', stream), stream)
  if err then return nil, err end
  if not tonumber(count or '0') then
    return nil, redis.error_reply('WRONGTYPE ' .. counter .. ' holds no count')
  end
  return tonumber(count or '0')
end
