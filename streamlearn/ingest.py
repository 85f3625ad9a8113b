"""Ingest: MQTT sample messages -> validated, packed stream entries in Redis.

paho's network thread only enqueues (and sends the PUBACKs queued for it); the loop here
validates a run of messages, appends them to Redis in one round trip and only then lets
them be acknowledged, so a crash at any point leaves unacknowledged messages with the
broker, never a lost sample. A redelivered message adds nothing twice: sample ids are
de-duplicated in the same atomic step as the append (`streamlearn.appends`).

Keyed observations (models with a window) take the same path: they go to their keys'
windows in Redis (`streamlearn.windows`, exactly once by key and seq) before the message is
acknowledged, and every full window with a target becomes a training sample.

Back-pressure: while more samples than `max_backlog_samples` wait for the learner, the
loop stops taking messages. Unacknowledged messages fill the client's receive maximum, and
the broker then holds the rest in the persistent session until the loop resumes.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import paho.mqtt.client as mqtt
import redis
from redis.backoff import ExponentialBackoff
from redis.exceptions import (
    ClusterDownError,
    MasterDownError,
    OutOfMemoryError,
    ReadOnlyError,
    TryAgainError,
)

from streamlearn.appends import Appended
from streamlearn.config import IngestConfig
from streamlearn.payloads import Observations, PayloadParser, Rejection, Samples
from streamlearn.queue import SampleQueue
from streamlearn.windows import WindowsAppended, WindowStore

log = logging.getLogger(__name__)

# Redis errors that pass: retried with backoff for as long as they last.
TRANSIENT = (
    redis.ConnectionError,
    redis.TimeoutError,
    OutOfMemoryError,
    ReadOnlyError,
    TryAgainError,
    ClusterDownError,
    MasterDownError,
)

Delivery = tuple[int, mqtt.Client, mqtt.MQTTMessage]  # (connection generation, client, msg)
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
        self._inbox: deque[Delivery] = deque()
        self._arrived = threading.Event()
        self._wanted = max_run
        self._generation = 0
        self._ack_lock = threading.Lock()
        self._acks: deque[Delivery] = deque()  # in Redis, to acknowledge
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
            "backlog_samples": self.backlog,
            "holding": int(self._holding),
            "inbox_messages": len(self._inbox),
        }

    # -- paho callbacks (network thread): hand over and return at once ---------------------

    def on_message(self, client: mqtt.Client, _userdata: object, msg: mqtt.MQTTMessage) -> None:
        if self._acks:
            self._flush_acks()
        self._inbox.append((self._generation, client, msg))
        waiting = len(self._inbox)
        if waiting == 1 or waiting >= self._wanted:
            self._arrived.set()

    def on_pre_connect(self, _client: mqtt.Client, _userdata: object) -> None:
        """Before each reconnect: the broker redelivers what the old connection left
        unacknowledged, so its messages are written but never acknowledged (an ack could
        reach a packet id the broker has since given to another message)."""
        with self._ack_lock:
            self._generation += 1

    def _flush_acks(self) -> None:
        """PUBACK what Redis holds, from paho's thread as it delivers the next message (or
        from the loop when none comes): each ack is a syscall that hands the GIL over, which
        from the loop's thread would cost two thread switches per message. Messages of an
        older connection are left for the broker to redeliver."""
        while True:
            try:
                generation, client, msg = self._acks.popleft()
            except IndexError:
                return
            if generation == self._generation:
                client.ack(msg.mid, msg.qos)

    # -- the loop --------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None, max_messages: int | None = None) -> int:
        """Process messages until `stop` is set or `max_messages` are done; returns the count."""
        stop = stop or threading.Event()
        done = 0
        while not stop.is_set() and (max_messages is None or done < max_messages):
            if self._held_back(stop):
                continue
            batch = self._take(self.max_run if max_messages is None else max_messages - done)
            if batch and self._process(batch, stop):
                done += len(batch)
        self._ack_now()
        return done

    def _take(self, limit: int) -> list[Delivery]:
        """Up to `limit` messages: wait for the first, then up to `linger_s` for more.

        Long runs keep the Redis round trips, and the hand-overs of the GIL between this
        thread and paho's, few per message.
        """
        self._wanted = limit
        if not self._inbox:
            self._ack_now()  # no message is coming to carry the acks
        if not self._wait_for(1, 0.1):
            return []
        self._wait_for(limit, self.linger_s)
        batch: list[Delivery] = []
        while len(batch) < limit:
            try:
                batch.append(self._inbox.popleft())
            except IndexError:
                break
        return batch

    def _wait_for(self, count: int, timeout_s: float) -> bool:
        """Wait until `count` messages are in the inbox, at most `timeout_s`; True if any."""
        if len(self._inbox) < count:
            self._arrived.clear()
            if len(self._inbox) < count:
                self._arrived.wait(timeout_s)
        return bool(self._inbox)

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
        self._ack_now()
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
        accepted: list[Samples] = []
        observed: list[Observations] = []
        rejected: list[tuple[str, Rejection]] = []
        for _, _, msg in batch:
            parsed = self.parser.parse_message(msg.payload)
            if parsed.samples is not None:
                accepted.append(parsed.samples)
            if parsed.observations is not None:
                observed.append(parsed.observations)
            if parsed.rejections:
                rejected.extend((msg.topic, r) for r in parsed.rejections)
        measure = self._measure_due(sum(map(len, accepted)) + sum(map(len, observed)))
        result = self._retry(lambda: self._write(accepted, observed, rejected, measure), stop)
        if result is None:
            log.warning("stopping: %d messages left unacknowledged for redelivery", len(batch))
            return False
        self._acks.extend(batch)
        written, windowed = result
        if written.backlog is not None:
            self._measured(written.backlog)
        c = self.counters
        c.messages += len(batch)
        c.samples += written.added + windowed.added
        c.duplicates += written.duplicates
        skipped = windowed.duplicates + windowed.late
        c.observations += sum(map(len, observed)) - skipped
        c.duplicate_observations += windowed.duplicates
        c.late_observations += windowed.late
        c.short_windows += windowed.short
        c.rejected += len(rejected)
        for _, rejection in rejected:
            kind = reason_kind(rejection.reason)
            c.rejected_by_reason[kind] = c.rejected_by_reason.get(kind, 0) + 1
        return True

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
        accepted: list[Samples],
        observed: list[Observations],
        rejected: list[tuple[str, Rejection]],
        measure: bool,
    ) -> tuple[Appended, WindowsAppended]:
        """Observations first, so the backlog measured with the samples counts them too.

        Retried whole after a failure: observations already added are then skipped.
        """
        windowed = WindowsAppended()
        if observed:
            assert self.windows is not None  # only a model with a window accepts them
            windowed = self.windows.append(observed, self.cfg.window_ttl_s)
        return self._write_samples(accepted, rejected, measure), windowed

    def _write_samples(
        self, accepted: list[Samples], rejected: list[tuple[str, Rejection]], measure: bool
    ) -> Appended:
        return self.queue.write(
            accepted,
            rejected,
            dedup_window_s=self.cfg.dedup_window_s,
            deadletter_maxlen=self.cfg.deadletter_maxlen,
            deadletter_payload_bytes=self.cfg.deadletter_payload_bytes,
            backlog=measure,
        )

    def _ack_now(self) -> None:
        with self._ack_lock:  # a reconnect does not change the generation meanwhile
            self._flush_acks()

    def _retry(self, call: Callable[[], T], stop: threading.Event) -> T | None:
        """`call()`, retried with backoff while Redis is unavailable; None if stopped."""
        failures = 0
        while True:
            try:
                return call()
            except TRANSIENT as exc:
                failures += 1
                self.counters.redis_errors += 1
                delay = self._backoff.compute(failures)
                log.warning("redis unavailable (%s); retry %d in %.2f s", exc, failures, delay)
                if stop.wait(delay):
                    return None


_REASON_KINDS = (
    ("invalid JSON", "invalid_json"),
    ("exceeds max_payload_bytes", "oversize"),
    ("exceed max_samples_per_message", "too_many_samples"),
    ("finite", "non_finite"),
    ("float32 range", "non_finite"),
    ("shape", "wrong_shape"),
    ("different lengths", "wrong_shape"),
    ("Extra inputs", "unknown_field"),
    ("valid number", "wrong_type"),
    ("valid string", "wrong_type"),
    ("valid list", "wrong_type"),
    ("JSON object", "wrong_type"),
    ("y must", "bad_target"),
    ("need a model with a window", "no_window"),
    ("Field required", "missing_field"),
)


def reason_kind(reason: str) -> str:
    """A dead-letter reason's kind: a label with few values, for metrics."""
    return next((kind for text, kind in _REASON_KINDS if text in reason), "other")
