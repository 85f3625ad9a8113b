"""Sparkplug B sources in ingest (`[[models.NAME.sources]] format = "sparkplug_b"`).

A run's Sparkplug messages are decoded, then judged against their edge nodes' shared
state in one round trip (`streamlearn.store.sparkplug`): births declare aliases, data
resolves them, a seq gap or data before its birth asks the node for a rebirth (an NCMD
this module publishes on the client that delivered the message, QoS 0 as the spec says).
Their metrics are readings of the device key `{group}/{node}[/{device}]`, held by name
as assembly holds any (`streamlearn.store.held`): data carries only the metrics that
changed, the held values are the others. The target metric in data (not in a birth,
which restates it) forms a sample whose id is a digest of the message (its topic and
payload: a Sparkplug payload carries its seq and timestamp, so identical bytes are a
redelivery), and, for a window model, whose step's seq is the metric's timestamp. A death
marks its keys' held inputs missing; a late message (its seq behind the newest) holds
nothing, its label forming a sample of the held values overlaid with its own.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, cast

import redis

from streamlearn.contract.names import Names
from streamlearn.contract.records import FieldCounts, Kind, Parsed, Rejection
from streamlearn.contract.sparkplug.payloads import Decoded, Value, decode
from streamlearn.contract.sparkplug.topics import HOST_TYPES, NAMESPACE, Topic, read_topic
from streamlearn.errors import PayloadError
from streamlearn.ingest.assembly import Assembly
from streamlearn.ingest.inbox import Delivery
from streamlearn.ingest.writes import RunWriter
from streamlearn.store.held import Held, HeldUpdate, Reading, label_digest
from streamlearn.store.sparkplug import Handled, SparkplugNodes

F32_MAX = 3.4028234663852886e38  # a number past float32's range is held missing


class Message(NamedTuple):
    """A decoded Sparkplug message, waiting for its node's state."""

    topic: Topic
    decoded: Decoded


