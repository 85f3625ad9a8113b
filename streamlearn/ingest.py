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

Redis failures: each script call of a write (a run's samples, up to `CHUNK_SAMPLES` each)
and each dead letter is applied whole or not at all, and only what Redis did not take is
written again: a partly applied write stores nothing twice, samples without ids included.
One that passes (down, busy, loading, ...) is retried with a capped backoff for as long as
it lasts, nothing acknowledged meanwhile. Out of memory, the run is written in halves (a
command's own bytes count against maxmemory: a run larger than the memory left would be
refused for ever), down to one message retried with backoff; success doubles the pieces
again. One that will not pass (an error reply, e.g. a key of the wrong type) is narrowed
down by halves too: the message Redis refuses alone is dead-lettered with Redis's reason
(kind `redis_refused`) and acknowledged, so it can never crash-loop the worker.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import paho.mqtt.client as mqtt
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

from streamlearn.appends import per_call
from streamlearn.config import IngestConfig
from streamlearn.ingest_inbox import Delivery, IngestInbox
from streamlearn.payloads import Parsed, PayloadParser, Rejection
from streamlearn.queue import SampleQueue
from streamlearn.windows import WindowStore

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


class _Message:
    """A message of the run being written, and what of it Redis does not hold yet."""

    def __init__(self, msg: mqtt.MQTTMessage, parsed: Parsed) -> None:
        self.msg = msg
        self.parsed = parsed
        self.observed = parsed.observations is None  # in their windows
        self.appended = parsed.samples is None  # in the stream
        self.rejections = list(parsed.rejections)  # dead letters not written yet

    @property
    def done(self) -> bool:
        return self.observed and self.appended and not self.rejections


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
        self._piece = max_run  # messages per write: halved while Redis is full

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
        """Validate and store, then queue the PUBACKs; False if stopped before Redis took it
        all (what it took is acknowledged)."""
        messages = [_Message(msg, self.parser.parse_message(msg.payload)) for *_, msg in batch]
        adding = sum(
            len(m.parsed.samples or ()) + len(m.parsed.observations or ()) for m in messages
        )
        stored = self._store(messages, self._measure_due(adding), stop)
        done = [delivery for delivery, m in zip(batch, messages, strict=True) if m.done]
        self.inbox.acknowledge(done)
        self.counters.messages += len(done)
        for m in messages:
            if m.done:
                self._count_rejections(m.parsed.rejections)
        if not stored:
            log.warning(
                "stopping: %d messages left unacknowledged for redelivery", len(batch) - len(done)
            )
        return stored

    def _count_rejections(self, rejections: list[Rejection]) -> None:
        c = self.counters
        c.rejected += len(rejections)
        for rejection in rejections:
            c.rejected_by_reason[rejection.kind] = c.rejected_by_reason.get(rejection.kind, 0) + 1

    def _store(self, messages: list[_Message], measure: bool, stop: threading.Event) -> bool:
        """Write `messages` in pieces of up to `_piece`, each write only what Redis does not
        hold yet; False if stopped first.

        A piece Redis refuses for lack of memory is halved (its command's bytes count
        against maxmemory too), down to one message retried with backoff; a piece refused
        for good is halved down to the one message to dead-letter. Success doubles the
        piece again, up to `max_run`.
        """
        failures = 0
        pending = messages
        while pending:
            piece = pending[: self._piece]
            error = self._write_piece(piece, measure)
            measure = False
            pending = [m for m in pending if not m.done]
            if error is None:
                self._piece, failures = min(self.max_run, 2 * self._piece), 0
                continue
            self.counters.redis_errors += 1
            failed = [m for m in piece if not m.done]
            if len(failed) > 1 and (isinstance(error, OutOfMemoryError) or not transient(error)):
                self._piece = len(failed) // 2
                log.warning(
                    "redis refused %d messages (%s): %d at a time", len(failed), error, self._piece
                )
            elif not transient(error):
                self._refuse(failed[0], error)
            else:
                failures += 1
                delay = self._backoff.compute(failures)
                log.warning("redis unavailable (%s); retry %d in %.2f s", error, failures, delay)
                if stop.wait(delay):
                    return False
        return True

    def _refuse(self, message: _Message, error: redis.RedisError) -> None:
        """Give up what Redis refuses of `message` alone: a write refused for good would
        refuse again, and stall or crash-loop the worker. The refused call wrote nothing
        (the scripts check every key before writing); the message is dead-lettered with
        Redis's reason. Only its dead letters refused: they are logged instead."""
        if message.observed and message.appended:
            log.error(
                "redis refused dead letters (%s), logged instead: %s",
                reply(error),
                [(r.kind, r.reason) for r in message.rejections],
            )
            message.rejections = []
            return
        reason = f"redis refused it: {reply(error)}"
        log.warning("message dead-lettered: %s", reason)
        refusal = Rejection(reason, message.msg.payload, "redis_refused")
        message.observed = message.appended = True
        message.rejections.append(refusal)
        self.counters.refused += 1
        self._count_rejections([refusal])

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

    def _write_piece(self, piece: list[_Message], measure: bool) -> redis.RedisError | None:
        """Write what `piece` has left and mark what Redis took; the error, if any (one
        that passes first: what will not pass is given up only when nothing else failed).

        Observations first (a call again skips those stored), so the backlog measured with
        the samples counts them too. Then one round trip: each script call of samples and
        each dead letter succeeds or fails alone, and only what failed is written again, so
        a partly applied write adds nothing twice, samples without ids included.
        """
        observing = [m for m in piece if not m.observed]
        if observing:
            assert self.windows is not None  # only a model with a window accepts them
            observations = [m.parsed.observations for m in observing]
            try:
                windowed = self.windows.append(
                    observations, self.cfg.window_ttl_s, self.cfg.max_devices
                )
            except redis.RedisError as exc:
                return exc
            for m in observing:
                m.observed = True
            c = self.counters
            offered = sum(len(o) for o in observations if o is not None)
            c.samples += windowed.added
            c.observations += offered - windowed.duplicates - windowed.late
            c.duplicate_observations += windowed.duplicates
            c.late_observations += windowed.late
            c.short_windows += windowed.short
            c.evicted_windows += windowed.evicted
        appending = [m for m in piece if not m.appended]  # each with samples
        letters = [(m, r) for m in piece for r in m.rejections]
        if not appending and not letters:
            return None
        pipe = self.queue.redis.pipeline(transaction=False)
        accepted = [s for m in appending if (s := m.parsed.samples) is not None]
        self.queue.appender.append(pipe, accepted, self.cfg.dedup_window_s, self.cfg.max_dedup_ids)
        for m, rejection in letters:
            self.queue.deadletter(
                pipe,
                m.msg.topic,
                rejection,
                self.cfg.deadletter_maxlen,
                self.cfg.deadletter_payload_bytes,
            )
        if measure:
            self.queue.appender.backlog(pipe)
        try:
            replies = pipe.execute(raise_on_error=False)
        except redis.RedisError as exc:
            return exc
        return self._took(appending, per_call(accepted), letters, replies)

    def _took(
        self,
        appending: list[_Message],
        calls: list[int],
        letters: list[tuple[_Message, Rejection]],
        replies: list,
    ) -> redis.RedisError | None:
        """Mark what the pipeline's `replies` say Redis took; the error to act on, if any."""
        errors = [r for r in replies if isinstance(r, redis.RedisError)]
        replies = iter(replies)
        at = 0
        for n in calls:
            call = next(replies)
            if not isinstance(call, redis.RedisError):
                for m in appending[at : at + n]:
                    m.appended = True
                self.counters.samples += int(call[0])
                self.counters.duplicates += int(call[1])
            at += n
        refused = [(m, r) for m, r in letters if isinstance(next(replies), redis.RedisError)]
        for m in {id(m): m for m, _ in letters}.values():
            m.rejections = [r for n, r in refused if n is m]
        measured = next(replies, None)
        if measured is not None and not isinstance(measured, redis.RedisError):
            self._measured(int(measured))
        if any(isinstance(e, NoScriptError) for e in errors):
            with contextlib.suppress(redis.RedisError):  # else the retry finds out
                self.queue.appender.load()
        return next((e for e in errors if transient(e)), errors[0] if errors else None)

    def _retry(self, call: Callable[[], T], stop: threading.Event) -> T | None:
        """`call()`, retried with backoff while Redis is unavailable; None if stopped."""
        failures = 0
        while True:
            try:
                return call()
            except redis.RedisError as exc:
                if not transient(exc):
                    raise
                failures += 1
                self.counters.redis_errors += 1
                delay = self._backoff.compute(failures)
                log.warning("redis unavailable (%s); retry %d in %.2f s", exc, failures, delay)
                if stop.wait(delay):
                    return None
