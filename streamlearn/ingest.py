"""Ingest: MQTT sample messages -> validated, packed stream entries in Redis.

paho's network thread only enqueues; the loop here validates a run of messages, writes
them to Redis in one pipeline and only then acknowledges them to the broker, so a crash at
any point leaves unacknowledged messages with the broker, never a lost sample.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass

import paho.mqtt.client as mqtt
import redis
from redis.backoff import ExponentialBackoff

from streamlearn.config import IngestConfig
from streamlearn.payloads import PayloadParser, Rejection, Samples
from streamlearn.queue import SampleQueue

log = logging.getLogger(__name__)


@dataclass
class IngestCounters:
    messages: int = 0
    samples: int = 0
    rejected: int = 0
    redis_errors: int = 0


class Ingest:
    """Moves sample messages from an MQTT subscription into a `SampleQueue`."""

    def __init__(
        self,
        parser: PayloadParser,
        sample_queue: SampleQueue,
        cfg: IngestConfig,
        max_run: int = 500,
    ) -> None:
        self.parser = parser
        self.queue = sample_queue
        self.cfg = cfg
        self.max_run = max_run
        self.counters = IngestCounters()
        self._inbox: queue.Queue[tuple[mqtt.Client, mqtt.MQTTMessage]] = queue.Queue()
        self._backoff = ExponentialBackoff(cap=5.0, base=0.05)

    def on_message(self, client: mqtt.Client, _userdata: object, msg: mqtt.MQTTMessage) -> None:
        """paho callback (network thread): hand over and return at once."""
        self._inbox.put((client, msg))

    def run(self, stop: threading.Event | None = None, max_messages: int | None = None) -> int:
        """Process messages until `stop` is set or `max_messages` are done; returns the count."""
        stop = stop or threading.Event()
        done = 0
        while not stop.is_set() and (max_messages is None or done < max_messages):
            batch = self._take(self.max_run if max_messages is None else max_messages - done)
            if batch:
                self._process(batch, stop)
                done += len(batch)
        return done

    def _take(self, limit: int) -> list[tuple[mqtt.Client, mqtt.MQTTMessage]]:
        try:
            batch = [self._inbox.get(timeout=0.1)]
        except queue.Empty:
            return []
        while len(batch) < limit:
            try:
                batch.append(self._inbox.get_nowait())
            except queue.Empty:
                break
        return batch

    def _process(
        self, batch: list[tuple[mqtt.Client, mqtt.MQTTMessage]], stop: threading.Event
    ) -> None:
        accepted: list[Samples] = []
        rejected: list[tuple[str, Rejection]] = []
        for _, msg in batch:
            samples, rejections = self.parser.parse_samples(msg.payload)
            if samples is not None:
                accepted.append(samples)
            rejected.extend((msg.topic, r) for r in rejections)
        self._write(accepted, rejected, stop)
        for client, msg in batch:
            client.ack(msg.mid, msg.qos)
        self.counters.messages += len(batch)
        self.counters.samples += sum(len(s) for s in accepted)
        self.counters.rejected += len(rejected)

    def _write(
        self, accepted: list[Samples], rejected: list[tuple[str, Rejection]], stop: threading.Event
    ) -> None:
        """Write to Redis, retrying with backoff for as long as Redis is unreachable."""
        failures = 0
        while True:
            try:
                self.queue.write(
                    accepted,
                    rejected,
                    deadletter_maxlen=self.cfg.deadletter_maxlen,
                    deadletter_payload_bytes=self.cfg.deadletter_payload_bytes,
                )
                return
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                failures += 1
                self.counters.redis_errors += 1
                delay = self._backoff.compute(failures)
                log.warning("redis write failed (%s); retry %d in %.2f s", exc, failures, delay)
                if stop.wait(delay) and failures > 3:
                    raise
