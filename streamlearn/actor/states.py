"""Each device's latest prediction, retained on `{prefix}/{model}/state/{key}`.

With `[models.NAME.state]` the actors read the model's keyed sources in a shared group of
their own, predict each device's readings (a window model's from the key's stored window,
as a key-only request) and publish the prediction retained, so that a dashboard or Home
Assistant (`streamlearn.actor.discovery`) shows it without asking. A key's state goes out
at most every `every_s`: the newest reading within the period waits for its end. An actor
tracks at most `max_devices` keys (`streamlearn.actor.devices`); the retained states are
bounded across all actors by the model's index in Redis (`streamlearn.store.state_index`):
each turn an actor indexes what it published (and, at its start, the states an earlier life
retained), sends the discovery configs of keys new to the index, and clears the states and
configs of the keys it takes out past the bound; once the broker has acknowledged what it
sent for a new key, it checks the key is still indexed, and clears it if another actor took
it out meanwhile (that actor's clear may have reached the broker first). Readings are
parsed on paho's thread (one that fails costs a count: ingest dead-letters it) and
predicted on the serving thread between batches.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Protocol, cast

import numpy as np
import paho.mqtt.client as mqtt
import redis

from streamlearn.actor.devices import Device, Devices, Reading
from streamlearn.actor.discovery import config_topic, sensor_config
from streamlearn.actor.inbox import Pending
from streamlearn.actor.keyed import complete_windows
from streamlearn.actor.replies import Publish, topic_problem
from streamlearn.config.app import ModelConfig
from streamlearn.config.inputs import SourceConfig
from streamlearn.config.policies import ActorConfig
from streamlearn.contract.entities import is_own_state_echo, object_id
from streamlearn.contract.names import Names
from streamlearn.contract.payloads import PayloadParser
from streamlearn.errors import ConfigError, PayloadError
from streamlearn.store.state_index import Touched
from streamlearn.store.windows import WindowStore

log = logging.getLogger(__name__)

MAX_KEY_CHARS = 128  # as a window's key: the bound of a device's bytes
INDEX_RETRY_S = 1.0  # after a failed indexing, the next try (Redis away)


def states_group(share_group: str, model: str) -> str:
    """The actors' shared-subscription group of a model's readings: apart from ingest's
    (`{group}.{model}`), so that ingest and the actors each get every reading.

    >>> states_group("streamlearn", "room")
    'streamlearn.state.room'
    """
    return f"{share_group}.state.{model}"


class Serving(Protocol):
    """What states ask of the actor (`streamlearn.actor.loop.Actor`): the version it
    serves, its forward pass and its windows."""

    version: int
    variant: str
    policy: ActorConfig
    windows: WindowStore | None

    @property
    def answers_initial(self) -> bool: ...

    def predict(self, x: np.ndarray) -> np.ndarray: ...


class Index(Protocol):
    """The model's index of retained states (`streamlearn.store.state_index.StateIndex`)."""

    def touch(self, stamped: list[tuple[str, float]], checks: list[str]) -> Touched: ...


