"""Each device's latest prediction, retained on `{prefix}/{model}/state/{key}`.

With `[models.NAME.state]` the actors read the model's keyed sources in a shared group of
their own, predict each device's readings (a window model's from the key's stored window,
as a key-only request) and publish the prediction retained, so that a dashboard or Home
Assistant (`streamlearn.actor.discovery`) shows it without asking. A key's state goes out
at most every `every_s`: the newest reading within the period waits for its end. At most
`max_devices` keys (`streamlearn.actor.devices`): an evicted key's retained state and
config are cleared, and at start the states an earlier life retained are taken in, so the
broker keeps none unbounded. Readings are parsed on paho's thread (one that fails costs a
count: ingest dead-letters it) and predicted on the serving thread between batches.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol, cast

import numpy as np
import paho.mqtt.client as mqtt

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
from streamlearn.store.windows import WindowStore

log = logging.getLogger(__name__)

MAX_KEY_CHARS = 128  # as a window's key: the bound of a device's bytes


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


class States:
    """Predicts one model's device readings and keeps their states retained (module doc).

    paho's thread calls `on_reading` and `on_state` (through `handler`); the serving loop
    calls `serve` between batches. `publish` is paho's `Client.publish`.
    """

    def __init__(self, cfg: ModelConfig, names: Names, publish: Publish) -> None:
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
        self.state_prefix = names.topic("state/")
        self.parser = PayloadParser(cfg)
        self.devices = Devices(state.max_devices, state.every_s)
        self._lock = threading.Lock()  # paho's thread offers, the serving loop takes
        self.published = 0  # states published
        self.unread = 0  # readings not predicted: not parsed, or a key unfit for a topic
        self.echoes = 0  # Home Assistant's echoes of our own states, ignored
        self.failed = 0  # taken readings not predicted (too few stored steps, an error)
        self.cleared = 0  # retained states cleared (evicted keys)

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
                return self.on_reading(topic, cast(bytes, msg.payload), publish)
            return requests(client, userdata, msg)

        return on_message

    def on_reading(self, topic: str, payload: bytes, publish: Publish | None = None) -> None:
        """A device's reading (paho's thread): parsed, and kept as its key's latest; an
        evicted key cleared with `publish` (default: the one given at construction)."""
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
                self._evicted(self.devices.offer(key, reading, now), publish)

    def on_state(self, msg: mqtt.MQTTMessage, publish: Publish | None = None) -> None:
        """A state retained before this actor subscribed (an earlier life's, or another
        actor's) is taken in, to be bounded; past the bound, cleared. Live states (ours
        and other actors', not flagged retained) are not."""
        key = msg.topic[len(self.state_prefix) :]
        if not (msg.retain and msg.payload and _fit(key)):
            return
        with self._lock:
            if not self.devices.adopt(key):
                self._evicted(Device(key, shown=True), publish)

    def serve(self, actor: Serving) -> None:
        """Predict the readings whose period ended, up to `max_batch` rows, with the
        version the actor serves, and publish their states. Never raises."""
        with self._lock:
            taken = self.devices.take(time.monotonic(), actor.policy.max_batch)
        if not taken:
            return
        try:
            self._serve(actor, taken)
        except Exception:  # a bug or a failed computation: the serving loop must go on
            log.exception("predicting %d device states failed", len(taken))
            self.failed += len(taken)

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
        with self._lock:  # eviction's clears and these publishes go out in one order
            for (device, _), row in zip(ready, rows.tolist(), strict=True):
                if self.devices.holds(device):  # else evicted meanwhile: nothing retained
                    self._publish(device, {"key": device.key, "y": row, **body, "at": at})

    def _refused(self, p: Pending, _reason: str) -> None:
        p.done = True
        self.failed += 1

    def _publish(self, device: Device, doc: dict[str, object]) -> None:
        topic = self.state_prefix + device.key
        if self.cfg.task == "multiclass":
            doc["class"] = int(np.argmax(cast(list[float], doc["y"])))
        policy = self.policy
        if policy.discovery and not device.discovered:
            config = sensor_config(self.cfg, device.key, topic, policy.expire_after_s)
            where = config_topic(policy.discovery_prefix, cast(str, config["unique_id"]))
            self.publish(where, json.dumps(config).encode(), 1, True, None)
            device.discovered = True
        self.publish(topic, json.dumps(doc).encode(), 1, True, None)
        device.shown = True
        self.published += 1

    def _evicted(self, device: Device | None, publish: Publish | None) -> None:
        """Clear an evicted key's retained state and config (under the lock)."""
        if device is None or not device.shown:
            return
        publish = publish or self.publish
        publish(self.state_prefix + device.key, b"", 1, True, None)
        if self.policy.discovery:  # also one an earlier life may have left
            oid = object_id(self.cfg.name, device.key)
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


def _fit(key: str) -> bool:
    """Whether `key` can be one topic level of a state: 1 to 128 characters a broker takes.

    >>> _fit("kitchen-1"), _fit("a/b"), _fit("x" * 129)
    (True, False, False)
    """
    return 0 < len(key) <= MAX_KEY_CHARS and "/" not in key and topic_problem(key) is None