class SparkplugIngest:
    """Turns a model's Sparkplug messages into held readings and formed samples."""

    def __init__(
        self, assembly: Assembly, nodes: SparkplugNodes, clock: Callable[[], float] = time.time
    ) -> None:
        self.assembly = assembly
        self.nodes = nodes
        self.clock = clock
        self.categories = {name: cat for name, _, cat in assembly.fields.plan}
        self.target = assembly.model.target
        self.statuses: dict[str, int] = {}  # messages judged, by `Handled.status`
        self.skipped: dict[str, int] = {}  # metrics not read, by reason (`payloads.decode`)
        self.rebirths = 0  # NCMD rebirth requests published
        self.dead = 0  # device keys that died
        self.late = 0  # messages behind their node's newest seq
        self.unknown = 0  # metrics of an alias no birth declared

    @classmethod
    def of(
        cls, assembly: Assembly | None, client: redis.Redis, names: Names
    ) -> SparkplugIngest | None:
        """The Sparkplug part of an assembled model that has a Sparkplug source, else None."""
        if assembly is None:
            return None
        model = assembly.model
        if not any(s.format == "sparkplug_b" for s in model.sources):
            return None
        wanted = [*(model.fields or ()), model.target]
        return cls(assembly, SparkplugNodes(client, names, model.sparkplug, wanted))

    def metrics(self) -> dict[str, int | dict[str, int]]:
        """Ingest's figures of Sparkplug (`streamlearn.observe.catalog`)."""
        return {
            "sparkplug_messages_total": dict(self.statuses),
            "sparkplug_skipped_metrics_total": dict(self.skipped),
            "sparkplug_rebirths_total": self.rebirths,
            "sparkplug_dead_keys_total": self.dead,
            "sparkplug_late_messages_total": self.late,
            "sparkplug_unknown_aliases_total": self.unknown,
        }

    def read(self, d: Delivery) -> Message | Parsed:
        """A message decoded, or its dead letter (`bad_sparkplug`); a host's own (a
        command, a STATE) is nothing."""
        try:
            topic = read_topic(d.topic)
            if topic.type in HOST_TYPES:
                return Parsed(None, None, [])
            decoded = decode(d.payload)
        except (ValueError, PayloadError) as exc:
            return Parsed(None, None, [Rejection(str(exc), d.payload, "bad_sparkplug")])
        for why, n in decoded.skipped.items():
            self.skipped[why] = self.skipped.get(why, 0) + n
        return Message(topic, decoded)

    def settle(
        self, batch: Sequence[Delivery], parsed: list[Any], writer: RunWriter, stop: threading.Event
    ) -> list[Any] | None:
        """`parsed` with each `Message` replaced by what it formed: its node's state in one
        round trip, its readings held in another (each retried while Redis is unavailable);
        None if stopped first."""
        at = [i for i, p in enumerate(parsed) if isinstance(p, Message)]
        if not at:
            return parsed
        runs = [(parsed[i].topic, parsed[i].decoded) for i in at]
        handled = writer.retry(lambda: self.nodes.handle_many(runs, self.clock()), stop)
        if handled is None:
            return None
        readings: list[tuple[int, Reading]] = []  # (position in `at`, reading)
        own: list[dict[int, float]] = []  # each reading's own inputs (a late label's)
        out = list(parsed)
        for n, (i, h) in enumerate(zip(at, handled, strict=True)):
            self._count(batch[i], h)
            counts = FieldCounts()
            try:
                reading, values = self._reading(batch[i], h, counts)
            except PayloadError as exc:  # a target its task does not take
                out[i] = Parsed(
                    None, None, [Rejection(str(exc), batch[i].payload, cast(Kind, exc.kind))]
                )
                continue
            out[i] = Parsed(None, None, [], counts)
            for dead in h.dead:  # a death: its keys' inputs missing from now on
                readings.append((n, self._missing(dead, h.key)))
                own.append({})
            if reading is not None:
                readings.append((n, reading))
                own.append(values)
        if readings:
            update = writer.retry(lambda: self._hold([r for _, r in readings]), stop)
            if update is None:
                return None
            for k, keys in update.refused:  # a new device past its node's bound
                i = at[readings[k][0]]
                out[i] = Parsed(None, None, [self._refused(batch[i], readings[k][1], keys)])
            for k, held in ((f.reading, f.held) for f in update.formed):
                n, reading = readings[k]
                i = at[n]
                p = self._form(batch[i], handled[n], reading, held, own[k])
                counts = out[i].fields
                counts.add(p.fields or FieldCounts())
                out[i] = p._replace(fields=counts)
        return out

    def _count(self, d: Delivery, h: Handled) -> None:
        self.statuses[h.status] = self.statuses.get(h.status, 0) + 1
        self.dead += len(h.dead)
        self.late += h.late
        self.unknown += h.unknown
        if h.rebirth is not None:  # QoS 0, not retained: Sparkplug's NCMD
            d.client.publish(h.rebirth.topic, h.rebirth.payload, qos=0)
            self.rebirths += 1

    def _reading(
        self, d: Delivery, h: Handled, counts: FieldCounts
    ) -> tuple[Reading | None, dict[int, float]]:
        """The reading a handled message makes (None: none), and its inputs by index."""
        index = self.assembly.index
        values: dict[int, float] = {}
        for name, value in h.values.items():
            if name in index:
                values[index[name]] = self._number(name, value, counts)
        y = h.values.get(self.target)
        y = float(y) if isinstance(y, bool) else y  # a label as Sparkplug types it: 1 or 0
        target = None if y is None else repr(self.assembly.named.target_of(y))
        if not values and target is None:
            return None, {}
        held = {} if h.late else values  # a late message's values are older than those held
        # data's target is a reported change, a sample; a birth's is the value now, held
        born = h.status == "birth"
        label = None if target is None or born else label_digest(d.topic, d.payload)
        return Reading(h.key, _sender(h.key), held, target, label), values

    def _number(self, name: str, value: Value, counts: FieldCounts) -> float:
        """A metric's value as its input holds it (NaN: null, or a type it cannot take)."""
        category = self.categories.get(name)
        if value is None:
            return math.nan
        if category is not None:
            number = category(_text(value))
            if number is None:
                counts.add(FieldCounts(unseen={name: 1}))
            return -1.0 if number is None else number
        if isinstance(value, str) or not -F32_MAX <= value <= F32_MAX:
            return math.nan
        return float(value)

    def _missing(self, key: str, node: str) -> Reading:
        """A dead key's reading: every input missing."""
        missing = dict.fromkeys(range(len(self.assembly.inputs)), math.nan)
        return Reading(key, _sender(node), missing)

    def _hold(self, readings: list[Reading]) -> HeldUpdate:
        """Hold `readings` (one round trip): the samples they form, those refused."""
        cfg = self.assembly.cfg
        update = self.assembly.store.update(
            readings, self.clock(), cfg.ttl_s, cfg.max_devices, cfg.max_keys_per_sender
        )
        self.assembly.evicted += update.evicted
        return update

    def _refused(self, d: Delivery, reading: Reading, keys: int) -> Rejection:
        bound = self.assembly.cfg.max_keys_per_sender
        reason = (
            f"key {reading.key!r}: a new key, and its edge node holds {keys} "
            f"(assembly.max_keys_per_sender={bound})"
        )
        return Rejection(reason, d.payload, "too_many_keys")

    def _form(
        self, d: Delivery, h: Handled, reading: Reading, held: Held, own: dict[int, float]
    ) -> Parsed:
        """The sample a label formed: its id the message's digest, its seq the target
        metric's time; a late one's own inputs over those held."""
        assert reading.target is not None and reading.label is not None
        now = self.clock()
        if h.late:
            fields = dict(held.fields)
            fields.update({str(i): (now, repr(v)) for i, v in own.items()})
            held = Held(fields)
        sid = f"{h.key}|sp|{reading.label}"
        at = h.times.get(self.target, now)
        return self.assembly.form(h.key, held, float(reading.target), sid, at, now, d.payload)


def _text(value: bool | float | str) -> str:
    """A metric's value as a categorical input reads it: a boolean "true" or "false", as a
    JSON boolean reads (contract §2.1.1), a number as written.

    >>> _text(True), _text(2.0), _text("on")
    ('true', '2', 'on')
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else format(value, "g")


def _sender(key: str) -> str:
    """What bounds the held keys an edge node makes (`assembly.max_keys_per_sender`): its
    node key, the first two levels of a device key."""
    return f"{NAMESPACE}/" + "/".join(key.split("/")[:2])
