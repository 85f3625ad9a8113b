"""The actor: serves predictions over MQTT with dynamic batching and hot-reloaded weights.

Requests are gathered up to `max_batch` rows or `max_wait_ms`, padded to a bucket size,
run in one `predict_on_batch`, and answered one reply per request with the version used.
A background `WeightsReloader` fetches and validates new versions; the serving loop swaps
them in between batches, so a reload never fails, drops or delays a request.
"""

from __future__ import annotations

import bisect
import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import paho.mqtt.client as mqtt
import redis

from streamlearn import codec, models
from streamlearn.config import ModelConfig
from streamlearn.errors import PayloadError, WeightsError
from streamlearn.mqtt import reply_properties
from streamlearn.names import Names
from streamlearn.payloads import PayloadParser, Request
from streamlearn.weights import WeightsStore

log = logging.getLogger(__name__)

Publish = Callable[[str, bytes, object], None]


@dataclass(frozen=True)
class Loaded:
    version: int
    arrays: dict[str, np.ndarray]
    loaded_at: float


class WeightsReloader:
    """Fetches new weights in the background; `take()` hands over a validated version once.

    Woken by the learner's announcement on the Redis channel, with a periodic check of
    `latest` as the fallback. A failed fetch or a blob that does not validate is refused
    with a log line and the actor keeps its current weights.
    """

    def __init__(self, store: WeightsStore, spec: dict, check_ms: float) -> None:
        self.store = store
        self.spec = spec
        self.check_s = check_ms / 1000
        self.refused: dict[int, str] = {}
        self._ready: Loaded | None = None
        self._seen = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self.poll()
        for target in (self._listen, self._loop):
            thread = threading.Thread(target=target, name=f"reload-{target.__name__}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def take(self) -> Loaded | None:
        with self._lock:
            ready, self._ready = self._ready, None
        return ready

    def poll(self) -> None:
        """Fetch and validate the latest version if it is new."""
        try:
            latest = self.store.latest_version()
            if latest <= self._seen or latest in self.refused:
                return
            found = self.store.fetch(latest)
            if found is None:
                return
            version, blob = found
            arrays, _ = codec.decode(blob)
            codec.check_fits(arrays, self.spec)
        except WeightsError as exc:
            self.refused[latest] = str(exc)
            log.error("refused weights v%d: %s", latest, exc)
            return
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            log.warning("weights fetch failed, keeping current weights: %s", exc)
            return
        with self._lock:
            self._ready = Loaded(version, arrays, time.time())
            self._seen = version

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.check_s)
            self._wake.clear()
            if not self._stop.is_set():
                self.poll()

    def _listen(self) -> None:
        while not self._stop.is_set():
            try:
                pubsub = self.store.redis.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(self.store.names.weights_channel)
                while not self._stop.is_set():
                    if pubsub.get_message(timeout=0.5) is not None:
                        self._wake.set()
            except (redis.ConnectionError, redis.TimeoutError):
                self._stop.wait(1.0)


@dataclass
class _Pending:
    request: Request
    topic: str
    correlation: bytes | None


