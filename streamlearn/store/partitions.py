"""Partitioned streams: one model's samples spread over N streams, each in a hash slot of
its own (`ingest.partitions`), so that a Redis Cluster spreads one model over its masters.

Partition 0 is the model's own stream (`sl:{model}:samples`); partition i lives under the
hash tag `{model:pi}` (`Names.stream_key`), with its own count, dedup ids, device windows
and device index. A sample goes to the partition of its id (so a resent id meets its
earlier copy), a keyed observation to that of its key (so a device's observations stay
together, in order), and a message's samples without ids to the partition of the message's
bytes. Dead letters stay in the model's one dead-letter stream.

The learner reads all partitions (`PartitionedStream`; a worker of a multi-host learner,
its own): entry ids carry their partition's place among those read
(`b"2|1700000000000-0"`), so acknowledgements go back where the entries came from.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterable

import numpy as np
import redis

from streamlearn.config.app import ModelConfig
from streamlearn.contract.names import Names
from streamlearn.contract.records import Observations, Parsed, Rejection, Samples
from streamlearn.errors import ConfigError
from streamlearn.store.appends import Appended, Appender
from streamlearn.store.stream import GROUP, Entry, Packed, SampleStream

# Between sweeps of the partitions while waiting for entries: 5 ms, doubling up to 40 ms
# while none come (an idle learner of 3 partitions made 600 reads/s at a steady 5 ms).
_POLL_S, _POLL_MAX_S = 0.005, 0.04


def open_stream(
    client: redis.Redis,
    names: Names,
    model: ModelConfig,
    group: str = GROUP,
    only: list[int] | None = None,
) -> SampleStream | PartitionedStream:
    """`model`'s sample stream: one `SampleStream`, or all of its partitions (`only`
    those listed: a worker of a multi-host learner reads its own)."""
    chosen = range(model.ingest.partitions) if only is None else only
    if len(chosen) == 1:
        return SampleStream.of(client, names.of_partition(chosen[0]), model, group)
    return PartitionedStream(
        [SampleStream.of(client, names.of_partition(i), model, group) for i in chosen]
    )


def settle_layout(client: redis.Redis, names: Names, model: ModelConfig) -> int:
    """Record the model's partition count (`ingest:partitions`), or refuse to change it
    while samples wait unlearned in the old layout: a partition no longer read would strand
    them, and ids moved to other partitions would escape their dedup sets.

    Ingest calls this before its first message (retried while Redis is unavailable); a
    refusal is a `ConfigError` naming `ingest.partitions`. Returns the count.
    """
    key, n = names.key("ingest:partitions"), model.ingest.partitions
    recorded = client.get(key)
    if recorded is not None and int(recorded) != n:
        old = int(recorded)
        waiting = sum(
            Appender(client, names.of_partition(i), model.sample_shape, GROUP).backlog()
            for i in range(old)
        )
        if waiting:
            raise ConfigError(
                f"ingest.partitions: {n} in the config, but the stream in Redis has {old} "
                f"partitions holding {waiting} samples not learned yet; let the learner "
                "work them off (`streamlearn status`: pending 0), then change it"
            )
    client.set(key, n)
    return n


def partition_of(text: str | bytes, n: int) -> int:
    """The partition of an id, a key or a payload: stable across processes and restarts.

    >>> partition_of("dev-1", 1), partition_of("dev-1", 4) == partition_of(b"dev-1", 4)
    (0, True)
    """
    if n == 1:
        return 0
    data = text.encode() if isinstance(text, str) else text
    return zlib.crc32(data) % n


def split(parsed: Parsed, payload: bytes, n: int) -> list[tuple[int, Parsed]]:
    """The parts of one message, by partition; its dead letters go with the first part."""
    if n == 1:
        return [(0, parsed)]
    parts: dict[int, tuple[Samples | None, Observations | None]] = {}
    samples, observations = parsed.samples, parsed.observations
    if samples is not None:
        if samples.ids is None:
            parts[partition_of(payload, n)] = (samples, None)
        else:
            of = np.array([partition_of(i or payload, n) for i in samples.ids])
            for p in np.unique(of):
                rows = np.flatnonzero(of == p)
                ids = tuple(samples.ids[r] for r in rows)
                parts[int(p)] = (Samples(samples.x[rows], samples.y[rows], ids), None)
    if observations is not None:
        of = np.array([partition_of(k, n) for k in observations.keys])
        for p in np.unique(of):
            rows = np.flatnonzero(of == p)
            keys = tuple(observations.keys[r] for r in rows)
            part = Observations(
                keys, observations.seq[rows], observations.x[rows], observations.y[rows]
            )
            parts[int(p)] = (parts.get(int(p), (None, None))[0], part)
    if not parts:
        return [(0, parsed)]
    out: list[tuple[int, Parsed]] = []
    for p, (s, o) in sorted(parts.items()):
        out.append((p, Parsed(s, o, parsed.rejections if not out else [])))
    return out


class PartitionedStream:
    """The learner's side of N partitions, as one `SampleStream` (the same methods).

    A read sweeps the partitions, starting one further each time so that none waits behind
    another, and returns what all of them had; while none has anything, it sweeps again
    after 5 ms, then 10, 20 and every 40 ms until `block_ms` is over.
    """

    def __init__(self, parts: list[SampleStream]) -> None:
        self.parts = parts
        self.redis = parts[0].redis
        self.names = parts[0].names
        self.sample_shape = parts[0].sample_shape
        self.group = parts[0].group
        self._next = 0

    def ensure_group(self) -> None:
        for part in self.parts:
            part.ensure_group()

    def read_packed(self, consumer: str, count: int, block_ms: int | None) -> Packed:
        deadline = time.monotonic() + (block_ms or 0) / 1000
        pause = _POLL_S
        while True:
            packed = self._sweep(consumer, count)
            left = deadline - time.monotonic()
            if len(packed) or block_ms is None or left <= 0:
                return packed
            time.sleep(min(pause, left))
            pause = min(2 * pause, _POLL_MAX_S)  # idle, N reads a sweep: fewer sweeps

    def _sweep(self, consumer: str, count: int) -> Packed:
        n = len(self.parts)
        order = [(self._next + k) % n for k in range(n)]
        self._next = (self._next + 1) % n
        got = [(i, self.parts[i].read_packed(consumer, count, None)) for i in order]
        return _merge([(i, p) for i, p in got if len(p)], self.sample_shape)

    def pending(self, consumer: str, count: int = 1000) -> list[Entry]:
        return [_tag(i, e) for i, p in enumerate(self.parts) for e in p.pending(consumer, count)]

    def claim_stale(self, consumer: str, min_idle_ms: int, count: int = 1000) -> list[Entry]:
        return [
            _tag(i, e)
            for i, p in enumerate(self.parts)
            for e in p.claim_stale(consumer, min_idle_ms, count)
        ]

    def ack(self, ids: list[bytes]) -> None:
        by_part: dict[int, list[bytes]] = {}
        for tagged in ids:
            tag, _, eid = tagged.partition(b"|")
            by_part.setdefault(int(tag), []).append(eid)
        for part, eids in by_part.items():
            self.parts[part].ack(eids)

    def trim(self, stale_group_s: float | None = None, max_unread: int | None = None) -> dict:
        passed: dict[str, str] = {}
        for part in self.parts:
            passed.update(part.trim(stale_group_s, max_unread))
        return passed

    def write(
        self, accepted: Iterable[Samples], rejected: Iterable[tuple[str, Rejection]] = ()
    ) -> Appended:
        """The learner's dead letters, to the model's one dead-letter stream. Samples come
        through ingest, which splits each message by partition (`split`)."""
        if list(accepted):
            raise ValueError("a partitioned stream takes samples through ingest (`split`)")
        return self.parts[0].write([], rejected)

    def backlog(self) -> int:
        return sum(part.backlog() for part in self.parts)

    def length(self) -> int:
        return sum(part.length() for part in self.parts)


def _tag(part: int, entry: Entry) -> Entry:
    return Entry(b"%d|" % part + entry.id, entry.samples, entry.error)


def _merge(parts: list[tuple[int, Packed]], sample_shape: tuple[int, ...]) -> Packed:
    if not parts:
        return Packed.empty(sample_shape)
    ids = [b"%d|" % i + eid for i, p in parts for eid in p.ids]
    unusable = [(b"%d|" % i + eid, why) for i, p in parts for eid, why in p.unusable]
    offsets = np.cumsum([0] + [int(p.ends[-1]) if len(p.ends) else 0 for _, p in parts])[:-1]
    ends = np.concatenate([p.ends + off for (_, p), off in zip(parts, offsets, strict=True)])
    x = np.concatenate([p.x for _, p in parts])
    y = np.concatenate([p.y for _, p in parts])
    return Packed(ids, ends.astype(np.int64), x, y, unusable)
