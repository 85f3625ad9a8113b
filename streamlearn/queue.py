"""The sample queue: a Redis Stream per model, read by the `learners` consumer group.

One stream entry per accepted MQTT message holds its samples packed as float32 arrays.
Entries are acknowledged by the learner only after the step that trained on them, and the
stream is trimmed only below what every group has delivered and acknowledged (a model's
challenger variants read the same stream in groups of their own, `learners:VNAME`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import redis

from streamlearn.appends import Appended, Appender
from streamlearn.names import Names
from streamlearn.payloads import Rejection, Samples

GROUP = "learners"


@dataclass(frozen=True)
class Entry:
    """One stream entry: its id and the samples it carries.

    `error` says why an entry holds no usable samples (undecodable, or deleted while
    pending): the learner dead-letters and acknowledges it instead of training on it.
    """

    id: bytes
    samples: Samples
    error: str | None = None


def _stream_id(value: bytes | str) -> tuple[int, int]:
    ms, seq = (value.decode() if isinstance(value, bytes) else value).split("-")
    return int(ms), int(seq)


def unpack(fields: dict[bytes, bytes], sample_shape: tuple[int, ...]) -> Samples:
    """An entry as `streamlearn.appends` writes it: `n` samples, `x` and `y` as float32
    bytes, `ids` a JSON list when the samples have ids, `c` the running sample count."""
    n = int(fields[b"n"])
    x = np.frombuffer(fields[b"x"], dtype=np.float32).reshape((n, *sample_shape))
    y = np.frombuffer(fields[b"y"], dtype=np.float32)
    ids = tuple(json.loads(fields[b"ids"])) if b"ids" in fields else None
    return Samples(x, y, ids)


class SampleQueue:
    """Producer and consumer side of one model's sample stream."""

    def __init__(
        self,
        client: redis.Redis,
        names: Names,
        sample_shape: tuple[int, ...],
        group: str = GROUP,
    ) -> None:
        self.redis = client
        self.names = names
        self.key = names.samples_key
        self.sample_shape = sample_shape
        self.group = group  # a challenger variant reads the same stream in its own group

    # -- producer (ingest) ---------------------------------------------------------------

    @cached_property
    def appender(self) -> Appender:
        return Appender(self.redis, self.names, self.sample_shape)

    def write(
        self,
        accepted: Iterable[Samples],
        rejected: Iterable[tuple[str, Rejection]] = (),
        *,
        dedup_window_s: int = 0,
        deadletter_maxlen: int = 10_000,
        deadletter_payload_bytes: int = 1024,
        backlog: bool = False,
    ) -> Appended:
        """Append accepted samples (one entry each) and dead letters in one round trip.

        Samples whose `id` was appended within `dedup_window_s` seconds are dropped, in the
        same atomic step as the append (`streamlearn.appends`); `backlog` also measures the
        samples the learners have not acknowledged yet.
        """
        accepted = list(accepted)
        pipe = self.redis.pipeline(transaction=False)
        calls = self.appender.append(pipe, accepted, dedup_window_s)
        for source, rejection in rejected:
            self._deadletter(pipe, source, rejection, deadletter_maxlen, deadletter_payload_bytes)
        if backlog:
            self.appender.backlog(pipe)
        try:
            replies = pipe.execute()
        except redis.exceptions.NoScriptError:  # no script ran; the dead letters are in
            self.appender.load()
            return self.write(accepted, dedup_window_s=dedup_window_s, backlog=backlog)
        return Appended(
            added=sum(int(r[0]) for r in replies[:calls]),
            duplicates=sum(int(r[1]) for r in replies[:calls]),
            backlog=int(replies[-1]) if backlog else None,
        )

    def _deadletter(
        self, pipe: redis.client.Pipeline, source: str, rej: Rejection, maxlen: int, keep: int
    ) -> None:
        fields = {
            "reason": rej.reason,
            "source": source,
            "payload": rej.payload[:keep],
            "size": len(rej.payload),
            "at": f"{time.time():.3f}",
        }
        pipe.xadd(self.names.deadletter_key, fields, maxlen=maxlen, approximate=False)

    def deadletters(self, count: int = 100) -> list[dict[str, str | bytes]]:
        """The most recent dead letters, oldest first (for tools and tests)."""
        rows = self.redis.xrevrange(self.names.deadletter_key, count=count)
        return [
            {k.decode(): (v if k == b"payload" else v.decode()) for k, v in f.items()}
            for _, f in reversed(rows)
        ]

    # -- consumer (learner) --------------------------------------------------------------

    def ensure_group(self) -> None:
        try:
            self.redis.xgroup_create(self.key, self.group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def read(self, consumer: str, count: int, block_ms: int | None) -> list[Entry]:
        """New entries for `consumer`; waits up to `block_ms` when none (None: don't wait)."""
        resp = self.redis.xreadgroup(
            self.group, consumer, {self.key: ">"}, count=count, block=block_ms
        )
        return [self._entry(eid, f) for _, rows in resp or () for eid, f in rows if f]

    def pending(self, consumer: str, count: int = 1000) -> list[Entry]:
        """All entries delivered to `consumer` but not acknowledged (to resume after a restart).

        Read `count` at a time; an entry deleted while pending comes back with an `error`.
        """
        entries: list[Entry] = []
        after: bytes | str = "0"
        while True:
            resp = self.redis.xreadgroup(self.group, consumer, {self.key: after}, count=count)
            rows = [row for _, rows in resp or () for row in rows]
            if not rows:
                return entries
            entries += [self._entry(eid, f) for eid, f in rows]
            after = rows[-1][0]

    def claim_stale(self, consumer: str, min_idle_ms: int, count: int = 1000) -> list[Entry]:
        """Take over every entry another (dead) consumer left pending for `min_idle_ms`."""
        entries: list[Entry] = []
        cursor: bytes | str = "0-0"
        while True:
            cursor, rows, *_ = self.redis.xautoclaim(
                self.key, self.group, consumer, min_idle_ms, cursor, count
            )
            entries += [self._entry(eid, f) for eid, f in rows if f]
            if cursor in (b"0-0", "0-0"):
                return entries

    def ack(self, ids: list[bytes], chunk: int = 10_000) -> None:
        for start in range(0, len(ids), chunk):
            self.redis.xack(self.key, self.group, *ids[start : start + chunk])

    def trim(self) -> None:
        """Drop entries that every group has delivered and acknowledged, nothing else."""
        floors = [self._floor(g) for g in self.redis.xinfo_groups(self.key)]
        if floors:
            floor = min(floors)
            self.redis.xtrim(self.key, minid=f"{floor[0]}-{floor[1]}", approximate=True)

    def _floor(self, group: dict) -> tuple[int, int]:
        """The oldest entry `group` still needs: its oldest pending one, else the next."""
        summary = self.redis.xpending(self.key, group["name"])
        if summary["pending"]:
            return _stream_id(summary["min"])
        ms, seq = _stream_id(group["last-delivered-id"])
        return ms, seq + 1

    def length(self) -> int:
        return self.redis.xlen(self.key)

    def _entry(self, eid: bytes, fields: dict[bytes, bytes] | None) -> Entry:
        try:
            if not fields:
                raise ValueError("deleted from the stream while pending")
            return Entry(eid, unpack(fields, self.sample_shape))
        except (KeyError, ValueError) as exc:  # one bad entry must not stop the learner
            empty = Samples(np.empty((0, *self.sample_shape), np.float32), np.empty(0, np.float32))
            return Entry(eid, empty, error=f"unusable stream entry: {exc!r}")
