"""Ingest: MQTT sample messages -> validated, packed stream entries in Redis.

paho's network thread only enqueues (the inbox, `streamlearn.ingest.inbox`); the loop
here validates a run of messages, appends them to Redis in one round trip and only then
acknowledges them, so a crash at any point leaves unacknowledged messages with the broker,
never a lost sample. A redelivered message adds nothing twice: sample ids are de-duplicated
in the same atomic step as the append (`streamlearn.store.stream`).

Keyed observations (models with a window) take the same path: they go to their keys'
windows in Redis (`streamlearn.store.windows`, exactly once by key and seq) before the message is
acknowledged, and every full window with a target becomes a training sample.

Back-pressure: while more samples than `max_backlog_samples` wait for the learner, the
loop stops taking messages. Unacknowledged messages fill the client's receive maximum, and
the broker then holds the rest in the persistent session until the loop resumes. QoS 0
messages, which the broker does not hold, wait in the bounded inbox or are dropped.

Each message's topic decides how it is judged: the model's samples topic as above, and
`samples/{client}` too, its sample ids in that client's de-duplication namespace; a
topic of one of the model's `sources` the same way, its device key taken from the topic
level the source names; `labels` and `labels/{client}` as labels joined to the
predictions kept for that sender (`streamlearn.store.labels`), whose samples take the
same exactly-once path.

Redis failures (`streamlearn.ingest.writes`): each message of a run is written whole or
not at all, retried while Redis is unavailable or full; a message Redis refuses for good is
dead-lettered and acknowledged.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import threading
import time
from collections.abc import Callable

import redis

from streamlearn.config.ingest import IngestConfig
from streamlearn.contract.entities import is_own_state_echo
from streamlearn.contract.names import sample_id, sender_problem
from streamlearn.contract.payloads import PayloadParser
from streamlearn.contract.records import FieldCounts, Parsed, Rejection
from streamlearn.errors import PayloadError
from streamlearn.ingest.assembly import Assembly
from streamlearn.ingest.inbox import Delivery, IngestInbox
from streamlearn.ingest.sparkplug import Message, SparkplugIngest
from streamlearn.ingest.writes import IngestCounters, RunMessage, RunWriter
from streamlearn.store.fields import FieldTotals
from streamlearn.store.held import Reading
from streamlearn.store.labels import LabelJoiner, LabelMessage
from streamlearn.store.partitions import PartitionedStream, settle_layout, split
from streamlearn.store.pending import PendingStore
from streamlearn.store.stream import SampleStream
from streamlearn.store.windows import WindowStore

log = logging.getLogger(__name__)

FIELDS_LOG_EVERY_S = 10.0  # a failing write of the field counts: one warning per this


class Ingest:
    """Moves sample messages from an MQTT subscription into a `SampleStream`.

    For a model with a window, keyed observations go to `windows` (by default a
    `WindowStore` per stream partition). A partitioned stream (`streamlearn.store.partitions`)
    gets each message split by partition, one `RunWriter` per partition.

    `max_run` messages at most per Redis round trip, waiting up to `linger_s` for them: a
    sweep of 100 to 1,000 messages and 0 to 10 ms moved `bench.ingest`'s ratios by less
    than its noise (1.0-1.4x the raw subscriber everywhere), so the defaults stayed.
    """

    def __init__(
        self,
        parser: PayloadParser,
        stream: SampleStream | PartitionedStream,
        cfg: IngestConfig,
        windows: WindowStore | None = None,
        max_run: int = 500,
        linger_s: float = 0.005,
        poll_s: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.parser = parser
        self.stream = stream
        self.cfg = cfg
        self.max_run = max_run
        self.linger_s = linger_s
        self.poll_s = poll_s
        self.clock = clock
        self.counters = IngestCounters()
        model = parser.model
        self.samples_topic = stream.names.samples_topic
        self.names = stream.names
        self.sources = model.sources
        # messages received on each source filter, dead letters included
        self.source_messages = dict.fromkeys((s.topic for s in model.sources), 0)
        self._unwritten_sources: dict[str, int] = {}  # counted, not yet in the `fields` hash
        self.labels = LabelJoiner(parser, PendingStore(stream.redis, stream.names, model.labels))
        self.field_totals = FieldTotals(stream.redis, stream.names)
        self._unwritten = FieldCounts()  # counted, not yet in the `fields` hash
        self._fields_logged_at = -math.inf
        parts = stream.parts if isinstance(stream, PartitionedStream) else [stream]
        lanes: list[WindowStore | None] = [windows] * len(parts)
        if windows is None and model.window is not None:
            lanes = [WindowStore(p.redis, p.names, model.window, model.inputs) for p in parts]
        self.backlog: int | None = None  # unacknowledged samples, as last measured
        self._holding = False
        self._measured_at = -math.inf
        self._added = 0  # samples written since the backlog was last measured
        self.inbox = IngestInbox(cfg)
        # paho's callbacks, for the client that subscribes to the samples
        self.on_message = self.inbox.on_message
        self.heartbeat: Callable[[], object] = lambda: (
            None
        )  # each turn (`streamlearn.observe.health`)
        self._backlogs = [0] * len(parts)  # as last measured, per partition
        self.writers = [
            RunWriter(part, w, cfg, self.counters, max_run, functools.partial(self._lane, i))
            for i, (part, w) in enumerate(zip(parts, lanes, strict=True))
        ]
        self.writer = self.writers[0]
        self.assembly = Assembly.of(parser, stream.redis, stream.names)  # or None
        self.sparkplug = SparkplugIngest.of(self.assembly, stream.redis, stream.names)
        for writer in self.writers:
            writer.waiting = lambda: self.heartbeat()  # waiting out Redis is not hung

    def metrics(self) -> dict[str, float | int | None | dict[str, int]]:
        """For `streamlearn.observe.metrics` (Prometheus): names ending in `_total` are counters."""
        c = self.counters
        return {
            "messages_total": c.messages,
            "source_messages_total": dict(self.source_messages),
            "samples_total": c.samples,
            "duplicate_samples_total": c.duplicates,
            "dedup_share_exceeded_total": c.unremembered_ids,
            "deadletters_total": dict(c.rejected_by_reason),
            "redis_errors_total": c.redis_errors,
            "back_pressure_pauses_total": c.pauses,
            "observations_total": c.observations,
            "duplicate_observations_total": c.duplicate_observations,
            "late_observations_total": c.late_observations,
            "short_window_observations_total": c.short_windows,
            "evicted_windows_total": c.evicted_windows,
            "extra_fields_total": c.fields.extra,
            "missing_inputs_total": dict(c.fields.missing),
            "unseen_categories_total": dict(c.fields.unseen),
            "unlabeled_samples_total": c.fields.unlabeled,
            "labels_joined_total": self.labels.joined,
            "labels_unknown_total": self.labels.unknown,
            "labels_duplicate_total": self.labels.duplicates,
            "qos0_dropped_total": self.inbox.dropped,
            "backlog_samples": self.backlog,
            "holding": int(self._holding),
            "inbox_messages": len(self.inbox),
            "inbox_bytes": self.inbox.bytes,
            **(self.assembly.metrics() if self.assembly is not None else {}),
            **(self.sparkplug.metrics() if self.sparkplug is not None else {}),
        }

    # -- the loop --------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None, max_messages: int | None = None) -> int:
        """Process messages until `stop` is set or `max_messages` are done; returns the count."""
        stop = stop or threading.Event()
        model, names = self.parser.model, self.stream.names
        if self.writer.retry(lambda: settle_layout(self.stream.redis, names, model), stop) is None:
            return 0  # stopped while Redis was unavailable
        done = 0
        while not stop.is_set() and (max_messages is None or done < max_messages):
            self.heartbeat()
            if self._held_back(stop):
                continue
            if self.assembly is not None:  # samples formed on a period
                formed = self.assembly.tick(self.writers, stop)
                if formed:  # inputs they lacked, counted as a message's are
                    self.counters.fields.add(formed)
                    self._write_fields(formed)
            limit = self.max_run if max_messages is None else max_messages - done
            batch = self.inbox.take(limit, self.linger_s)
            if batch and self._process(batch, stop):
                done += len(batch)
        return done

    def _held_back(self, stop: threading.Event) -> bool:
        """Back-pressure: True (after a pause) while the learner is too far behind."""
        if not self._holding and self.backlog is not None:
            return False
        if self.clock() - self._measured_at >= self.poll_s:
            measured = self.writer.retry(self.stream.backlog, stop)
            if measured is not None:
                self._measured(measured)
        if not self._holding:
            return False
        stop.wait(self.poll_s)
        return True

    def _lane(self, part: int, backlog: int) -> None:
        """A write to one partition measured its backlog: the total is what counts."""
        self._backlogs[part] = backlog
        self._measured(sum(self._backlogs))

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
        parsed = self._parse(batch, stop)
        if parsed is None:
            return False  # stopped while Redis was unavailable; nothing acknowledged
        messages, labels = parsed
        adding = sum(
            len(m.parsed.samples or ()) + len(m.parsed.observations or ()) for m in messages
        )
        n = len(self.writers)
        lanes: list[list[RunMessage]] = [[] for _ in range(n)]
        parts_of: list[list[RunMessage]] = []  # each message's parts, one per partition
        for m in messages:
            parts = [
                (i, m if n == 1 else RunMessage(m.msg, p))
                for i, p in split(m.parsed, m.msg.payload, n)
            ]
            for i, part in parts:
                lanes[i].append(part)
            parts_of.append([part for _, part in parts])
        measure = self._measure_due(adding)
        stored = all(
            w.store(lane, measure, stop)
            for w, lane in zip(self.writers, lanes, strict=True)
            if lane
        )
        whole = [all(part.done for part in parts) for parts in parts_of]
        if labels and not self._settle(labels, whole, stop):
            for i, _ in labels:
                whole[i] = False
            stored = False
        done = [delivery for delivery, ok in zip(batch, whole, strict=True) if ok]
        self.inbox.acknowledge(done)
        self.counters.messages += len(done)
        run = FieldCounts()
        for m, ok in zip(messages, whole, strict=True):
            if ok:
                self.counters.count_rejections(m.parsed.rejections)
                if m.parsed.fields:  # named payloads: fields ignored, inputs missing, ...
                    run.add(m.parsed.fields)
        if run or self._unwritten_sources:
            self.counters.fields.add(run)
            self._write_fields(run)
        if not stored:
            log.warning(
                "stopping: %d messages left unacknowledged for redelivery", len(batch) - len(done)
            )
        return stored

    def _write_fields(self, run: FieldCounts) -> None:
        """Add a run's field and source counts to the model's totals in Redis (the status's
        `fields`).
        Redis failing, they wait for the next run's write and ingest goes on: the samples
        are stored and acknowledged already, and a figure is not worth stalling them."""
        self._unwritten.add(run)
        try:
            self.field_totals.add(self._unwritten, self._unwritten_sources)
        except redis.RedisError as exc:
            self.counters.redis_errors += 1
            now = self.clock()
            if now - self._fields_logged_at >= FIELDS_LOG_EVERY_S:
                self._fields_logged_at = now
                log.warning("field counts not written to redis (%s): kept for the next run", exc)
            return
        self._unwritten, self._unwritten_sources = FieldCounts(), {}

    def _parse(
        self, batch: list[Delivery], stop: threading.Event
    ) -> tuple[list[RunMessage], list[tuple[int, LabelMessage]]] | None:
        """Each message judged by its topic; the label messages joined to their kept
        predictions (one round trip). None if stopped while Redis was unavailable."""
        samples_topic, parse = self.samples_topic, self.parser.parse_message
        if self.assembly is None and all(d.topic == samples_topic for d in batch):  # hot path
            return [RunMessage(d, parse(d.payload)) for d in batch], []
        parsed: list[Parsed | Reading | Message | None] = []
        labels: list[tuple[int, LabelMessage]] = []
        for i, d in enumerate(batch):
            sent = ("samples", None) if d.topic == samples_topic else self.names.sender_of(d.topic)
            if sent is None:
                parsed.append(self._parse_source(d))
            elif problem := sender_problem(sent[1]):
                parsed.append(Parsed(None, None, [Rejection(problem, d.payload, "other")]))
            elif sent[0] == "labels":
                parsed.append(None)
                labels.append((i, self.labels.parse(d.payload, sent[1])))
            elif self.assembly is not None:  # a reading, held before it forms a sample
                parsed.append(self.assembly.read(d, sent[1], None))
            else:
                parsed.append(_scoped(self._parse_sent(d, sent[1]), sent[1]))
        if labels:
            raws = [batch[i].payload for i, _ in labels]
            joined = self.writer.retry(lambda: self.labels.join([m for _, m in labels], raws), stop)
            if joined is None:
                return None
            for (i, _), p in zip(labels, joined, strict=True):
                parsed[i] = p
        if self.sparkplug is not None:  # against the nodes' state, then held
            parsed = self.sparkplug.settle(batch, parsed, self.writer, stop)  # type: ignore[assignment]
        if self.assembly is not None and parsed is not None:  # held, and the samples formed
            parsed = self.assembly.settle(batch, parsed, self.writer, stop)  # type: ignore[assignment]
        if parsed is None:
            return None  # stopped while Redis was unavailable
        return [RunMessage(d, p) for d, p in zip(batch, parsed, strict=True)], labels  # type: ignore[arg-type]

    def _parse_sent(self, d: Delivery, sender: str | None) -> Parsed:
        """A message on `samples/{sender}` (or bare `samples`: None). A window model's step
        there is its sender's: it may name only the key `{sender}` (a step without one
        takes it, and the arrival as its seq) or one of the sender's
        `[models.NAME.gateways]` keys, as a source's topic level binds its steps."""
        parser = self.parser
        if sender is None or parser.model.window is None:
            return parser.parse_message(d.payload)
        granted = parser.model.gateways.get(sender, ())
        return parser.parse_message(d.payload, key=sender, at=time.time(), granted=granted)

    def _parse_source(self, d: Delivery) -> Parsed | Reading | Message:
        """A message on a source topic: parsed with its device key, the topic's level
        `key_level` (when the source names one), which a step may not override unless the
        source says `key_from_payload`."""
        source = next((s for s in self.sources if s.matches(d.topic)), None)
        if source is None:
            reason = f"topic {d.topic!r} is not one this model reads"
            return Parsed(None, None, [Rejection(reason, d.payload, "other")])
        self.source_messages[source.topic] += 1
        self._unwritten_sources[source.topic] = self._unwritten_sources.get(source.topic, 0) + 1
        if source.field is not None and is_own_state_echo(d.topic):
            return Parsed(None, None, [])  # our own state, echoed by Home Assistant: no reading
        if self.sparkplug is not None and source.format == "sparkplug_b":
            return self.sparkplug.read(d)
        if self.assembly is not None:
            return self.assembly.read(d, None, source)
        try:
            key, field = source.levels_of(d.topic)
        except PayloadError as exc:
            return Parsed(None, None, [Rejection(str(exc), d.payload, "other")])
        if key is None:  # a window model's step then names its key itself
            return self.parser.parse_message(d.payload, at=time.time(), field=field)
        return self.parser.parse_message(
            d.payload,
            key=key,
            at=time.time(),
            key_from_payload=source.key_from_payload,
            field=field,
        )

    def _settle(
        self, labels: list[tuple[int, LabelMessage]], whole: list[bool], stop: threading.Event
    ) -> bool:
        """Tombstone and score the joins of the label messages Redis now holds whole,
        before their PUBACKs; False if stopped first."""
        held = [m for i, m in labels if whole[i]]
        if not held:
            return True
        return self.writer.retry(lambda: self.labels.settle(held), stop) is not None

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


def _scoped(parsed: Parsed, sender: str | None) -> Parsed:
    """A samples message from `sender`'s topic, its sample ids in that sender's
    de-duplication namespace (`names.sample_id`): no device can burn another's ids."""
    samples = parsed.samples
    if sender is None or samples is None or samples.ids is None:
        return parsed
    ids = tuple(None if i is None else sample_id(sender, i) for i in samples.ids)
    return parsed._replace(samples=dataclasses.replace(samples, ids=ids))
