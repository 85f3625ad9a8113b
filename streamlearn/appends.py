"""Exactly-once appends to a samples stream, and the backlog its learners have not done.

A redelivered MQTT message must not add its samples twice, and a crash must never leave
an id marked as seen without its samples in the stream. So a run of messages is checked
against the ids seen recently, appended (one entry per message) and its new ids recorded,
all in one Lua script call: Redis runs it atomically, and it reaches the AOF and replicas
as one transaction. Every key it touches is passed in KEYS and carries the model's hash
tag (`sl:{model}:...`), so it also runs on a Redis Cluster. The script reads and checks
every key before it writes any: a call that fails (a key of the wrong type) wrote nothing,
so the caller may dead-letter its messages or run them again.

Seen ids live in two sets, the current and the previous generation, bounded in time and
in size: a new generation starts (the previous one is UNLINKed, freed in the background)
once the current one is `window` seconds old (the ingest hosts' clocks) or holds half of
`max_ids`. An id is so remembered for at least `window`, or for as long as it takes
`max_ids / 2` new ids to arrive when that is sooner, and Redis holds at most about
`max_ids` of them (plus one run) whatever the rate.

Each entry also records `c`, the running total of samples appended (kept in
`sl:{model}:ingest:count`), so the unprocessed samples are `count - c + n` of the oldest
entry the learners' group has not acknowledged: one cheap script call, whatever the backlog.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import redis

from streamlearn.names import Names
from streamlearn.records import Samples

GROUP = "learners"
# Samples per script call: a call blocks Redis while it runs, so keep each to a few ms.
# A message is never split (one entry each), so a call holds up to max_samples_per_message.
CHUNK_SAMPLES = 2000

# Lua the scripts that append to the stream run first, `stream` and `counter` bound: reads
# and checks, so a call that fails has written nothing. Defines `failed` (an error reply
# naming its key, or nil), `err`, and `count` (the counter, checked to be a number).
CHECK_COUNT = """local function failed(reply, key)
  if type(reply) == 'table' and reply.err then
    return redis.error_reply(reply.err .. ' (key ' .. key .. ')')
  end
end
-- reads and checks first: a call that fails has written nothing
local count = redis.pcall('GET', counter)
local err = failed(count, counter) or failed(redis.pcall('XLEN', stream), stream)
if err then return err end
if not tonumber(count or '0') then
  return redis.error_reply('WRONGTYPE ' .. counter .. ' holds no count')
end
"""

# KEYS: stream, counter; with de-duplication also the seen sets of generations 0 and 1 (by
# parity) and the generation's state ("gen started_s size").
# ARGV: window (s; 0: no de-duplication), now (s), max ids, bytes per x row, layout ("n" or
# "n:L" per message, L: length of its ids field), then back to back for all messages: x
# rows (float32), y (float32), ids fields (JSON lists); and one JSON-encoded id (or null)
# per line for each sample that has an ids field.
# Lua returns at most ~8000 values from `unpack`: ids go to Redis 1000 at a time.
_APPEND = (
    """#!lua
local stream, counter = KEYS[1], KEYS[2]
local window, now, cap = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local xrow = tonumber(ARGV[4])
local x, y, idsblob = ARGV[6], ARGV[7], ARGV[8]
"""
    + CHECK_COUNT
    + """local total = tonumber(count or '0')
