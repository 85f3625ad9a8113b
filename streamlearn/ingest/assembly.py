"""Samples assembled from readings on several topics (`[models.NAME.assembly]`).

Each message of such a model on its sources or its `samples` topics is a reading: one
device key's inputs (a plain value on a topic per input, or an object of several), and
maybe its label, the model's `target`. The readings are held in Redis
(`streamlearn.store.held`), shared by every ingest process; a label, on its own topic or
beside an input, forms a sample of the key's held inputs, one older than its age limit
counting as missing. With `every_s`, every key holding a fresh target forms one each
period too. A formed sample takes an id made from its label message (a redelivery gets
the same one), a periodic one from its key and period, so the stream's de-duplication
keeps one of each (contract §4.1). For a window model it is a keyed step instead
(seq: the label's first arrival, or the period's start), exactly once by key and seq.

The formed samples go on as each message's `Parsed`, through `RunWriter` like any
other: a message is acknowledged once its readings and its sample are in Redis.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
import redis

from streamlearn.config.inputs import SourceConfig
from streamlearn.contract.named import NamedPayloads
from streamlearn.contract.names import Names, assembled_id
from streamlearn.contract.payloads import PayloadParser
from streamlearn.contract.records import (
    FieldCounts,
    Kind,
    Observations,
    Parsed,
    Rejection,
    Samples,
    concat,
    concat_observations,
)
from streamlearn.contract.steps import StepKey
from streamlearn.errors import PayloadError
from streamlearn.ingest.inbox import Delivery
from streamlearn.ingest.writes import RunMessage, RunWriter
from streamlearn.store.held import TARGET, Held, HeldStore, Reading, label_digest
from streamlearn.store.partitions import split

SITE = "-"  # the one key of readings that name no device (a site's)


class Assembly:
    """Turns a model's readings into held values and formed samples."""

    def __init__(
        self,
        parser: PayloadParser,
        store: HeldStore,
        clock: Callable[[], float] = time.time,
    ) -> None:
        model = parser.model
        assert model.assembly is not None and model.fields is not None
        self.parser = parser
        self.model = model
        self.cfg = model.assembly
        self.store = store
        self.names: Names = store.names
        self.clock = clock
        self.named = NamedPayloads(model, parser.check_targets)
        self.fields = self.named.fields
        self.inputs = list(model.fields)
        self.ages = [self.cfg.max_age(n) for n in self.inputs]
        self.index = {name: i for i, name in enumerate(self.inputs)}
        self.formed = 0  # samples formed (label and periodic), before de-duplication
        self.periodic = 0  # of which on a period
        self.evicted = 0  # held keys evicted to keep max_devices
        self._counts = FieldCounts()  # of the readings read and not yet held
        period = self.cfg.every_s
        self._period = None if period is None else math.floor(clock() / period)

    @classmethod
    def of(cls, parser: PayloadParser, client: redis.Redis, names: Names) -> Assembly | None:
        """The assembly of `parser`'s model, None when it has none."""
        if parser.model.assembly is None:
            return None
        return cls(parser, HeldStore(client, names))

    def metrics(self) -> dict[str, int]:
        """Ingest's figures of assembly (`streamlearn.observe.catalog`)."""
        return {
            "assembled_samples_total": self.formed,
            "periodic_samples_total": self.periodic,
            "evicted_held_keys_total": self.evicted,
        }

    # -- readings ----------------------------------------------------------------------

    def read(
        self, d: Delivery, sender: str | None, source: SourceConfig | None
    ) -> Reading | Parsed:
        """The reading a message holds, or its dead letter. `sender`: the client level of
        `samples/{client}` (None: bare `samples`, or a source's `source`)."""
        counts = FieldCounts()
        try:
            doc, step, bound = self._doc(d, sender, source)
            values, y = self.fields.reading(doc, counts)
            given = doc.get("key")
            key = SITE if step.topic is None and given is None else step.of(given)
            target = None if y is None else repr(self.named.target_of(y))
        except PayloadError as exc:
            return Parsed(None, None, [Rejection(str(exc), d.payload, cast(Kind, exc.kind))])
        if not values and target is None:  # nothing of the model's: nothing to hold
            return Parsed(None, None, [], counts)
        self._counts.add(counts)  # (fields ignored, values unseen: with the run's first)
        held = {self.index[name]: v for name, v in values.items()}
        label = None if target is None else label_digest(d.topic, d.payload)
        return Reading(key, bound, held, target, label)

    def _doc(
        self, d: Delivery, sender: str | None, source: SourceConfig | None
    ) -> tuple[dict[str, Any], StepKey, str | None]:
        """The message's object, whose key it may name, and the sender that bounds it."""
        if source is None:
            doc = self.parser.reading(d.payload)
            if sender is None:  # bare samples: any key, bound by max_devices alone
                return doc, StepKey(), None
            granted = frozenset(self.model.gateways.get(sender, ()))
            return doc, StepKey(sender, granted=granted), d.topic
        key, name = source.levels_of(d.topic)
        return self.parser.reading(d.payload, name), StepKey(key, source.key_from_payload), d.topic

    def settle(
        self, batch: Sequence[Delivery], parsed: list[Any], writer: RunWriter, stop: threading.Event
    ) -> list[Any] | None:
        """`parsed` with each `Reading` replaced by what it formed, held in one round trip
        (retried while Redis is unavailable); None if stopped first."""
        at = [i for i, r in enumerate(parsed) if isinstance(r, Reading)]
        if not at:
            return parsed
        held = writer.retry(lambda: self.hold([(batch[i], parsed[i]) for i in at]), stop)
        if held is None:
            return None
        out = list(parsed)
        for i, p in zip(at, held, strict=True):
            out[i] = p
        counts, self._counts = self._counts, FieldCounts()
        counts.add(held[0].fields or FieldCounts())
        out[at[0]] = held[0]._replace(fields=counts)
        return out

    def hold(self, readings: Sequence[tuple[Delivery, Reading]]) -> list[Parsed]:
        """Hold readings (one round trip) and form the samples their labels make: each
        message's `Parsed`. Safe to call again after a Redis error: a label then forms
        the same id."""
        cfg, now = self.cfg, self.clock()
        update = self.store.update(
            [r for _, r in readings], now, cfg.ttl_s, cfg.max_devices, cfg.max_keys_per_sender
        )
        self.evicted += update.evicted
        out = [Parsed(None, None, []) for _ in readings]
        for n, held in update.refused:
            d, reading = readings[n]
            reason = (
                f"key {reading.key!r}: a new key, and its sender holds {held} "
                f"(assembly.max_keys_per_sender={cfg.max_keys_per_sender})"
            )
            out[n] = Parsed(None, None, [Rejection(reason, d.payload, "too_many_keys")])
        for formed in update.formed:
            d, reading = readings[formed.reading]
            assert reading.target is not None  # only a label forms a sample
            y = float(reading.target)
            sid, seq = formed.id, formed.seq
            out[formed.reading] = self.form(reading.key, formed.held, y, sid, seq, now, d.payload)
        return out

    def tick(self, writers: Sequence[RunWriter], stop: threading.Event) -> FieldCounts | None:
        """With `every_s`: once a period, a sample of every held key with a fresh target,
        its id the key and the period (every ingest process forms the same, and the
        stream keeps one), appended as the samples of a message of no sender. What the
        samples lacked (inputs missing, counted as a message's are), when this process's
        were the ones the stream kept; else None."""
        every = self.cfg.every_s
        now = self.clock()
        if every is None or math.floor(now / every) == self._period:
            return None
        period = math.floor(now / every)
        held = writers[0].retry(lambda: list(self.store.scan(now, self.cfg.ttl_s)), stop)
        if held is None:
            return None
        self._period = period
        age = self.cfg.max_age(self.model.target)
        formed, counts = [], FieldCounts()
        for key, state in held:
            y = state.value(TARGET, now, age)
            if y is not None:
                p = self.form(key, state, float(y), f"{key}|p{period}", period * every, now, b"")
                if not p.rejections:
                    formed.append(p)
                    counts.add(cast(FieldCounts, p.fields))
        if not formed:
            return None
        self.periodic += len(formed)
        parsed = Parsed(
            concat([p.samples for p in formed if p.samples is not None]),
            concat_observations([p.observations for p in formed if p.observations is not None]),
            [],
        )
        sent = Delivery(0, cast(Any, None), 0, 0, self.names.samples_topic, b"")
        c = writers[0].counters  # the ingest process's, every writer's
        dups = c.duplicates + c.duplicate_observations
        stored = [
            writers[i].store([RunMessage(sent, part)], False, stop)
            for i, part in split(parsed, b"", len(writers))
        ]
        # another process formed them first (the same period): its counts, not these
        first = c.duplicates + c.duplicate_observations - dups < len(formed)
        return counts if all(stored) and first else None

    def form(
        self, key: str, held: Held, y: float, sid: str, seq: float, now: float, payload: bytes
    ) -> Parsed:
        """One sample of `key`'s held inputs and target `y`; a dead letter when more than
        `max_missing` of its inputs are missing (absent, null or older than their limit)."""
        row = []
        for i, age in enumerate(self.ages):
            text = held.value(str(i), now, age)
            row.append(math.nan if text is None else float(text))
        missing = [name for name, v in zip(self.inputs, row, strict=True) if math.isnan(v)]
        if len(missing) > self.fields.max_missing:
            reason = (
                f"key {key!r}: {len(missing)} of {len(self.inputs)} inputs missing or older "
                f"than their age limit, at most {self.fields.max_missing} (max_missing): "
                f"{missing[:5]}"
            )
            return Parsed(None, None, [Rejection(reason, payload, "missing_field")])
        counts = FieldCounts(missing=dict.fromkeys(missing, 1))
        self.formed += 1
        x, target = np.array([row], np.float32), np.array([y], np.float32)
        if self.model.window is not None:
            return Parsed(None, Observations((key,), np.array([seq]), x, target), [], counts)
        return Parsed(Samples(x, target, (assembled_id(sid),)), None, [], counts)