class Actor:
    """Answers one model's prediction requests."""

    def __init__(
        self, cfg: ModelConfig, store: WeightsStore, names: Names, publish: Publish
    ) -> None:
        self.cfg = cfg
        self.policy = cfg.actor
        self.names = names
        self.publish_reply = publish
        self.parser = PayloadParser(cfg)
        self.model = models.build_model(cfg)
        self.reloader = WeightsReloader(store, models.spec(self.model), self.policy.reload_check_ms)
        self.version = 0
        self.loaded_at: float | None = None
        self.served = 0
        self.buckets = tuple(sorted({1, 4, 16, self.policy.max_batch} - {0}))
        self.buckets = tuple(b for b in self.buckets if b <= self.policy.max_batch)
        self._inbox: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
        self._warm_up()

    def on_message(self, _client: mqtt.Client, _userdata: object, msg: mqtt.MQTTMessage) -> None:
        """paho callback (network thread): hand over and return at once."""
        self._inbox.put(msg)

    def run(self, stop: threading.Event | None = None, max_requests: int | None = None) -> int:
        """Serve until `stop` is set or `max_requests` were answered; returns the count."""
        stop = stop or threading.Event()
        self.reloader.start()
        start = self.served
        try:
            while not stop.is_set() and (
                max_requests is None or self.served - start < max_requests
            ):
                self.reload()
                messages = self._gather()
                if messages:
                    self.serve(messages)
        finally:
            self.reloader.stop()
        return self.served - start

    def reload(self) -> None:
        """Swap in a new validated version, if the reloader has one (between batches)."""
        loaded = self.reloader.take()
        if loaded is not None:
            models.set_arrays(self.model, loaded.arrays)
            self.version, self.loaded_at = loaded.version, loaded.loaded_at
            log.debug("serving weights version %d", self.version)

    def serve(self, messages: list[mqtt.MQTTMessage]) -> None:
        """Answer a batch of request messages with one forward pass."""
        if self.version == 0:  # block on first use: the first version may just have appeared
            self.reloader.poll()
            self.reload()
        pending: list[_Pending] = []
        for msg in messages:
            topic, correlation = self._reply_route(msg)
            try:
                request = self.parser.parse_request(msg.payload)
            except PayloadError as exc:
                rid, reply_to = _salvage(msg.payload)
                topic = self._response_topic(msg) or reply_to or topic
                self._reply(topic, correlation, {"id": rid, "error": str(exc)})
                continue
            topic = self._response_topic(msg) or request.reply_to or topic
            if self.version == 0:
                self._reply(
                    topic,
                    correlation,
                    {
                        "id": request.id,
                        "error": f"no weights published yet for model {self.cfg.name!r}",
                    },
                )
                continue
            pending.append(_Pending(request, topic, correlation))
        if not pending:
            return
        outputs = self.predict(np.concatenate([p.request.x for p in pending]))
        row = 0
        for p in pending:
            n = len(p.request.x)
            y = [self._format(o) for o in outputs[row : row + n]]
            row += n
            self._reply(
                p.topic,
                p.correlation,
                {
                    "id": p.request.id,
                    "y": y if p.request.batched else y[0],
                    "version": self.version,
                },
            )

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Forward pass over any number of rows, in padded bucket-sized chunks."""
        out = []
        for start in range(0, len(x), self.policy.max_batch):
            chunk = x[start : start + self.policy.max_batch]
            n = len(chunk)
            bucket = self.buckets[bisect.bisect_left(self.buckets, n)]
            padded = np.zeros((bucket, *chunk.shape[1:]), np.float32)
            padded[:n] = chunk
            out.append(np.asarray(self.model.predict_on_batch(padded))[:n])
        return np.concatenate(out)

    def weights_age_s(self) -> float | None:
        return None if self.loaded_at is None else time.time() - self.loaded_at

    # -- helpers -------------------------------------------------------------------------

    def _gather(self) -> list[mqtt.MQTTMessage]:
        try:
            messages = [self._inbox.get(timeout=0.1)]
        except queue.Empty:
            return []
        deadline = time.monotonic() + self.policy.max_wait_ms / 1000
        while len(messages) < self.policy.max_batch:
            remaining = deadline - time.monotonic()
            try:
                messages.append(
                    self._inbox.get(timeout=remaining)
                    if remaining > 0
                    else self._inbox.get_nowait()
                )
            except queue.Empty:
                break
        return messages

    def _format(self, output: np.ndarray) -> float | list[float]:
        if self.cfg.task == "multiclass":
            return [float(p) for p in output]
        return float(output[0])

    def _response_topic(self, msg: mqtt.MQTTMessage) -> str | None:
        return getattr(msg.properties, "ResponseTopic", None) if msg.properties else None

    def _reply_route(self, msg: mqtt.MQTTMessage) -> tuple[str, bytes | None]:
        correlation = getattr(msg.properties, "CorrelationData", None) if msg.properties else None
        return self._response_topic(msg) or self.names.predictions_topic, correlation

    def _reply(self, topic: str, correlation: bytes | None, body: dict) -> None:
        body["model"] = self.cfg.name
        self.publish_reply(topic, json.dumps(body).encode(), reply_properties(correlation))
        self.served += 1

    def _warm_up(self) -> None:
        for bucket in self.buckets:
            self.model.predict_on_batch(np.zeros((bucket, *self.cfg.sample_shape), np.float32))


def _salvage(raw: bytes) -> tuple[str | int | None, str | None]:
    """The id and reply_to of an invalid request, where it is JSON enough to have them."""
    try:
        doc = json.loads(raw)
        rid, reply_to = doc.get("id"), doc.get("reply_to")
    except (ValueError, AttributeError, UnicodeDecodeError):
        return None, None
    rid = rid if isinstance(rid, str | int) and not isinstance(rid, bool) else None
    valid_topic = isinstance(reply_to, str) and reply_to and not set(reply_to) & set("#+")
    return rid, reply_to if valid_topic else None
