"""The learner's writes to Redis: weights, acknowledgements and trims, promotion reports,
dead letters; each one that Redis refuses is tried again later, never fatal.

Redis full (`maxmemory` with `noeviction`) refuses the writes that take memory (a weights
blob, a report, a dead letter) and takes those that free it: reads and acknowledgements
run in scripts flagged `allow-oom` (`streamlearn.store.stream`), and trims need no memory. So
a learner with `checkpoint.dir` goes on training, checkpointing, acknowledging and
trimming while Redis is full, which frees memory for ingest; without one, entries are
acknowledged only with a published version, so they wait until the publish goes through.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from typing import Any

import redis

from streamlearn.config.policies import LearnerConfig
from streamlearn.contract.records import Rejection
from streamlearn.learner.variants import Promoter, Promotion
from streamlearn.store.partitions import PartitionedStream
from streamlearn.store.retries import RedisHealth, Retried
from streamlearn.store.sent import Sent
from streamlearn.store.stream import SampleStream
from streamlearn.store.weights import WeightsStore

log = logging.getLogger(__name__)

_TRIM_EVERY_S = 1.0


class LearnerWrites:
    """One learner's writes, their retry policies and what it reports about them."""

    def __init__(
        self,
        queue: SampleStream | PartitionedStream,
        store: WeightsStore,
        policy: LearnerConfig,
    ) -> None:
        self.queue = queue
        self.store = store
        self.policy = policy
        self.health = RedisHealth()
        retried = functools.partial(Retried, health=self.health, max_s=policy.retry_max_ms / 1000)
        self.publishing = retried("publish")
        self.acking = retried("ack")
        self.trimming = retried("trim")
        self.reporting = retried("status")
        self.reading = retried("read")
        self.unacked: list[bytes] = []  # entries done since the last durable point
        self.durable: list[bytes] = []  # entries the durable state covers, to acknowledge
        self._sent: tuple[int, Sent] | None = None  # the acknowledgement Redis is running
        self.durable_points = 0  # times the learner's state was made durable
        self.passed_groups: dict[str, str] = {}  # groups trimming no longer waits for
        self._last_trim = -math.inf

    def publish(self, after: int, blob: bytes) -> int | None:
        """Store `blob` as a new version above `after` (the store numbers it); None when
        Redis refused it (tried again once `publishing.due()`)."""
        published = self.publishing.result(lambda: self.store.publish(blob, after))
        return None if published is None else published[0]

    def made_durable(self) -> None:
        """The entries done so far are in the durable state: acknowledge them, a chunk
        now and the rest a chunk a turn (`acknowledge`); now and then trim the stream."""
        self.durable_points += 1
        self.durable += self.unacked
        self.unacked = []
        self.acknowledge()
        self.maybe_trim()

    def acknowledge(self) -> None:
        """Take the reply of the acknowledgement sent at the last call, then send the next
        chunk of `durable` entries: Redis acknowledges them while the learner trains. The
        learner calls this every turn; what Redis refuses is sent again after the backoff.

        A chunk holds two batches' worth of entries (an entry holds a sample at least), so
        that the acknowledgements keep up with the steps, each in about a step's time of
        Redis's (~0.5 us an entry): acknowledging a durable point's 12,800 one-sample
        entries at once held the next read up for 7 ms.
        """
        sent: Sent | None
        if self._sent is not None:
            (n, sent), self._sent = self._sent, None
            if self.acking.run(sent.result):
                del self.durable[:n]
        if not self.durable or not self.acking.due():
            return
        send = getattr(self.queue, "send_ack", None)
        if send is None:  # a partitioned stream: each partition in turn, waited for
            done = self.durable
            if self.acking.run(lambda: self.queue.ack(done)):
                del self.durable[: len(done)]
            return
        chunk = self.durable[: 2 * self.policy.max_batch]
        sent = self.acking.result(lambda: send(chunk))
        self._sent = None if sent is None else (len(chunk), sent)

    def acknowledged(self) -> None:
        """Acknowledge every durable entry now; returns early when Redis refuses one."""
        while self.durable or self._sent is not None:
            failures = self.acking.failures
            self.acknowledge()
            if self.acking.failures > failures or not self.acking.due():
                return

    def maybe_trim(self) -> None:
        """Trim the stream at most every `_TRIM_EVERY_S`, on the learner's own clock.

        Not only when acknowledging: a learner that caught up acknowledges no more, and
        the entries it acknowledged last would stay, holding memory a full Redis needs.
        """
        now = time.monotonic()
        if now - self._last_trim >= _TRIM_EVERY_S and self.trimming.due():
            self._last_trim = now
            self.trimming.run(self._trim)

    def _trim(self) -> None:
        passed = self.queue.trim(self.policy.stale_group_s, self.policy.max_stream_length)
        for group, why in passed.items():
            if group not in self.passed_groups:
                log.warning("trimming no longer waits for group %s: %s", group, why)
        for group in self.passed_groups.keys() - passed.keys():
            log.info("trimming waits for group %s again", group)
        self.passed_groups = passed

    def report_figures(self, promoter: Promoter, status: dict[str, Any]) -> Promotion | None:
        """Report to the promoter; when Redis refuses, the last standings it read stand."""
        if not self.reporting.due():
            return None
        return self.reporting.result(lambda: promoter.tick(status))

    def deadletter(self, reason: str, payload: bytes) -> None:
        """Dead-letter `payload`; when Redis refuses, log it instead (the entry is done)."""
        rejected = [("learner", Rejection(reason, payload))]
        try:
            self.queue.write([], rejected)
        except redis.RedisError as exc:
            self.health.failed("deadletter", exc)
            log.error("redis refused a dead letter (%s): %s %r", exc, reason, payload[:200])

    def status(self) -> dict[str, Any]:
        return {
            **self.health.status(),
            "unacknowledged_entries": len(self.unacked) + len(self.durable),
            "groups_not_waited_for": dict(self.passed_groups),
        }

    def metrics(self) -> dict[str, Any]:
        unacked = len(self.unacked) + len(self.durable)
        return {**self.health.metrics(), "unacknowledged_entries": unacked}
