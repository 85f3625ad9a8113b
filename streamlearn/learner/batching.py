"""Micro-batches from the sample stream: drain, pad to a bucket, read ahead in a thread.

A drain takes everything available up to `max_batch` samples, waiting at most
`max_wait_ms` for more once one arrived. The batch is padded to the smallest bucket that
holds it: padding rows get sample weight 0 and real rows bucket/n, so the weighted mean a
Keras loss takes is the exact mean over the real samples, and a compiled step only ever
sees a few shapes. A `Prefetcher` drains in a background thread, so reading and decoding
the next batch overlaps the current step. Nothing here acknowledges an entry: the learner
does, once the state that learned it is durable.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import numpy as np
import redis

from streamlearn.config.policies import LearnerConfig
from streamlearn.contract.records import Samples
from streamlearn.errors import StreamlearnError
from streamlearn.online.batch import Batch, padded
from streamlearn.store.partitions import PartitionedStream
from streamlearn.store.retries import Retried
from streamlearn.store.stream import Packed, SampleStream

_POLL_S = 0.002  # between reads while waiting for more samples
_IDLE_BLOCK_MS = 100  # a read blocks this long for the next entry of an empty stream
_READ_BATCHES = 4


def samples_batch(samples: Samples, buckets: tuple[int, ...], multiclass: bool = False) -> Batch:
    """A padded batch of in-memory samples (benchmarks and tests)."""
    return padded([samples.x], [samples.y], buckets, () if multiclass else (1,))


@dataclass
class _Chunk:
    """The usable entries of one read (`Packed`) and how far the batches took them."""

    packed: Packed
    at: int = 0  # rows taken so far
    first: int = 0  # first entry not yet done


class _Carry:
    """Samples read but not yet trained on; an entry may span two batches."""

    def __init__(self) -> None:
        self._chunks: deque[_Chunk] = deque()
        self.available = 0
        self.skipped: list[bytes] = []  # unusable entries, already dead-lettered

    def add(self, packed: Packed) -> None:
        if packed.ids:
            self._chunks.append(_Chunk(packed))
            self.available += int(packed.ends[-1])

    def take(self, limit: int) -> tuple[list[np.ndarray], list[np.ndarray], list, list]:
        """Up to `limit` rows, the entries they complete and every entry they touch."""
        xs, ys, done, touched = [], [], self.skipped, []
        self.skipped = []
        while self._chunks:
            c = self._chunks[0]
            p = c.packed
            stop = min(int(p.ends[-1]), c.at + limit)
            if stop > c.at:
                xs.append(p.x[c.at : stop])
                ys.append(p.y[c.at : stop])
                last = int(np.searchsorted(p.ends, stop - 1, side="right"))  # holds row stop-1
                touched += p.ids[c.first : last + 1]
            finished = int(np.searchsorted(p.ends, stop, side="right"))
            done += p.ids[c.first : finished]
            limit -= stop - c.at
            self.available -= stop - c.at
            c.at, c.first = stop, finished
            if c.first < len(p.ids):
                break  # `limit` reached inside this chunk
            self._chunks.popleft()
        return xs, ys, done, touched


class Drainer:
    """Turns the stream into padded batches for one consumer of the `learners` group."""

    def __init__(
        self,
        stream: SampleStream | PartitionedStream,
        consumer: str,
        policy: LearnerConfig,
        buckets: tuple[int, ...],
        y_tail: tuple,
        *,
        stale_after_ms: int = 30_000,
        deadletter: Callable[[str, bytes], None] | None = None,
    ) -> None:
        self.stream = stream
        self.consumer = consumer
        self.policy = policy
        self.buckets = buckets
        self.y_tail = y_tail
        self.stale_after_ms = stale_after_ms
        self.deadletter = deadletter or (lambda reason, payload: None)
        self._carry = _Carry()
        self._per_entry = 1.0  # running mean of samples per entry, to size reads
        self._more = False  # the last read was full: the stream holds more (a backlog)
        self._ahead: Callable[[], int] | None = None  # a read sent, its reply not taken
        self._next_claim = time.monotonic() + stale_after_ms / 2000
        # the most samples a batch takes: `max_batch`, less while the larger steps are not
        # traced yet (`Learner.warm_up`), so that a first batch never waits on a trace
        self.limit = policy.max_batch

    def resume(self) -> int:
        """Take back this consumer's pending entries and stale ones of dead consumers."""
        entries = self.stream.pending(self.consumer)
        entries += self.stream.claim_stale(self.consumer, self.stale_after_ms)
        self._accept(Packed.of(entries, self.stream.sample_shape))
        return len(entries)

    def drain(self, idle_block_ms: int | None = 100) -> Batch | None:
        """Up to `limit` samples: block up to `idle_block_ms` for the first (None: not at
        all), then wait `max_wait_ms` for more."""
        limit = self.limit
        self.land()
        if time.monotonic() >= self._next_claim:
            self._next_claim = time.monotonic() + self.stale_after_ms / 2000
            stale = self.stream.claim_stale(self.consumer, self.stale_after_ms)
            self._accept(Packed.of(stale, self.stream.sample_shape))
        if self._carry.available == 0:
            self._first(limit, idle_block_ms)
            if self._carry.available == 0:
                return self._take(0) if self._carry.skipped else None
        # Waiting for more reads without blocking, then sleeps: Redis ends a blocked read
        # that times out only at its next timer tick (up to 100 ms at its default hz of 10),
        # which made a 20 ms wait cost ~60 ms of freshness.
        deadline = time.monotonic() + self.policy.max_wait_ms / 1000
        while self._carry.available < limit:
            got = self._read(limit - self._carry.available, None)
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if not got:
                time.sleep(min(_POLL_S, left))
        batch = self._take(limit)
        if self._more and self._carry.available < limit:
            self._send_ahead(limit)
        return batch

    def land(self) -> None:
        """Take in the read sent ahead, if any: Redis delivered its entries to this
        consumer, so they must reach the carry (else they wait for a restart)."""
        if self._ahead is not None:
            ahead, self._ahead = self._ahead, None
            ahead()

    def _send_ahead(self, limit: int) -> None:
        """Under a backlog, the next batch's read, sent now: Redis runs it (on another
        core) while this batch trains, and the next drain takes its reply. At most
        `limit` entries, so that Redis answers within about one step."""
        send = getattr(self.stream, "send_read", None)  # a partitioned stream: no
        if send is None:
            return
        count = min(self._count(_READ_BATCHES * limit - self._carry.available), limit)
        sent = send(self.consumer, count)
        # one with `send_read` is a SampleStream
        self._ahead = lambda: self._took(
            cast(SampleStream, self.stream).packed(sent.result()), count
        )

    def _first(self, limit: int, block_ms: int | None) -> int:
        """A read for the first entry, waiting up to `block_ms`. Redis ends a blocked read
        that times out only at its next timer tick (up to 100 ms at its default hz of 10),
        so a shorter wait (the learner's, until an unpublished step may be published)
        polls instead: a blocked read of 10 ms held the learner until the next message,
        and the steps replayed since the last publish never reached the actors before it."""
        if block_ms is None or block_ms >= _IDLE_BLOCK_MS:
            return self._read(limit, block_ms)
        deadline = time.monotonic() + block_ms / 1000
        while True:
            got = self._read(limit, None)
            left = deadline - time.monotonic()
            if got or left <= 0:
                return got
            time.sleep(min(_POLL_S, left))

    def _read(self, samples: int, block_ms: int | None) -> int:
        # Reads of a few batches at once spread the cost of a round trip.
        count = self._count(max(samples, _READ_BATCHES * self.policy.max_batch))
        return self._took(self.stream.read_packed(self.consumer, count, block_ms), count)

    def _count(self, samples: int) -> int:
        """Entries to read for about `samples` samples."""
        return max(1, math.ceil(samples / self._per_entry))

    def _took(self, packed: Packed, count: int) -> int:
        if packed.ids:
            got = int(packed.ends[-1]) / len(packed.ids)
            self._per_entry = max(1.0, 0.8 * self._per_entry + 0.2 * got)
        self._more = len(packed) >= count
        self._accept(packed)
        return len(packed)

    def _accept(self, packed: Packed) -> None:
        for eid, reason in packed.unusable:
            self.deadletter(reason, json.dumps({"entries": [eid.decode()]}).encode())
            self._carry.skipped.append(eid)
        self._carry.add(packed)

    def _take(self, limit: int) -> Batch:
        xs, ys, done, touched = self._carry.take(limit)
        if not xs:
            empty = np.zeros((0,), np.float32)
            return Batch(empty, empty, empty, 0, done, [])
        batch = padded(xs, ys, self.buckets, self.y_tail)
        batch.done, batch.entries = done, touched
        return batch


