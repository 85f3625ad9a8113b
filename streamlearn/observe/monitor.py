"""What the service reports about itself: retained status topics plus queue figures.

Shared by `streamlearn status`, the live line of `streamlearn up` and the dashboard. It
also reads the broker's own counters (Mosquitto's `$SYS/broker/...`, where the account
may read them): a QoS 1 message the broker drops because a client's queue is full is a
sample it has already acknowledged to a device, lost without any other trace.

A retained status outlives its publisher, so every status is judged by its age (its
`updated_at`) and, for the learner and ingest, by their presence markers
(`streamlearn.observe.presence.Presence`, cleared by the broker when the process dies): a dead
learner reads as offline, a hung one as stale, never as alive.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from typing import Any, cast

import paho.mqtt.client as paho
import redis

from streamlearn import mqtt
from streamlearn.config.app import BASE_VARIANT, AppConfig
from streamlearn.config.settings import Settings
from streamlearn.contract.names import Names
from streamlearn.observe import presence
from streamlearn.store import redis_client
from streamlearn.store.lease import read_holder
from streamlearn.store.standings import read_standings
from streamlearn.store.stream import GROUP

# Mosquitto 2.0's $SYS topics (retained, republished every sys_interval) -> field names.
BROKER_TOPICS = {
    "$SYS/broker/publish/messages/dropped": "dropped_messages",
    "$SYS/broker/load/publish/dropped/5min": "dropped_per_min_5min",
    "$SYS/broker/store/messages/count": "stored_messages",
    "$SYS/broker/store/messages/bytes": "stored_bytes",
    "$SYS/broker/uptime": "uptime_s",
}


# A status not refreshed for this many of its publish intervals (and at least
# STALE_MIN_S, for clock skew and a slow step) is stale: its publisher is hung or gone.
STALE_INTERVALS = 5
STALE_MIN_S = 15.0


def stale_after_s(status_every_ms: float) -> float:
    """How old a status published every `status_every_ms` may get before it is stale.

    >>> stale_after_s(1000), stale_after_s(10_000)
    (15.0, 50.0)
    """
    return max(STALE_MIN_S, STALE_INTERVALS * status_every_ms / 1000)


class StatusMonitor:
    """Keeps the latest retained learner status of each model, its actors' statuses and
    the presence markers of its learners and ingest processes."""

    def __init__(self, cfg: AppConfig, settings: Settings) -> None:
        self.names = {m: Names(m, settings.topic_prefix, settings.key_prefix) for m in cfg.models}
        self.partitions = {m: cfg.model(m).ingest.partitions for m in cfg.models}
        self.leases = {m: lease_keys(self.names[m], [*c.variants]) for m, c in cfg.models.items()}
        self.stale_after_s = {
            m: {
                "learner": stale_after_s(c.learner.status_every_ms),
                "actor": stale_after_s(c.actor.status_every_ms),
            }
            for m, c in cfg.models.items()
        }
        self.learners: dict[str, dict[str, Any]] = {}
        self.actors: dict[str, dict[str, dict[str, Any]]] = {m: {} for m in cfg.models}
        # (role, instance) -> marker, per model
        self.presence: dict[str, dict[tuple[str, str], dict[str, Any]]] = {
            m: {} for m in cfg.models
        }
        # (role, instance) -> `presence.away` figures of a worker whose session outlives it
        self.gone: dict[str, dict[tuple[str, str], dict[str, Any]]] = {m: {} for m in cfg.models}
        self._broker: dict[str, float] = {}
        # Set once every broker counter has come. The broker sends retained messages in the
        # order of the subscriptions, and these come last: by then the status has come too.
        self.broker_seen = threading.Event()
        self._lock = threading.Lock()
        topics = [(n.topic("status/#"), 0) for n in self.names.values()]  # with `status`
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
            self._on_broker_counter(BROKER_TOPICS[msg.topic], cast(bytes, msg.payload))
            return
        try:
            doc = json.loads(msg.payload) if msg.payload else None
        except ValueError:
            return
        place = self._place(msg.topic)
        if place is None:
            return
        model, leaf = place
        kind, _, rest = leaf.partition("/")
        with self._lock:
            if leaf == "status":
                if isinstance(doc, dict):
                    self.learners[model] = doc
            elif kind == "status" and rest.count("/") == 1:
                role, instance = rest.split("/")
                self.gone[model].pop((role, instance), None)
                if isinstance(doc, dict) and doc.get("online") is not False:
                    self.presence[model][(role, instance)] = doc
                else:  # cleared, or "gone": the process stopped or died
                    self.presence[model].pop((role, instance), None)
                    remaining = getattr(msg.properties, "MessageExpiryInterval", None)
                    figures = None
                    if isinstance(doc, dict):
                        figures = presence.away(doc, remaining, time.time())
                    if figures is not None:
                        self.gone[model][(role, instance)] = figures
            elif kind == "actors" and rest and "/" not in rest:
                if isinstance(doc, dict):
                    self.actors[model][rest] = doc
                else:  # an empty retained message clears a stopped actor
                    self.actors[model].pop(rest, None)

    def _place(self, topic: str) -> tuple[str, str] | None:
        """(model, leaf) of one of our models' topics (a prefix may contain slashes)."""
        for model, names in self.names.items():
            head = names.topic("")
            if topic.startswith(head):
                return model, topic[len(head) :]
        return None

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

    def present(self, model: str, role: str) -> list[dict[str, Any]]:
        """The presence markers of `role` ("learner", "ingest") for `model`, by instance."""
        with self._lock:
            found = self.presence.get(model, {}).items()
            return [{"id": i, **doc} for (r, i), doc in sorted(found) if r == role]

    def away(self, model: str, role: str) -> list[dict[str, Any]]:
        """The workers of `role` that left while the broker keeps their session, as of now:
        `away_s` and `expires_in_s` (`streamlearn.observe.presence.away`)."""
        now = time.time()
        with self._lock:
            found = [doc for (r, _), doc in sorted(self.gone.get(model, {}).items()) if r == role]
        out = []
        for doc in found:
            waited = now - doc["at"]
            if doc["expires_in_s"] - waited > 0:
                out.append(
                    {
                        "id": doc["id"],
                        "away_s": round(doc["away_s"] + waited),
                        "expires_in_s": round(doc["expires_in_s"] - waited),
                    }
                )
        return out

    def close(self) -> None:
        mqtt.close(self.client)


