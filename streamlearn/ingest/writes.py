"""Ingest's writes: a run of parsed messages into Redis, each message whole or not at all.

Each script call of a write (a run's samples, up to `CHUNK_SAMPLES` each) and each dead
letter is applied whole or not at all, and only what Redis did not take is written again:
a partly applied write stores nothing twice, samples without ids included. A Redis error
that passes (down, busy, loading, ...) is retried with a capped backoff for as long as it
lasts, nothing acknowledged meanwhile. Out of memory, the run is written in halves (a
command's own bytes count against maxmemory: a run larger than the memory left would be
refused for ever), down to one message retried with backoff; success doubles the pieces
again. One that will not pass (an error reply, e.g. a key of the wrong type) is narrowed
down by halves too: the message Redis refuses alone is dead-lettered with Redis's reason
(kind `redis_refused`) and acknowledged, so it can never crash-loop the worker.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

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

from streamlearn.config.ingest import IngestConfig
from streamlearn.contract.payloads import Parsed, Rejection
from streamlearn.contract.records import FieldCounts, Observations
from streamlearn.contract.schemas import LISTED_REASONS
from streamlearn.ingest.inbox import Delivery
from streamlearn.store.stream import SampleStream
from streamlearn.store.windows import Refused, WindowStore

log = logging.getLogger("streamlearn.ingest")  # its warnings are the ingest worker's

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

T = TypeVar("T")


def transient(exc: redis.RedisError) -> bool:
    """Will `exc` pass by itself? Redis's own error code says (the reply's first word)."""
    if isinstance(exc, TRANSIENT):
        return True
    return isinstance(exc, redis.ResponseError) and reply(exc).split(" ", 1)[0] in TRANSIENT_CODES


def reply(exc: redis.RedisError) -> str:
    """Redis's error reply, without what redis-py's pipelines put before it."""
    return str(exc).rpartition(" of pipeline caused error: ")[2]


@dataclass
class IngestCounters:
    messages: int = 0
    samples: int = 0
    duplicates: int = 0
    unremembered_ids: int = 0  # appended past their sender's dedup share: not remembered
    rejected: int = 0
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    redis_errors: int = 0
    pauses: int = 0
    observations: int = 0  # keyed observations stored in their windows
    duplicate_observations: int = 0
    late_observations: int = 0  # older than everything their key keeps
    short_windows: int = 0  # had a target, but fewer than `window` observations known
    evicted_windows: int = 0  # windows deleted to keep max_devices
    fields: FieldCounts = field(default_factory=FieldCounts)  # of named payloads

    def count_rejections(self, rejections: list[Rejection]) -> None:
        self.rejected += len(rejections)
        for rejection in rejections:
            kind = rejection.kind
            self.rejected_by_reason[kind] = self.rejected_by_reason.get(kind, 0) + 1


class RunMessage:
    """A message of the run being written, and what of it Redis does not hold yet."""

    def __init__(self, msg: Delivery, parsed: Parsed) -> None:
        self.msg = msg
        self.parsed = parsed
        self.observed = parsed.observations is None  # in their windows
        self.appended = parsed.samples is None  # in the stream
        self.rejections = list(parsed.rejections)  # dead letters not written yet

    @property
    def done(self) -> bool:
        return self.observed and self.appended and not self.rejections


class RunWriter:
    """Writes runs of messages to `stream` (and observations to `windows`), counting into
    `counters`; a backlog measured with a write goes to `on_backlog`."""

    def __init__(
        self,
        stream: SampleStream,
        windows: WindowStore | None,
        cfg: IngestConfig,
        counters: IngestCounters,
        max_run: int,
        on_backlog: Callable[[int], None],
    ) -> None:
        self.stream = stream
        self.windows = windows
        self.cfg = cfg
        self.counters = counters
        self.max_run = max_run
        self.on_backlog = on_backlog
        self._backoff = ExponentialBackoff(cap=2.0, base=0.05)
        self._piece = max_run  # messages per write: halved while Redis is full
        self.waiting: Callable[[], object] = lambda: None  # each backoff: still alive (/livez)

    def store(self, messages: list[RunMessage], measure: bool, stop: threading.Event) -> bool:
        """Write `messages` in pieces of up to `_piece`, each write only what Redis does not
        hold yet; False if stopped first.

        A piece Redis refuses for lack of memory is halved (its command's bytes count
        against maxmemory too), down to one message retried with backoff; a piece refused
        for good is halved down to the one message to dead-letter. Success doubles the
        piece again, up to `max_run`.
        """
        failures = 0
        pending = messages
        reloaded = False
        while pending:
            piece = pending[: self._piece]
            error = self._write_piece(piece, measure)
            measure = measure and error is not None  # measured without what failed: again
            pending = [m for m in pending if not m.done]
            if error is None:
                self._piece, failures = min(self.max_run, 2 * self._piece), 0
                continue
            if isinstance(error, NoScriptError) and not reloaded:
                reloaded = True  # a fresh or restarted Redis: the scripts are loaded now
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
                self.waiting()
                if stop.wait(delay):
                    return False
        return True

    def retry(self, call: Callable[[], T], stop: threading.Event) -> T | None:
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
                self.waiting()
                if stop.wait(delay):
                    return None

    def _refuse(self, message: RunMessage, error: redis.RedisError) -> None:
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
        self.counters.count_rejections([refusal])

    def _write_piece(self, piece: list[RunMessage], measure: bool) -> redis.RedisError | None:
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
            observations = cast(  # a message not yet observed has observations
                list[Observations], [m.parsed.observations for m in observing]
            )
            cfg = self.cfg
            try:
                windowed = self.windows.append(
                    observations,
                    cfg.window_ttl_s,
                    cfg.max_devices,
                    # the shared samples topic names no sender: max_devices bounds it
                    senders=[
                        None if m.msg.topic == self.windows.names.samples_topic else m.msg.topic
                        for m in observing
                    ],
                    max_keys_per_sender=cfg.max_keys_per_sender,
                    max_seq_jump=cfg.window_max_seq_jump,
                )
            except redis.RedisError as exc:
                return exc
            for m in observing:
                m.observed = True
            for i, refused in _by_part(windowed.refused).items():
                m = observing[i]
                m.rejections.append(_refusal(refused, m.msg.payload))
                self.counters.count_rejections(m.rejections[-1:])
            c = self.counters
            offered = sum(len(o) for o in observations if o is not None)
            c.samples += windowed.added
            c.observations += offered - windowed.duplicates - windowed.late
            c.observations -= len(windowed.refused)
            c.duplicate_observations += windowed.duplicates
            c.late_observations += windowed.late
            c.short_windows += windowed.short
            c.evicted_windows += windowed.evicted
        appending = [m for m in piece if not m.appended]  # each with samples
        letters = [(m, r) for m in piece for r in m.rejections]
        if not appending and not letters:
            return None
        pipe = self.stream.redis.pipeline(transaction=False)
        accepted = [s for m in appending if (s := m.parsed.samples) is not None]
        calls = self.stream.stage(
            pipe,
            accepted,
            [(m.msg.topic, rejection) for m, rejection in letters],
            self.cfg.dedup_window_s,
            self.cfg.max_dedup_ids,
            backlog=measure,
            dedup_share=self.cfg.dedup_sender_share,
        )
        try:
            replies = pipe.execute(raise_on_error=False)
        except redis.RedisError as exc:
            return exc
        return self._took(appending, calls, letters, replies)

    def _took(
        self,
        appending: list[RunMessage],
        calls: list[int],
        letters: list[tuple[RunMessage, Rejection]],
        replies: Iterable[Any],
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
                self.counters.unremembered_ids += int(call[2])
            at += n
        refused = [(m, r) for m, r in letters if isinstance(next(replies), redis.RedisError)]
        for m in {id(m): m for m, _ in letters}.values():
            m.rejections = [r for n, r in refused if n is m]
        measured = next(replies, None)
        if measured is not None and not isinstance(measured, redis.RedisError):
            self.on_backlog(int(measured))
        if any(isinstance(e, NoScriptError) for e in errors):
            with contextlib.suppress(redis.RedisError):  # else the retry finds out
                self.stream.load_scripts()
        return next((e for e in errors if transient(e)), errors[0] if errors else None)


def _by_part(refused: tuple[Refused, ...]) -> dict[int, list[Refused]]:
    """The observations the window store refused, by the message (part) they came in."""
    parts: dict[int, list[Refused]] = {}
    for r in refused:
        parts.setdefault(r.part, []).append(r)
    return parts


def _refusal(refused: list[Refused], payload: bytes) -> Rejection:
    """One dead letter for a message's refused observations: the first few reasons."""
    shown = "; ".join(r.reason for r in refused[:LISTED_REASONS])
    more = f" (and {len(refused) - LISTED_REASONS} more)" if len(refused) > LISTED_REASONS else ""
    return Rejection(shown + more, payload, refused[0].kind)