class States:
    """Predicts one model's device readings and keeps their states retained (module doc).

    paho's thread calls `on_reading` and `on_state` (through `handler`); the serving loop
    calls `serve` between batches. `publish` is paho's `Client.publish`.
    """

    def __init__(self, cfg: ModelConfig, names: Names, publish: Publish, index: Index) -> None:
        state = cfg.state
        if state is None:
            raise ConfigError(f"model {cfg.name!r} has no [models.{cfg.name}.state] table")
        self.sources: list[SourceConfig] = [s for s in cfg.sources if s.key_level is not None]
        if not self.sources:
            raise ConfigError(
                f"[models.{cfg.name}.state] needs a [[models.{cfg.name}.sources]] topic with "
                'key = "topic:N" (the device key of its readings); none has one'
            )
        self.cfg = cfg
        self.policy = state
        self.names = names
        self.publish = publish
        self.index = index
        self.state_prefix = names.topic("state/")
        self.parser = PayloadParser(cfg)
        self.devices = Devices(state.max_devices, state.every_s)
        self._lock = threading.Lock()  # paho's thread offers, the serving loop takes
        # keys published (or retained before this actor) not indexed yet, by their time:
        # a turn's, or with Redis away at most `max_devices` (the oldest cleared past it)
        self._unindexed: dict[str, float] = {}
        self._sent: dict[str, object] = {}  # of those keys, what publishing our state returned
        # keys new to the index at our last call, with what publishing their state and config
        # returned: checked in the index once the broker acknowledged them (at most
        # `max_devices`, the oldest dropped)
        self._checks: dict[str, list[object]] = {}
        self._retry_at = -math.inf
        self.published = 0  # states published
        self.unread = 0  # readings not predicted: not parsed, or a key unfit for a topic
        self.echoes = 0  # Home Assistant's echoes of our own states, ignored
        self.failed = 0  # taken readings not predicted (too few stored steps, an error)
        self.cleared = 0  # retained states cleared (past the index's bound)
        self.index_failures = 0  # indexing calls Redis refused

    @property
    def subscriptions(self) -> list[str]:
        """The source filters readings come on (shared in `states_group`)."""
        return [s.topic for s in self.sources]

    @property
    def retained_filter(self) -> str:
        """`state/+`, not shared: the states retained before this actor came (`on_state`)."""
        return self.state_prefix + "+"

    def handler(self, requests: Callable[..., None]) -> Callable[..., None]:
        """paho's `on_message`: readings and retained states here, the rest to `requests`."""
        predict_space = self.names.predict_topic

        def on_message(client: mqtt.Client, userdata: object, msg: mqtt.MQTTMessage) -> None:
            try:
                topic = msg.topic
            except UnicodeDecodeError:
                return requests(client, userdata, msg)
            # the client at hand: a message may come before `connect` returns it
            publish = cast(Publish, client.publish)
            if topic.startswith(self.state_prefix):
                return self.on_state(msg, publish)
            if not topic.startswith(predict_space) and self._source(topic) is not None:
                return self.on_reading(topic, cast(bytes, msg.payload))
            return requests(client, userdata, msg)

        return on_message

    def on_reading(self, topic: str, payload: bytes) -> None:
        """A device's reading (paho's thread): parsed, and kept as its key's latest."""
        if is_own_state_echo(topic):  # Home Assistant's statestream, echoing a prediction
            self.echoes += 1
            return
        readings = self._read(topic, payload)
        if not readings:
            self.unread += 1
            return
        now = time.monotonic()
        with self._lock:
            for key, reading in readings.items():
                self.devices.offer(key, reading, now)

    def on_state(self, msg: mqtt.MQTTMessage, publish: Publish | None = None) -> None:
        """A state retained before this actor subscribed (an earlier life's, or another
        actor's) is indexed at its time, to be bounded. Live states (ours and other
        actors', not flagged retained) are not."""
        key = msg.topic[len(self.state_prefix) :]
        if not (msg.retain and msg.payload and _fit(key)):
            return
        with self._lock:
            self._stamp(key, _time_of(msg.payload), publish)

    def serve(self, actor: Serving) -> None:
        """Predict the readings whose period ended, up to `max_batch` rows, with the
        version the actor serves, publish their states, and index them. Never raises."""
        with self._lock:
            taken = self.devices.take(time.monotonic(), actor.policy.max_batch)
        if taken:
            try:
                self._serve(actor, taken)
            except Exception:  # a bug or a failed computation: the serving loop must go on
                log.exception("predicting %d device states failed", len(taken))
                self.failed += len(taken)
        if self._unindexed or self._checks:
            self._index()

    def metrics(self) -> dict[str, int]:
        """For the actor's Prometheus figures (`streamlearn.observe.catalog`)."""
        return {
            "states_published_total": self.published,
            "state_readings_replaced_total": self.devices.replaced,
            "state_readings_unread_total": self.unread,
            "state_readings_failed_total": self.failed,
            "state_echoes_total": self.echoes,
            "states_evicted_total": self.devices.evicted,
            "states_cleared_total": self.cleared,
            "state_index_failures_total": self.index_failures,
            "state_devices": len(self.devices),
        }

    # -- helpers -------------------------------------------------------------------------

    def _serve(self, actor: Serving, taken: list[tuple[Device, Reading]]) -> None:
        if actor.version == 0 and not actor.answers_initial:
            self.failed += len(taken)  # no weights yet: the next reading tries again
            return
        keyed = self.cfg.window is not None
        now = time.monotonic()
        pending = [
            Pending(now, r.x, False, None, None, None, d.key if keyed else None, r.seq)
            for d, r in taken
        ]
        if keyed and actor.windows is not None:
            complete_windows(pending, actor.windows, self._refused)
        ready = [(d, p) for (d, _), p in zip(taken, pending, strict=True) if not p.done]
        if not ready:
            return
        y = actor.predict(np.concatenate([p.x for _, p in ready]))
        rows = y if self.cfg.task == "multiclass" else y[:, 0]
        body = {"model": self.cfg.name, "variant": actor.variant, "version": actor.version}
        at = round(time.time(), 3)
        with self._lock:  # the index's clears and these publishes go out in one order
            for (device, _), row in zip(ready, rows.tolist(), strict=True):
                if self.devices.holds(device):  # else evicted meanwhile: nothing retained
                    doc = {"key": device.key, "y": row, **body, "at": at}
                    self._sent[device.key] = self._publish(device, doc)
                    self._unindexed[device.key] = at  # indexed at the end of this turn

    def _refused(self, p: Pending, _reason: str) -> None:
        p.done = True
        self.failed += 1

    def _publish(self, device: Device, doc: dict[str, object]) -> object:
        if self.cfg.task == "multiclass":
            doc["class"] = int(np.argmax(cast(list[float], doc["y"])))
        sent = self.publish(self.state_prefix + device.key, json.dumps(doc).encode(), 1, True, None)
        self.published += 1
        return sent

    def _stamp(self, key: str, at: float, publish: Publish | None = None) -> None:
        """Mark `key`'s state (of time `at`) for indexing (under the lock). Past
        `max_devices` keys waiting (Redis away), the oldest is cleared: the bound holds."""
        self._unindexed[key] = max(at, self._unindexed.get(key, -math.inf))
        self._bound(publish)

    def _bound(self, publish: Publish | None = None) -> None:
        """At most `max_devices` keys wait to be indexed: past it, the oldest (ordered as
        Redis orders the index: time, then key) is cleared (under the lock)."""
        while len(self._unindexed) > self.policy.max_devices:
            oldest = min(self._unindexed.items(), key=lambda kv: (kv[1], kv[0]))[0]
            del self._unindexed[oldest]
            self._sent.pop(oldest, None)
            self._clear(oldest, publish)

    def _index(self) -> None:
        """Index the states published since the last turn: discovery configs for the keys
        new to the index, the states of the keys taken out past the bound cleared."""
        now = time.monotonic()
        with self._lock:
            if now < self._retry_at:  # Redis away: this turn's states wait, bounded
                return self._bound()
            stamped, self._unindexed = list(self._unindexed.items()), {}
            sent, self._sent = self._sent, {}
            checks = [k for k, infos in self._checks.items() if all(map(_acked, infos))]
            for key in checks:
                del self._checks[key]
        if not stamped and not checks:
            return
        try:
            touched = self.index.touch(stamped, checks)
        except redis.RedisError as exc:
            self.index_failures += 1
            log.warning("indexing %d device states failed (%s), trying again", len(stamped), exc)
            with self._lock:
                self._retry_at = now + INDEX_RETRY_S
                for key, at in stamped:
                    self._stamp(key, at)
                for key, info in sent.items():
                    if key in self._unindexed:
                        self._sent.setdefault(key, info)
                for key in checks:
                    self._checks.setdefault(key, [])
                self._bound_checks()
            return
        indexed = {key for key, _ in stamped}
        with self._lock:
            for key in touched.new:
                infos = [sent.get(key)]
                if self.policy.discovery:
                    infos.append(self._discover(key))
                self._checks[key] = infos
            # taken out by another actor after our last call: its clear may have come first
            absent = [k for k in touched.absent if k not in indexed and k not in self._unindexed]
            for key in [*touched.gone, *absent]:
                self._checks.pop(key, None)
                self.devices.forget(key)
                self._clear(key)
            self._bound_checks()

    def _bound_checks(self) -> None:
        """At most `max_devices` keys wait to be checked: the oldest dropped (under the
        lock)."""
        while len(self._checks) > self.policy.max_devices:
            del self._checks[next(iter(self._checks))]

    def _discover(self, key: str) -> object:
        """A key's retained Home Assistant discovery config (under the lock)."""
        policy = self.policy
        config = sensor_config(self.cfg, key, self.state_prefix + key, policy.expire_after_s)
        where = config_topic(policy.discovery_prefix, cast(str, config["unique_id"]))
        return self.publish(where, json.dumps(config).encode(), 1, True, None)

    def _clear(self, key: str, publish: Publish | None = None) -> None:
        """Clear a key's retained state and config (under the lock)."""
        publish = publish or self.publish
        publish(self.state_prefix + key, b"", 1, True, None)
        if self.policy.discovery:  # also one an earlier life may have left
            oid = object_id(self.cfg.name, key)
            publish(config_topic(self.policy.discovery_prefix, oid), b"", 1, True, None)
        self.cleared += 1

    def _source(self, topic: str) -> SourceConfig | None:
        return next((s for s in self.sources if s.matches(topic)), None)

    def _read(self, topic: str, payload: bytes) -> dict[str, Reading]:
        """A reading's rows by key (the last of each key); empty when it holds none."""
        source = self._source(topic)
        level = None if source is None else source.key_level
        levels = topic.split("/")
        if source is None or level is None or level >= len(levels) or not _fit(levels[level]):
            return {}
        key, parser = levels[level], self.parser
        try:
            if self.cfg.window is not None:
                parsed = parser.parse_message(
                    payload, key=key, at=time.time(), key_from_payload=source.key_from_payload
                )
                steps = parsed.observations
                if steps is None:
                    return {}
                found = {
                    k: Reading(steps.x[i : i + 1], float(steps.seq[i]))
                    for i, k in enumerate(steps.keys)
                }
                return {k: r for k, r in found.items() if _fit(k)}
            parsed = parser.parse_message(payload)
            if parsed.samples is not None:
                return {key: Reading(parsed.samples.x[-1:])}
            if parsed.rejections or self.cfg.fields is None:
                return {}
            return {key: Reading(parser.parse_request(payload).x[-1:])}  # no target: telemetry
        except PayloadError:
            return {}


def _acked(sent: object) -> bool:
    """Whether the broker acknowledged a publish (paho's `MQTTMessageInfo`), or will never:
    refused by paho, or not a paho publish (a test's)."""
    is_published = getattr(sent, "is_published", None)
    if is_published is None:
        return True
    try:
        return bool(is_published())
    except (RuntimeError, ValueError):
        return True


def _time_of(payload: bytes | bytearray) -> float:
    """A retained state's `at` (unix s); 0 when it has none: the oldest of all.

    >>> _time_of(b'{"at": 1700000000.5}'), _time_of(b"junk")
    (1700000000.5, 0.0)
    """
    try:
        at = json.loads(payload).get("at")
        return float(at) if isinstance(at, int | float) and math.isfinite(at) else 0.0
    except (ValueError, AttributeError):
        return 0.0


def _fit(key: str) -> bool:
    """Whether `key` can be one topic level of a state: 1 to 128 characters a broker takes.

    >>> _fit("kitchen-1"), _fit("a/b"), _fit("x" * 129)
    (True, False, False)
    """
    return 0 < len(key) <= MAX_KEY_CHARS and "/" not in key and topic_problem(key) is None