local frags, named, known, fresh = {}, {}, {}, {}
local dedup = false
if window > 0 then
  for f in string.gmatch(ARGV[9], '[^\\n]+') do
    frags[#frags + 1] = f
    if f ~= 'null' then named[#named + 1] = f end
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
  local repeated = {}
  for _, f in ipairs(named) do
    if known[f] or repeated[f] then dedup = true else
      repeated[f] = true
      fresh[#fresh + 1] = f
    end
  end
end
-- writes
if #named > 0 then
  local cur = KEYS[3 + gen % 2]
  if turn > 0 then
    redis.call('UNLINK', cur)
    if turn == 2 then redis.call('UNLINK', KEYS[3 + (gen + 1) % 2]) end
    started, size = now, 0
  end
  for i = 1, #fresh, 1000 do
    size = size + redis.call('SADD', cur, unpack(fresh, i, math.min(i + 999, #fresh)))
  end
  redis.call('SET', KEYS[5], gen .. ' ' .. started .. ' ' .. size, 'EX', 3 * window)
  redis.call('EXPIRE', KEYS[3], 3 * window)
  redis.call('EXPIRE', KEYS[4], 3 * window)
end
local at, ia, fo, added, dups = 0, 1, 0, 0, 0
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
    total = total + keep
    if ids then
      redis.call('XADD', stream, '*', 'n', keep, 'x', ex, 'y', ey, 'ids', ids, 'c', total)
    else
      redis.call('XADD', stream, '*', 'n', keep, 'x', ex, 'y', ey, 'c', total)
    end
  end
  added, dups = added + keep, dups + n - keep
end
redis.call('SET', counter, total)
return {added, dups}
"""
)

# KEYS: stream, counter. ARGV: group. Returns the samples not yet acknowledged by the group.
_BACKLOG = """#!lua flags=no-writes
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
local f = {}
for i = 1, #first[2], 2 do f[first[2][i]] = first[2][i + 1] end
if not f['c'] then return redis.call('XLEN', stream) end
return tonumber(redis.call('GET', counter) or '0') - tonumber(f['c']) + tonumber(f['n'])
"""


def per_call(accepted: Sequence[Samples]) -> list[int]:
    """How many messages of `accepted`, in order, each script call of `Appender.append`
    takes: up to `CHUNK_SAMPLES` samples, a message never split. Each call is atomic, so a
    caller can tell from a pipeline's replies which messages are in (`streamlearn.ingest`).

    >>> per_call([Samples(np.zeros((n, 1)), np.zeros(n)) for n in (1500, 400, 300, 5000)])
    [2, 1, 1]
    """
    counts: list[int] = []
    size = 0
    for samples in accepted:
        if counts and size + len(samples) <= CHUNK_SAMPLES:
            counts[-1] += 1
            size += len(samples)
        else:
            counts.append(1)
            size = len(samples)
    return counts


_quote = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Appended:
    """What one write did: samples added, samples dropped as already seen, and the backlog
    (unacknowledged samples) right after, when it was asked for."""

    added: int = 0
    duplicates: int = 0
    backlog: int | None = None


class Appender:
    """Queues exactly-once appends and backlog checks on a pipeline (one round trip)."""

    def __init__(
        self,
        client: redis.Redis,
        names: Names,
        sample_shape: tuple[int, ...],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.names = names
        self.stream = names.samples_key
        self.counter = names.ingest_count_key
        self.row_bytes = 4 * int(np.prod(sample_shape))
        self.clock = clock
        self._append = client.register_script(_APPEND)
        self._backlog = client.register_script(_BACKLOG)

    def append(
        self,
        pipe: redis.client.Pipeline,
        accepted: Iterable[Samples],
        window_s: int,
        max_ids: int = 1_000_000,
    ) -> int:
        """Queue the appends of `accepted` (one entry each); returns the script calls queued.

        Samples whose id was appended within the last `window_s` seconds (up to twice
        that) are dropped, of the last `max_ids` ids at least; 0 turns de-duplication off.
        """
        keys = [self.stream, self.counter]
        if window_s:
            keys += [self.names.key(f"ingest:seen:{leaf}") for leaf in ("0", "1", "gen")]
        head = [window_s, repr(float(self.clock())), max_ids, self.row_bytes]
        accepted = list(accepted)
        calls, at = per_call(accepted), 0
        for n in calls:
            run = accepted[at : at + n]
            pipe.evalsha(self._append.sha, len(keys), *keys, *head, *self._args(run, window_s))
            at += n
        return len(calls)

    def backlog(self, pipe: redis.client.Pipeline | None = None) -> int | None:
        """Samples in the stream the learners have not acknowledged (queued when `pipe`)."""
        if pipe is not None:
            pipe.evalsha(self._backlog.sha, 2, self.stream, self.counter, GROUP)
            return None
        return int(self._backlog(keys=[self.stream, self.counter], args=[GROUP]))

    def load(self) -> None:
        """Load the scripts into Redis (after a restart emptied its script cache).

        Pipelines send EVALSHA alone: checking for the scripts first would cost a round
        trip per write.
        """
        for script in (self._append, self._backlog):
            script.registered_client.script_load(script.script)

    def _args(self, run: list[Samples], window_s: int) -> list[bytes | str | int]:
        layout, fields, frags = [], [], []
        for samples in run:
            if samples.ids is None:
                layout.append(str(len(samples)))
                continue
            mine = ["null" if i is None else _quote(i) for i in samples.ids]
            fields.append(f"[{','.join(mine)}]")
            layout.append(f"{len(samples)}:{len(fields[-1])}")
            if window_s:
                frags += mine
        return [
            ",".join(layout),
            np.concatenate([s.x for s in run]).astype(np.float32, copy=False).tobytes(),
            np.concatenate([s.y for s in run]).astype(np.float32, copy=False).tobytes(),
            "".join(fields),
            "\n".join(frags),
        ]