def queue_figures(
    r: redis.Redis, names: Names, group: str = GROUP, partitions: int = 1
) -> dict[str, int | None]:
    """Length, entries `group` has not acknowledged (over every stream partition), dead
    letters of one model; its latest and pinned weights versions."""
    streams = [names.of_partition(i).samples_key for i in range(partitions)]
    pipe = r.pipeline(transaction=False)
    pipe.xlen(names.deadletter_key)
    pipe.get(names.latest_key)
    pipe.get(names.pin_key)
    for key in streams:
        pipe.xlen(key)
    dead, latest, pinned, *lengths = pipe.execute()
    length, pending = sum(lengths), 0
    for key, n in zip(streams, lengths, strict=True):
        if n:
            with contextlib.suppress(redis.ResponseError):  # no consumer group yet
                pending += r.xpending(key, group)["pending"]
    return {
        "queue_length": length,
        "pending": pending,
        "deadletters": dead,
        "latest_version": int(latest or 0),
        "pinned_version": None if pinned is None else int(pinned),
    }


def snapshot(monitor: StatusMonitor, r: redis.Redis) -> list[dict[str, Any]]:
    """One row per model: learner status, queue figures, live actors, broker counters."""
    rows = []
    broker = monitor.broker()
    for model, names in monitor.names.items():
        row: dict[str, Any] = {"model": model, **monitor.learner(model)}
        row.update(queue_figures(r, names, partitions=monitor.partitions[model]))
        row.update(read_standings(r, names))
        row["actors"] = monitor.actor_list(model)
        row["broker"] = broker
        row["at"] = now = time.time()
        limits = monitor.stale_after_s[model]
        row["status_age_s"] = age_s(row, now)
        row["learners_online"] = monitor.present(model, "learner")
        row["leases"] = {v: lease_holder(r, key) for v, key in monitor.leases[model].items()}
        row["learner_state"] = learner_state(row, limits["learner"])
        row["ingest_online"] = monitor.present(model, "ingest")
        row["ingest_away"] = monitor.away(model, "ingest")
        for a in row["actors"]:
            a["age_s"] = age_s(a, now)
            a["stale"] = a["age_s"] is not None and a["age_s"] > limits["actor"]
        rows.append(row)
    return rows


def lease_keys(names: Names, variants: list[str]) -> dict[str, str]:
    """Each learner's lease key (`streamlearn.store.lease`), by variant.

    >>> lease_keys(Names("m"), [])
    {'base': 'sl:{m}:learner:lease'}
    """
    if not variants:
        return {BASE_VARIANT: names.lease_key}
    return {v: names.of_variant(v).lease_key for v in [BASE_VARIANT, *variants]}


def lease_holder(r: redis.Redis, key: str) -> dict[str, Any] | None:
    """A lease's holder (its token) and the seconds left unless renewed; None: nobody."""
    holder = read_holder(r, key)
    return None if holder is None else {"holder": holder.token, "left_s": holder.expires_in_s}


def age_s(status: dict[str, Any], now: float) -> float | None:
    """Seconds since the status was published (its `updated_at`); None if it has none."""
    at = status.get("updated_at")
    return round(max(0.0, now - at), 1) if isinstance(at, int | float) else None


def learner_state(row: dict[str, Any], stale_after: float) -> str:
    """`online`; `offline` (its presence marker is gone: stopped or dead); `stale` (still
    connected but its status is older than `stale_after` s: hung); `starting` (present,
    no status yet, or steps still to trace: it learns, not yet at its pace); or `absent`
    (no learner ever reported)."""
    age, online = row.get("status_age_s"), bool(row.get("learners_online"))
    if not online:
        return "offline" if age is not None else "absent"
    if age is None or row.get("traces_pending"):
        return "starting"
    return "stale" if age > stale_after else "online"


def read_status(cfg: AppConfig, settings: Settings, wait_s: float = 1.5) -> list[dict[str, Any]]:
    """One-shot `snapshot`: subscribe, let the retained status arrive, read Redis.

    Waits up to `wait_s` for the retained messages, less once the broker counters (the last
    subscription) have come; an account without `$SYS` rights waits the whole time.
    """
    monitor = StatusMonitor(cfg, settings)
    try:
        monitor.broker_seen.wait(wait_s)
        return snapshot(monitor, redis_client.connect(settings.redis))
    finally:
        monitor.close()
