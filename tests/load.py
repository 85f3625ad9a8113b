"""Prediction requests at a steady rate over real MQTT, for tests of actors under load."""

from __future__ import annotations

import json
import threading
import time

import paho.mqtt.client as paho

import streamlearn
from streamlearn import mqtt_packets
from streamlearn.config import Settings
from streamlearn.contract.names import Names


class RequestLoad:
    """Requests for `x` on a fixed schedule from the public client's connection, whatever
    the replies.

    Request i carries correlation data i, so every reply is matched to its request. The
    requests are published here rather than with `predict_async`, which keeps one reply
    per request: a test of actors must see every reply, a second one to a request too.
    """

    def __init__(self, settings: Settings, names: Names, rate: float, x: list) -> None:
        self.names = names
        self.rate = rate
        self.x = x
        self.sent_at: list[float] = []
        self.replies: dict[int, dict] = {}
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self.device = streamlearn.Client(settings.mqtt, topic_prefix=settings.topic_prefix)
        self.client = self.device.mqtt
        own = self.device.client_id
        self.request_topic = names.topic(f"predict/{own}")
        self.reply_topic = names.topic(f"replies/{own}/load")
        self.client.message_callback_add(self.reply_topic, self._on_reply)
        self._sender = threading.Thread(target=self._send)
        self._sender.start()

    def _send(self) -> None:
        start = time.monotonic()
        while not self._stop.wait(
            max(0.0, start + len(self.sent_at) / self.rate - time.monotonic())
        ):
            i = len(self.sent_at)
            props = mqtt_packets.request_properties(self.reply_topic, i.to_bytes(4, "big"))
            body = json.dumps({"x": self.x, "id": i})
            self.client.publish(self.request_topic, body, qos=1, properties=props)
            self.sent_at.append(time.monotonic())

    def _on_reply(self, _c: object, _u: object, msg: paho.MQTTMessage) -> None:
        with self._cond:
            key = int.from_bytes(msg.properties.CorrelationData, "big")
            self.replies[key] = json.loads(msg.payload)
            self._cond.notify_all()

    def wait_for_version(self, version: int, timeout_s: float = 15) -> None:
        def served() -> bool:
            return any(r.get("version") == version for r in self.replies.values())

        with self._cond:
            if not self._cond.wait_for(served, timeout_s):
                raise AssertionError(f"version {version} not served within {timeout_s} s")

    def served_by(self, variant: str) -> int:
        with self._cond:
            return sum(r.get("variant") == variant for r in self.replies.values())

    def stop(self, timeout_s: float = 10) -> None:
        """Stop sending and wait (bounded) for the replies still due."""
        self._stop.set()
        self._sender.join()
        with self._cond:
            self._cond.wait_for(lambda: len(self.replies) >= len(self.sent_at), timeout_s)
        self.device.close()

    def unanswered(self) -> list[int]:
        return [i for i in range(len(self.sent_at)) if i not in self.replies]
