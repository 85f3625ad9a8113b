"""Per-device windows: keyed observations in, sliding windows out (for training and serving).

A device that sends one observation at a time, tagged with its `key` and a `seq` (sequence
number or timestamp), gets its windows built here. Each key keeps its newest observations
in a sorted set `sl:{model}:window:{key}` (score: seq; member: the seq as float64 then x as
float32, so equal x at two seqs stay two members), inside the model's hash tag.

Ingest appends a run of observations with one Lua script call (`lua/window_append.lua`,
atomic like the stream's own appends). For each observation in order, the script:

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
(the ingest hosts' clocks); past `max_devices` windows, those of the devices idle the
longest are deleted (counted as evicted), and entries older than the expiry are dropped.

Actors read the newest observations of the keys in a batch in one read-only script call
(`WindowStore.recent`, `lua/window_recent.lua`) to complete key-only prediction requests.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import redis

from streamlearn.contract.names import Names
from streamlearn.contract.records import Observations
from streamlearn.store import lua
from streamlearn.store.partitions import partition_of
from streamlearn.store.redis_client import evalsha, routed

# Observations per script call: a call blocks Redis while it runs, so keep each short.
CHUNK_OBSERVATIONS = 1000


@dataclass(frozen=True)
class WindowsAppended:
    """What one append did with its observations: training samples `added`; observations
    skipped as `duplicates` (key and seq already held) or as `late` (older than all the key
    keeps); observations with a target but `short` of a full window (nothing to train on);
    and the windows of idle devices `evicted` to keep at most `max_devices`."""

    added: int = 0
    duplicates: int = 0
    late: int = 0
    short: int = 0
    evicted: int = 0

    def __add__(self, other: WindowsAppended) -> WindowsAppended:
        return WindowsAppended(
            self.added + other.added,
            self.duplicates + other.duplicates,
            self.late + other.late,
            self.short + other.short,
            self.evicted + other.evicted,
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
        self, observations: Sequence[Observations], ttl_s: int, max_devices: int = 10_000
    ) -> WindowsAppended:
        """Add observations in order (exactly once by key and seq); train on full windows;
        keep the windows of at most `max_devices` devices (the most recently active).

        One round trip, one script call per `CHUNK_OBSERVATIONS`; safe to call again with
        the same observations after a failure (what was added is then skipped).
        """
        pipe = self.redis.pipeline(transaction=False)
        now = repr(float(self.clock()))
        calls = 0
        for part in observations:
            for start in range(0, len(part), CHUNK_OBSERVATIONS):
                chunk = slice(start, start + CHUNK_OBSERVATIONS)
                self._queue(pipe, part, chunk, (ttl_s, now, max_devices))
                calls += 1
        if not calls:
            return WindowsAppended()
        try:
            replies = pipe.execute()
        except redis.exceptions.NoScriptError:  # a restarted Redis lost it: load, go again
            self.redis.script_load(self._append.script)
            return self.append(observations, ttl_s, max_devices)  # what did run is skipped
        total = WindowsAppended()
        for reply in replies:
            total += WindowsAppended(*(int(v) for v in reply))
        return total

    def _queue(
        self,
        pipe: redis.client.Pipeline,
        obs: Observations,
        part: slice,
        policy: tuple[int, str, int],
    ) -> None:
        """One script call; `policy`: expiry (s), now (s), max devices."""
        ttl_s, now, max_devices = policy
        keys = obs.keys[part]
        slots = {k: i for i, k in enumerate(dict.fromkeys(keys), start=4)}
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
        ]
        all_keys = [self.stream, self.counter, self.index, *(self.key(k) for k in slots)]
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
