"""What the service reports about itself: retained status topics plus queue figures.

Shared by `streamlearn status`, the live line of `streamlearn up` and the dashboard.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import paho.mqtt.client as paho
import redis

from streamlearn import mqtt
from streamlearn.champion import read_standings
from streamlearn.config import AppConfig, Settings
from streamlearn.names import Names
from streamlearn.queue import GROUP


class StatusMonitor:
    """Keeps the latest retained learner status of each model (and actor status, if any)."""

    def __init__(self, cfg: AppConfig, settings: Settings) -> None:
        self.names = {m: Names(m, settings.topic_prefix, settings.key_prefix) for m in cfg.models}
        self.learners: dict[str, dict[str, Any]] = {}
        self.actors: dict[str, dict[str, dict[str, Any]]] = {m: {} for m in cfg.models}
        self._lock = threading.Lock()
        topics = [(n.status_topic, 0) for n in self.names.values()]
        topics += [(n.topic("actors/+"), 0) for n in self.names.values()]
        self.client = mqtt.connect(
            settings.mqtt,
            subscriptions=topics,
            on_message=self._on_message,
            ca_file=settings.mqtt_ca_file,
        )

    def _on_message(self, _c: object, _u: object, msg: paho.MQTTMessage) -> None:
        try:
            doc = json.loads(msg.payload) if msg.payload else None
        except ValueError:
            return
        parts = msg.topic.split("/")
        model = parts[-2] if parts[-1] == "status" else parts[-3]
        with self._lock:
            if parts[-1] == "status" and isinstance(doc, dict):
                self.learners[model] = doc
            elif parts[-2] == "actors" and model in self.actors:
                if isinstance(doc, dict):
                    self.actors[model][parts[-1]] = doc
                else:  # an empty retained message clears a stopped actor
                    self.actors[model].pop(parts[-1], None)

    def learner(self, model: str) -> dict[str, Any]:
        with self._lock:
            return dict(self.learners.get(model, {}))

    def actor_list(self, model: str) -> list[dict[str, Any]]:
        with self._lock:
            return [{"id": k, **v} for k, v in sorted(self.actors.get(model, {}).items())]

    def close(self) -> None:
        mqtt.close(self.client)


def queue_figures(r: redis.Redis, names: Names, group: str = GROUP) -> dict[str, int]:
    """Length, entries `group` has not acknowledged, dead letters of one model's streams."""
    pipe = r.pipeline(transaction=False)
    pipe.xlen(names.samples_key)
    pipe.xlen(names.deadletter_key)
    pipe.get(names.latest_key)
    pipe.exists(names.samples_key)
    length, dead, latest, exists = pipe.execute()
    pending = 0
    if exists:
        try:
            pending = r.xpending(names.samples_key, group)["pending"]
        except redis.ResponseError:  # no consumer group yet
            pending = 0
    return {
        "queue_length": length,
        "pending": pending,
        "deadletters": dead,
        "latest_version": int(latest or 0),
    }


def snapshot(monitor: StatusMonitor, r: redis.Redis) -> list[dict[str, Any]]:
    """One row per model: learner status, queue figures and live actors."""
    rows = []
    for model, names in monitor.names.items():
        row: dict[str, Any] = {"model": model, **monitor.learner(model)}
        row.update(queue_figures(r, names))
        row.update(read_standings(r, names))
        row["actors"] = monitor.actor_list(model)
        row["at"] = time.time()
        rows.append(row)
    return rows


def read_status(cfg: AppConfig, settings: Settings, wait_s: float = 1.5) -> list[dict[str, Any]]:
    """One-shot `snapshot`: subscribe, let the retained status arrive, read Redis."""
    monitor = StatusMonitor(cfg, settings)
    try:
        time.sleep(wait_s)  # retained messages arrive right after subscribing
        return snapshot(monitor, redis.Redis.from_url(settings.redis))
    finally:
        monitor.close()


def fmt_number(value: object, digits: int = 4) -> str:
    """A figure for the terminal: `-` when unknown."""
    return f"{value:,.{digits}f}" if isinstance(value, int | float) else "-"
