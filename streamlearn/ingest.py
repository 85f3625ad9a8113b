"""Ingest: MQTT sample messages -> validated, packed stream entries in Redis.

paho's network thread only enqueues (and sends the PUBACKs queued for it: the inbox,
`streamlearn.ingest_inbox`); the loop here validates a run of messages, appends them to
Redis in one round trip and only then lets them be acknowledged, so a crash at any point
leaves unacknowledged messages with the broker, never a lost sample. A redelivered message
adds nothing twice: sample ids are de-duplicated in the same atomic step as the append
(`streamlearn.appends`).

Keyed observations (models with a window) take the same path: they go to their keys'
windows in Redis (`streamlearn.windows`, exactly once by key and seq) before the message is
acknowledged, and every full window with a target becomes a training sample.

Back-pressure: while more samples than `max_backlog_samples` wait for the learner, the
loop stops taking messages. Unacknowledged messages fill the client's receive maximum, and
the broker then holds the rest in the persistent session until the loop resumes. QoS 0
messages, which the broker does not hold, wait in the bounded inbox or are dropped.

Redis failures: one that passes (down, out of memory, busy, loading, ...) is retried with
a capped backoff for as long as it lasts, nothing acknowledged meanwhile. One that will
not pass (a Redis error reply, e.g. a key of the wrong type) is found out message by
message: each message of the run is written alone, and one that Redis refuses alone is
dead-lettered with Redis's reason (kind `redis_refused`) and acknowledged, so it can never
crash-loop the worker; the others are stored.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import redis
from redis.backoff import ExponentialBackoff
from redis.exceptions import (
    ClusterDownError,
    MasterDownError,
    NoPermissionError,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    TryAgainError,
)

from streamlearn.appends import Appended
from streamlearn.config import IngestConfig
from streamlearn.ingest_inbox import Delivery, IngestInbox
from streamlearn.payloads import Parsed, PayloadParser, Rejection
from streamlearn.queue import SampleQueue
from streamlearn.windows import WindowsAppended, WindowStore

log = logging.getLogger(__name__)

# Redis errors that pass: retried with backoff for as long as they last. NOPERM too: the
# deployment's ACL is wrong, not the message, so the messages wait until it is fixed.
TRANSIENT = (
    redis.ConnectionError,  # also LOADING, and authentication
    redis.TimeoutError,
    OutOfMemoryError,
    ReadOnlyError,
    TryAgainError,
    ClusterDownError,
    MasterDownError,
    NoPermissionError,
    NoScriptError,
)
# Error codes of replies that pass, for which redis-py has no class.
TRANSIENT_CODES = frozenset({"BUSY", "MISCONF", "NOREPLICAS", "UNBLOCKED"})


def transient(exc: redis.RedisError) -> bool:
    """Will `exc` pass by itself? Redis's own error code says (the reply's first word)."""
    if isinstance(exc, TRANSIENT):
        return True
    return isinstance(exc, redis.ResponseError) and reply(exc).split(" ", 1)[0] in TRANSIENT_CODES


def reply(exc: redis.RedisError) -> str:
    """Redis's error reply, without what redis-py's pipelines put before it."""
    return str(exc).rpartition(" of pipeline caused error: ")[2]


class _Refused(Exception):
    """Redis refused a write for good; `deadletters_written`: the run's dead letters went
    in with the part of the write that ran."""

    def __init__(self, error: redis.RedisError, deadletters_written: bool) -> None:
        super().__init__(reply(error))
        self.error = error
        self.deadletters_written = deadletters_written


T = TypeVar("T")


@dataclass
class IngestCounters:
    messages: int = 0
    samples: int = 0
    duplicates: int = 0
    rejected: int = 0
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    redis_errors: int = 0
    pauses: int = 0
    observations: int = 0  # keyed observations stored in their windows
    duplicate_observations: int = 0
    late_observations: int = 0  # older than everything their key keeps
    short_windows: int = 0  # had a target, but fewer than `window` observations known
    evicted_windows: int = 0  # windows of idle devices deleted to keep max_devices
    refused: int = 0  # messages Redis refused alone: dead-lettered


class Ingest:
    """Moves sample messages from an MQTT subscription into a `SampleQueue`.

    For a model with a window, keyed observations go to `windows` (by default a
    `WindowStore` on the queue's Redis).
    """

    def __init__(
        self,
        parser: PayloadParser,
        sample_queue: SampleQueue,
        cfg: IngestConfig,
        windows: WindowStore | None = None,
        max_run: int = 500,
        linger_s: float = 0.005,
        poll_s: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.parser = parser
        self.queue = sample_queue
        self.cfg = cfg
        self.max_run = max_run
        self.linger_s = linger_s
        self.poll_s = poll_s
        self.clock = clock
        self.counters = IngestCounters()
        model = parser.model
        if windows is None and model.window is not None:
            redis_client, names = sample_queue.redis, sample_queue.names
            windows = WindowStore(redis_client, names, model.window, model.inputs)
        self.windows = windows
        self.backlog: int | None = None  # unacknowledged samples, as last measured
        self._holding = False
        self._measured_at = -math.inf
        self._added = 0  # samples written since the backlog was last measured
        self.inbox = IngestInbox(cfg)
        # paho's callbacks, for the client that subscribes to the samples
        self.on_message = self.inbox.on_message
        self.on_pre_connect = self.inbox.on_pre_connect
        self._backoff = ExponentialBackoff(cap=2.0, base=0.05)

    def metrics(self) -> dict[str, float | int | None]:
        """For `streamlearn.metrics` (Prometheus): names ending in `_total` are counters."""
        c = self.counters
        return {
            "messages_total": c.messages,
            "samples_total": c.samples,
            "duplicate_samples_total": c.duplicates,
            "deadletters_total": dict(c.rejected_by_reason),
            "redis_errors_total": c.redis_errors,
            "back_pressure_pauses_total": c.pauses,
            "observations_total": c.observations,
            "duplicate_observations_total": c.duplicate_observations,
            "late_observations_total": c.late_observations,
            "short_window_observations_total": c.short_windows,
            "evicted_windows_total": c.evicted_windows,
            "qos0_dropped_total": self.inbox.dropped,
            "backlog_samples": self.backlog,
            "holding": int(self._holding),
            "inbox_messages": len(self.inbox),
            "inbox_bytes": self.inbox.bytes,
        }

    # -- the loop --------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None, max_messages: int | None = None) -> int:
        """Process messages until `stop` is set or `max_messages` are done; returns the count."""
        stop = stop or threading.Event()
        done = 0
        while not stop.is_set() and (max_messages is None or done < max_messages):
            if self._held_back(stop):
                continue
            limit = self.max_run if max_messages is None else max_messages - done
            batch = self.inbox.take(limit, self.linger_s)
            if batch and self._process(batch, stop):
                done += len(batch)
        self.inbox.ack_now()
        return done

    def _held_back(self, stop: threading.Event) -> bool:
        """Back-pressure: True (after a pause) while the learner is too far behind."""
        if not self._holding and self.backlog is not None:
            return False
        if self.clock() - self._measured_at >= self.poll_s:
            measured = self._retry(self.queue.appender.backlog, stop)
            if measured is not None:
                self._measured(measured)
        if not self._holding:
            return False
        self.inbox.ack_now()
        stop.wait(self.poll_s)
        return True

    def _measured(self, backlog: int) -> None:
        limit = self.cfg.max_backlog_samples
        if (backlog > limit) != self._holding:
            self._holding = backlog > limit
            if self._holding:
                self.counters.pauses += 1
                log.warning(
                    "back-pressure on: %d samples unprocessed > max_backlog_samples=%d; "
                    "holding messages at the broker",
                    backlog,
                    limit,
                )
            else:
                log.info("back-pressure off: %d samples unprocessed", backlog)
        self.backlog, self._measured_at = backlog, self.clock()

    def _process(self, batch: list[Delivery], stop: threading.Event) -> bool:
        """Validate and append, then queue the PUBACKs; False if stopped before Redis took it."""
        parsed = [(msg.topic, self.parser.parse_message(msg.payload)) for _, _, msg in batch]
        adding = sum(len(p.samples or ()) + len(p.observations or ()) for _, p in parsed)
        measure = self._measure_due(adding)
        try:
            result = self._retry(lambda: self._write(parsed, measure=measure), stop)
        except _Refused as exc:
            log.warning("redis refused a run of %d messages (%s): one by one", len(batch), exc)
            result = self._isolate(batch, parsed, exc.deadletters_written, stop)
        if result is None:
            log.warning("stopping: %d messages left unacknowledged for redelivery", len(batch))
            return False
        self.inbox.acknowledge(batch)
        written, windowed, stored = result
        if written.backlog is not None:
            self._measured(written.backlog)
        c = self.counters
        c.messages += len(batch)
        c.samples += written.added + windowed.added
        c.duplicates += written.duplicates
        c.observations += stored - windowed.duplicates - windowed.late
        c.duplicate_observations += windowed.duplicates
        c.late_observations += windowed.late
        c.short_windows += windowed.short
        c.evicted_windows += windowed.evicted
        for _, p in parsed:
            self._count_rejections(p.rejections)
        return True

    def _count_rejections(self, rejections: list[Rejection]) -> None:
        c = self.counters
        c.rejected += len(rejections)
        for rejection in rejections:
            c.rejected_by_reason[rejection.kind] = c.rejected_by_reason.get(rejection.kind, 0) + 1

    def _isolate(
        self,
        batch: list[Delivery],
        parsed: list[tuple[str, Parsed]],
        deadletters_written: bool,
        stop: threading.Event,
    ) -> tuple[Appended, WindowsAppended, int] | None:
        """Write each message alone; dead-letter those Redis refuses alone.

        A refused call wrote nothing (the scripts check every key before writing), and
        what the run's other calls wrote is skipped when written again (ids and seqs seen),
        so only samples without ids of such a run may be stored twice.
        """
        added, dups = 0, 0
        windowed, stored = WindowsAppended(), 0
        refused: list[tuple[str, Rejection]] = []
        for (_, _, msg), (topic, p) in zip(batch, parsed, strict=True):
            one = [(topic, p)]
            rejections = [] if deadletters_written else [(topic, r) for r in p.rejections]
            try:
                result = self._retry(lambda o=one, r=rejections: self._write(o, r), stop)
            except _Refused as exc:
                reason = f"redis refused it: {exc}"
                log.warning("message dead-lettered: %s", reason)
                refused.append((topic, Rejection(reason, msg.payload, "redis_refused")))
                continue
            if result is None:
                return None
            written, more, n = result
            added, dups = added + written.added, dups + written.duplicates
            windowed, stored = windowed + more, stored + n
        self.counters.refused += len(refused)
        self._count_rejections([r for _, r in refused])
        write = lambda: self._write_samples([], refused, False)  # noqa: E731
        if refused and self._retry(write, stop, refusals_pass=True) is None:
            return None
        return Appended(added, dups), windowed, stored

    def _measure_due(self, adding: int) -> bool:
        """Measure the backlog with this write? Every `poll_s`, or sooner when what was
        added since the last measurement could have crossed the limit."""
        self._added += adding
        if (
            self.clock() - self._measured_at < self.poll_s
            and (self.backlog or 0) + self._added <= self.cfg.max_backlog_samples
        ):
            return False
        self._added = 0
        return True

    def _write(
        self,
        parsed: list[tuple[str, Parsed]],
        rejected: list[tuple[str, Rejection]] | None = None,
        measure: bool = False,
    ) -> tuple[Appended, WindowsAppended, int]:
        """Observations first, so the backlog measured with the samples counts them too;
        `rejected`: the dead letters to write (default: those of `parsed`).

        Returns what was appended, what the windows did, and how many observations were
        offered. Retried whole after a failure: observations already added are skipped.
        """
        observed = [p.observations for _, p in parsed if p.observations is not None]
        offered = sum(map(len, observed))
        windowed = WindowsAppended()
        if observed:
            assert self.windows is not None  # only a model with a window accepts them
            try:
                windowed = self.windows.append(
                    observed, self.cfg.window_ttl_s, self.cfg.max_devices
                )
            except redis.RedisError as exc:
                if transient(exc):
                    raise
                raise _Refused(exc, deadletters_written=False) from exc
        if rejected is None:
            rejected = [(topic, r) for topic, p in parsed for r in p.rejections]
        accepted = [p.samples for _, p in parsed if p.samples is not None]
        try:
            return self._write_samples(accepted, rejected, measure), windowed, offered
        except redis.RedisError as exc:
            if transient(exc):
                raise
            raise _Refused(exc, deadletters_written=True) from exc

    def _write_samples(
        self, accepted: list, rejected: list[tuple[str, Rejection]], measure: bool
    ) -> Appended:
        return self.queue.write(
            accepted,
            rejected,
            dedup_window_s=self.cfg.dedup_window_s,
            max_dedup_ids=self.cfg.max_dedup_ids,
            deadletter_maxlen=self.cfg.deadletter_maxlen,
            deadletter_payload_bytes=self.cfg.deadletter_payload_bytes,
            backlog=measure,
        )

    def _retry(
        self, call: Callable[[], T], stop: threading.Event, refusals_pass: bool = False
    ) -> T | None:
        """`call()`, retried with backoff while Redis is unavailable; None if stopped.

        A Redis error that will not pass is raised, unless `refusals_pass` (the last write
        of a run, its dead letters: nothing is left to give up).
        """
        failures = 0
        while True:
            try:
                return call()
            except (redis.RedisError, _Refused) as exc:
                if not (refusals_pass or isinstance(exc, redis.RedisError) and transient(exc)):
                    raise
                failures += 1
                self.counters.redis_errors += 1
                delay = self._backoff.compute(failures)
                log.warning("redis unavailable (%s); retry %d in %.2f s", exc, failures, delay)
                if stop.wait(delay):
                    return None