class Prefetcher:
    """Runs `drain(block_ms)` in a background thread, up to `depth` batches ahead of the
    consumer. `idle` is set as soon as a drain finds the stream empty: the consumer has
    caught up (the learner publishes then), not merely outrun the read-ahead.

    `stop()` joins the thread; batches it drained but nobody took stay for the next
    `start()`, so no entry it read is forgotten (they stay pending in Redis until trained).
    With a `retry` policy, a Redis error never ends the thread: it is logged and counted,
    and the next drain comes after the policy's backoff.
    """

    def __init__(
        self,
        drain: Callable[[int | None], Batch | None],
        depth: int,
        retry: Retried | None = None,
    ) -> None:
        self._drain = drain
        self.depth = depth
        self._retry = retry  # a Redis error: logged, then the next drain after a backoff
        self._ready: deque[Batch] = deque()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.idle = threading.Event()  # set once a drain found the stream empty

    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="prefetch", daemon=True)
        self._thread.start()

    def get(self, timeout_s: float) -> Batch | None:
        """The next batch, or None when none came within `timeout_s`."""
        with self._cond:
            if not self._ready and self._error is None:
                self._cond.wait(timeout_s)
            if self._ready:
                batch = self._ready.popleft()
                self._cond.notify_all()
                return batch
            if self._error is not None:
                raise StreamlearnError(f"prefetch thread failed: {self._error!r}") from self._error
            return None

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    batch = self._drain(None)  # what the stream holds now
                    if batch is None:
                        self.idle.set()  # caught up: then wait for the next entry
                        batch = self._drain(_IDLE_BLOCK_MS)
                except redis.RedisError as exc:
                    if self._retry is None:
                        raise
                    self._retry.failed(exc)
                    self._stop.wait(self._retry.delay())
                    continue
                if self._retry is not None:
                    self._retry.succeeded()
                if batch is None:
                    continue
                self.idle.clear()
                with self._cond:
                    while len(self._ready) >= self.depth and not self._stop.is_set():
                        self._cond.wait(0.1)
                    self._ready.append(batch)  # kept even when stopping: it is pending
                    self._cond.notify_all()
        except Exception as exc:  # surfaces in the consumer's thread, at its next get()
            with self._cond:
                self._error = exc
                self._cond.notify_all()
