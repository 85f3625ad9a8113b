"""What the service reports about itself: retained status topics plus queue figures.

Shared by `streamlearn status`, the live line of `streamlearn up` and the dashboard. It
also reads the broker's own counters (Mosquitto's `$SYS/broker/...`, where the account
may read them): a QoS 1 message the broker drops because a client's queue is full is a
sample it has already acknowledged to a device, lost without any other trace.
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
from streamlearn.stream import GROUP

# Mosquitto 2.0's $SYS topics (retained, republished every sys_interval) -> field names.
BROKER_TOPICS = {
    "$SYS/broker/publish/messages/dropped": "dropped_messages",
    "$SYS/broker/load/publish/dropped/5min": "dropped_per_min_5min",
    "$SYS/broker/store/messages/count": "stored_messages",
    "$SYS/broker/store/messages/bytes": "stored_bytes",
    "$SYS/broker/uptime": "uptime_s",
}


class StatusMonitor:
    """Keeps the latest retained learner status of each model (and actor status, if any)."""

    def __init__(self, cfg: AppConfig, settings: Settings) -> None:
        self.names = {m: Names(m, settings.topic_prefix, settings.key_prefix) for m in cfg.models}
        self.learners: dict[str, dict[str, Any]] = {}
        self.actors: dict[str, dict[str, dict[str, Any]]] = {m: {} for m in cfg.models}
        self._broker: dict[str, float] = {}
        # Set once every broker counter has come. The broker sends retained messages in the
        # order of the subscriptions, and these come last: by then the status has come too.
        self.broker_seen = threading.Event()
        self._lock = threading.Lock()
        topics = [(n.status_topic, 0) for n in self.names.values()]
        topics += [(n.topic("actors/+"), 0) for n in self.names.values()]
        topics += [(topic, 0) for topic in BROKER_TOPICS]
        self.client = mqtt.connect(
            settings.mqtt,
            subscriptions=topics,
            on_message=self._on_message,
            ca_file=settings.mqtt_ca_file,
        )

    def _on_message(self, _c: object, _u: object, msg: paho.MQTTMessage) -> None:
        if msg.topic in BROKER_TOPICS:
            self._on_broker_counter(BROKER_TOPICS[msg.topic], msg.payload)
            return
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

    def _on_broker_counter(self, field: str, payload: bytes) -> None:
        try:
            value = float(payload.split()[0])  # "12", "0.50", "3600 seconds"
        except (ValueError, IndexError):
            return
        with self._lock:
            self._broker[field] = value if "per_min" in field else int(value)
            if len(self._broker) == len(BROKER_TOPICS):
                self.broker_seen.set()

    def broker(self) -> dict[str, Any]:
        """The broker's counters, `{}` where this account may not read them."""
        with self._lock:
            figures: dict[str, Any] = dict(self._broker)
        dropped = figures.get("dropped_messages", 0)
        if dropped:
            figures["warning"] = (
                f"the broker dropped {dropped} messages since it started: a client's queue "
                "was full (max_queued_messages / max_queued_bytes), so QoS 1 samples it had "
                "acknowledged to devices were lost"
            )
        return figures

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
    """One row per model: learner status, queue figures, live actors, broker counters."""
    rows = []
    broker = monitor.broker()
    for model, names in monitor.names.items():
        row: dict[str, Any] = {"model": model, **monitor.learner(model)}
        row.update(queue_figures(r, names))
        row.update(read_standings(r, names))
        row["actors"] = monitor.actor_list(model)
        row["broker"] = broker
        row["at"] = time.time()
        rows.append(row)
    return rows


def read_status(cfg: AppConfig, settings: Settings, wait_s: float = 1.5) -> list[dict[str, Any]]:
    """One-shot `snapshot`: subscribe, let the retained status arrive, read Redis.

    Waits up to `wait_s` for the retained messages, less once the broker counters (the last
    subscription) have come; an account without `$SYS` rights waits the whole time.
    """
    monitor = StatusMonitor(cfg, settings)
    try:
        monitor.broker_seen.wait(wait_s)
        return snapshot(monitor, redis.Redis.from_url(settings.redis))
    finally:
        monitor.close()


def fmt_number(value: object, digits: int = 4) -> str:
    """A figure for the terminal: `-` when unknown."""
    return f"{value:,.{digits}f}" if isinstance(value, int | float) else "-"


def broker_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The broker's line of `streamlearn status`, a warning first when it dropped messages."""
    broker = rows[0].get("broker", {}) if rows else {}
    if "dropped_messages" not in broker:
        return ["broker: counters not readable by this account ($SYS/broker/...)"]
    lines = [f"WARNING: {broker['warning']}"] if "warning" in broker else []
    lines.append(
        f"broker: {broker['dropped_messages']} messages dropped "
        f"({fmt_number(broker.get('dropped_per_min_5min'), 1)}/min over 5 min), "
        f"{broker.get('stored_messages', '-')} stored ({broker.get('stored_bytes', '-')} bytes), "
        f"up {broker.get('uptime_s', '-')} s"
    )
    return lines
