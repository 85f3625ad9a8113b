"""Per-device windows: keyed observations in, sliding windows out (for training and serving).

A device that sends one observation at a time, tagged with its `key` and a `seq` (sequence
number or timestamp), gets its windows built here. Each key keeps its newest observations
in a sorted set `sl:{model}:window:{key}` (score: seq; member: the seq as float64 then x as
float32, so equal x at two seqs stay two members), inside the model's hash tag.

Ingest appends a run of observations with one Lua script call (`lua/window_append.lua`,
atomic like the stream's own appends). For each observation in order, the script:

- refuses it when its key is new and its sender (the topic it came on, `senders`)
  already holds `max_keys_per_sender` windows, or when its seq is more than
  `max_seq_jump` ahead of its key's newest (one message must not freeze a window): the
  caller dead-letters what `WindowsAppended.refused` lists;
- skips it when its key already holds that seq (a redelivered message adds nothing twice),
  or when it is older than everything the key keeps (too late: its window is gone);
- adds it, trims the key to its newest `2 * window` observations, and refreshes its expiry,
  so a device that goes quiet leaves nothing behind;
- when it carries a target `y`, and the key holds at least `window` observations with
  seq <= its seq, adds one training sample: those `window` observations in seq order, and
  `y`. Out-of-order arrivals are so windowed by seq, not by arrival. Fewer known: nothing to
  train on yet (counted, not an error).

The training samples of a call go to the samples stream as one entry, written by the
stream's own `lua/entry.lua`, keeping its running count consistent.

The script reads and checks every key before it writes any, so a call that fails (a key
of the wrong type) has written nothing. Devices are bounded: the sorted set
`sl:{model}:ingest:devices` holds each window's key by the time of its newest observation
(the ingest hosts' clocks), and entries older than the expiry are dropped. Senders are
bounded too: the hash `sl:{model}:ingest:owners` names the sender that made each window
(a digest of its topic, `sender_id`), `sl:{model}:ingest:senders` counts the windows each
sender holds, and `sl:{model}:ingest:by:{sender}` orders them as the device index does. A
flood of new keys from one sender is refused past its own bound (`max_keys_per_sender`),
and past `max_devices` windows a sender's new one replaces its own idlest while it holds
others (counted as evicted); only a sender's first window (a new device's) takes the
idlest of all. So no sender's flood evicts other senders' windows.

Actors read the newest observations of the keys in a batch in one read-only script call
(`WindowStore.recent`, `lua/window_recent.lua`) to complete key-only prediction requests.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import redis

from streamlearn.contract.names import Names
from streamlearn.contract.records import Kind, Observations
from streamlearn.store import lua
from streamlearn.store.partitions import partition_of
from streamlearn.store.redis_client import evalsha, routed

# Observations per script call: a call blocks Redis while it runs, so keep each short.
CHUNK_OBSERVATIONS = 1000
NO_JUMP_BOUND = 2.0**54  # further than any two seqs (each within +-2**53) lie apart


def sender_id(topic: str) -> str:
    """A sender's name in Redis: a digest of the topic, 24 characters however long it is.

    >>> sender_id("tele/dev-1/SENSOR")
    '20fd5a3526b584534c168173'
    """
    return hashlib.blake2b(topic.encode(), digest_size=12).hexdigest()


@dataclass(frozen=True)
class Refused:
    """An observation the store refused: row `row` of the `part`-th `Observations` of an
    append, why (`kind`, a dead letter's) and the reason in words."""

    part: int
    row: int
    kind: Kind
    reason: str


@dataclass(frozen=True)
class WindowsAppended:
    """What one append did with its observations: training samples `added`; observations
    skipped as `duplicates` (key and seq already held) or as `late` (older than all the key
    keeps); observations with a target but `short` of a full window (nothing to train on);
    the windows of idle devices `evicted` to keep at most `max_devices`; and the
    observations `refused` (a sender past its keys, a seq too far ahead)."""

    added: int = 0
    duplicates: int = 0
    late: int = 0
    short: int = 0
    evicted: int = 0
    refused: tuple[Refused, ...] = ()

    def __add__(self, other: WindowsAppended) -> WindowsAppended:
        return WindowsAppended(
            self.added + other.added,
            self.duplicates + other.duplicates,
            self.late + other.late,
            self.short + other.short,
            self.evicted + other.evicted,
            self.refused + other.refused,
        )


class WindowStore:
    """One model's per-key observation windows in Redis (of one stream partition; with
    `partitions`, an actor's reads go to each key's partition, `streamlearn.store.partitions`)."""

    def __init__(
        self,
        client: redis.Redis,
        names: Names,
        window: int,
        inputs: int,
        clock: Callable[[], float] = time.time,
        partitions: int = 1,
    ) -> None:
        self.redis = client
        self.names = names
        self.partitions = partitions
        self.window = window
        self.inputs = inputs
        self.keep = 2 * window  # a little more than a window: tolerates reordering
        self.stream = names.samples_key
        self.counter = names.ingest_count_key
        self.index = names.stream_key("ingest:devices")
        self.owners = names.stream_key("ingest:owners")
        self.senders = names.stream_key("ingest:senders")
        self.by_sender = names.stream_key("ingest:by:")  # then a sender: its windows by time
        self.clock = clock
        self._append = lua.load(client, "window_append")
        self._recent = lua.load(client, "window_recent")
        # A stored observation: its seq, then its x (the seq keeps equal x at two seqs apart).
        self._member = np.dtype([("seq", "<f8"), ("x", "<f4", (inputs,))])

    def key(self, device: str) -> str:
        """The sorted set of `device`'s observations.

        >>> WindowStore(redis.Redis(), Names("m"), 4, 1).key("dev-1")
        'sl:{m}:window:dev-1'
        """
        names = self.names
        if self.partitions > 1:
            names = names.of_partition(partition_of(device, self.partitions))
        return names.stream_key(f"window:{device}")

    # -- ingest --------------------------------------------------------------------------

    def append(
        self,
        observations: Sequence[Observations],
        ttl_s: int,
        max_devices: int = 10_000,
        *,
        senders: Sequence[str | None] | None = None,
        max_keys_per_sender: int | None = None,
        max_seq_jump: float = NO_JUMP_BOUND,
    ) -> WindowsAppended:
        """Add observations in order (exactly once by key and seq); train on full windows;
        keep the windows of at most `max_devices` devices (the most recently active).

        `senders[i]` is the topic `observations[i]` came on (default: one sender for all):
        it may make at most `max_keys_per_sender` windows (default: no bound); None is a
        topic that names no sender (the shared samples topic), bound by `max_devices` alone. A seq
        more than `max_seq_jump` ahead of its key's newest is refused too.

        One round trip, one script call per `CHUNK_OBSERVATIONS`; safe to call again with
        the same observations after a failure (what was added is then skipped, what was
        refused is refused again).
        """
        pipe = self.redis.pipeline(transaction=False)
        per_sender = 2**53 if max_keys_per_sender is None else max_keys_per_sender
        policy = (ttl_s, repr(float(self.clock())), max_devices, per_sender, repr(max_seq_jump))
        calls: list[tuple[int, int]] = []  # (part, first row) of each script call
        unbounded = (*policy[:3], 2**53, policy[4])
        for p, part in enumerate(observations):
            topic = "" if senders is None else senders[p]
            sender, bound = sender_id(topic or ""), policy if topic is not None else unbounded
            for start in range(0, len(part), CHUNK_OBSERVATIONS):
                chunk = slice(start, start + CHUNK_OBSERVATIONS)
                self._queue(pipe, part, chunk, sender, bound)
                calls.append((p, start))
        if not calls:
            return WindowsAppended()
        try:
            replies = pipe.execute()
        except redis.exceptions.NoScriptError:  # a restarted Redis lost it: load, go again
            self.redis.script_load(self._append.script)
            return self.append(  # what did run is skipped
                observations,
                ttl_s,
                max_devices,
                senders=senders,
                max_keys_per_sender=max_keys_per_sender,
                max_seq_jump=max_seq_jump,
            )
        total = WindowsAppended()
        for (p, start), reply in zip(calls, replies, strict=True):
            refused = tuple(
                self._refused(observations[p], p, start, line.decode().split(" "), policy)
                for line in reply[5]
            )
            added, duplicates, late, short, evicted = (int(v) for v in reply[:5])
            total += WindowsAppended(added, duplicates, late, short, evicted, refused)
        return total

    def _refused(
        self,
        obs: Observations,
        part: int,
        start: int,
        said: list[str],
        policy: tuple[int, str, int, int, str],
    ) -> Refused:
        """What the script said of a refused observation, in words."""
        row = start + int(said[0]) - 1
        key, seq = obs.keys[row], _number(float(obs.seq[row]))
        if said[1] == "too_many_keys":
            reason = (
                f"key {key!r}: a new window, and its sender holds {said[2]} "
                f"(max_keys_per_sender={policy[3]})"
            )
            return Refused(part, row, "too_many_keys", reason)
        reason = (
            f"key {key!r}: seq {seq} is more than window_max_seq_jump={_number(float(policy[4]))} "
            f"ahead of its newest, {_number(float(said[2]))}"
        )
        return Refused(part, row, "out_of_range", reason)

    def _queue(
        self,
        pipe: redis.client.Pipeline,
        obs: Observations,
        part: slice,
        sender: str,
        policy: tuple[int, str, int, int, str],
    ) -> None:
        """One script call of one sender's observations; `policy`: expiry (s), now (s), max
        devices, max keys per sender, max seq jump."""
        ttl_s, now, max_devices, per_sender, jump = policy
        keys = obs.keys[part]
        slots = {k: i for i, k in enumerate(dict.fromkeys(keys), start=6)}
        seq = obs.seq[part]
        members = np.empty(len(keys), dtype=self._member)
        members["seq"], members["x"] = seq, obs.x[part]
        y = obs.y[part]
        args = [
            self.window,
            self.keep,
            ttl_s,
            members.dtype.itemsize,
            ",".join(str(slots[k]) for k in keys),
            "\n".join(repr(float(s)) for s in seq),
            members.tobytes(),
            np.nan_to_num(y).astype("<f4").tobytes(),
            "".join("0" if np.isnan(v) else "1" for v in y),
            now,
            max_devices,
            per_sender,
            jump,
            sender,
            self.by_sender,
        ]
        all_keys = [
            self.stream,
            self.counter,
            self.index,
            self.owners,
            self.senders,
            *(self.key(k) for k in slots),
        ]
        evalsha(pipe, self._append.sha, all_keys, *args)

    # -- actors --------------------------------------------------------------------------

    def recent(self, requests: Sequence[tuple[str, float | None]], count: int) -> list[np.ndarray]:
        """For each (key, seq): its newest `count` observations before `seq` (all, when None),
        oldest first, as (n <= count, inputs) float32; one script call for all."""
        if count == 0 or not requests:
            return [np.empty((0, self.inputs), np.float32) for _ in requests]
        if self.partitions == 1:
            return [self._inputs(reply) for reply in self._recent_of(requests, count)]
        by_part: dict[int, list[int]] = {}  # one script call per partition (one slot each)
        for i, (device, _) in enumerate(requests):
            by_part.setdefault(partition_of(device, self.partitions), []).append(i)
        out: list[np.ndarray] = [np.empty(0)] * len(requests)
        for rows in by_part.values():
            replies = self._recent_of([requests[i] for i in rows], count)
            for i, reply in zip(rows, replies, strict=True):
                out[i] = self._inputs(reply)
        return out

    def _inputs(self, reply: bytes) -> np.ndarray:
        return np.frombuffer(reply, dtype=self._member)["x"].astype(np.float32)

    def _recent_of(self, requests: Sequence[tuple[str, float | None]], count: int) -> list:
        keys = [self.key(device) for device, _ in requests]
        tops = ["+inf" if seq is None else f"({float(seq)!r}" for _, seq in requests]
        # EVALSHA_RO: read-only key permissions suffice (an actor's Redis user has no more).
        args = [self._recent.sha, len(keys), *keys, count, *tops]
        try:
            return self.redis.execute_command("EVALSHA_RO", *args, **routed(self.redis, keys[0]))
        except redis.exceptions.NoScriptError:  # a restarted Redis lost it
            self.redis.script_load(self._recent.script)
            return self.redis.execute_command("EVALSHA_RO", *args, **routed(self.redis, keys[0]))


def _number(value: float) -> int | float:
    """A seq as a client wrote it: 17, not 17.0."""
    return int(value) if value.is_integer() else value
